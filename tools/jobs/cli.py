"""`python -m tools.jobs render|check|pin|family|copy-out|teardown`: the Kubernetes manifests under jobs/."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import yaml

# The overlay an experiment Job is made from unless another is named (its GPUs, deadline, image, volumes).
DEFAULT_OVERLAY = Path("jobs/overlays/prod-4xh100")


def _render(args: argparse.Namespace) -> int:
    from tools.jobs import k8s
    from tools.jobs.claims import unknown_claim_note, use_claim
    from trm.errors import TRMError

    directory = args.directory or (DEFAULT_OVERLAY if args.experiments is not None else None)
    if directory is None:
        raise TRMError("name a kustomization directory (e.g. jobs/overlays/prod-8xh200), or --experiments P")
    jobs_dir = Path(directory).resolve().parents[1]
    if args.experiments is not None:
        from tools.jobs.experiments import experiments_job

        objects = experiments_job(args.experiments, directory, args.parallelism, claim=args.claim)
    else:
        if args.parallelism is not None:
            raise TRMError("--parallelism applies to --experiments only; drop it or add --experiments P")
        objects = k8s.render(directory)
        if args.claim is not None:
            use_claim(objects, args.claim, jobs_dir)
    note = unknown_claim_note(args.claim, jobs_dir) if args.claim is not None else None
    if note:
        print(note, file=sys.stderr)
    yaml.safe_dump_all(objects, sys.stdout, sort_keys=False, default_flow_style=False, width=200)
    return 0


def _check(args: argparse.Namespace) -> int:
    from tools.cli import task_parsers
    from tools.jobs import k8s
    from tools.jobs.experiments import experiments_job
    from trm.commands import build_parser

    overlay = args.root / DEFAULT_OVERLAY
    extra = [(overlay, experiments_job(args.experiments, overlay))]
    problems = k8s.check_jobs(
        args.root, build_parser(), version=args.kubernetes_version, extra=extra, tasks=task_parsers()
    )
    for problem in problems:
        print(problem)
    print(f"jobs: {len(problems)} problem(s) (Kubernetes {args.kubernetes_version} schemas, strict)")
    return 1 if problems else 0


def _pin(args: argparse.Namespace) -> int:
    from tools.images.imagelock import read_lock
    from tools.jobs import k8s
    from tools.jobs import sky as skytasks

    changed = k8s.pin_images(args.root, check=args.check)
    for directory in changed:
        print(f"{'stale' if args.check else 'pinned'}: {directory}/kustomization.yaml")
    tasks = skytasks.pin_tasks(args.root, read_lock(args.root), check=args.check)
    for path in tasks:
        print(f"{'stale' if args.check else 'pinned'}: {path} (image_id)")
    changed += tasks
    if args.check and changed:
        print("run `python -m tools.jobs pin` to write the digests from docker/images.lock.json")
        return 1
    print(f"jobs: {len(changed)} overlay(s) and task(s) {'stale' if args.check else 'updated'}")
    return 0


def _copy_out(args: argparse.Namespace) -> int:
    from tools.jobs.copyout import copy_out_objects

    objects = copy_out_objects(args.overlay, args.sync_to, claim=args.claim)
    yaml.safe_dump_all(objects, sys.stdout, sort_keys=False, default_flow_style=False, width=200)
    return 0


def _kubectl(cmd: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run one kubectl command line; a kubectl that is missing or hangs is a TRMError naming it."""
    from trm.errors import TRMError

    try:
        return subprocess.run(cmd, input=stdin, capture_output=True, text=True, check=False, timeout=2400)
    except FileNotFoundError as err:
        raise TRMError(
            f"`{cmd[0]}` is not on PATH; install kubectl and point it at the run's cluster"
        ) from err
    except subprocess.TimeoutExpired as err:
        raise TRMError(f"`{' '.join(cmd)}` did not answer in {err.timeout:.0f} s; rerun teardown") from err


def _cluster() -> list[str]:
    """`--context=C --namespace=N` of kubectl's current context, read once: every command of a teardown then
    acts where the proof was read, even if the current context or namespace changes meanwhile."""
    from trm.errors import TRMError

    got = _kubectl(["kubectl", "config", "current-context"])
    context = got.stdout.strip()
    if got.returncode != 0 or not context:
        raise TRMError(
            f"kubectl has no current context ({got.stderr.strip()}); choose the run's cluster with "
            "`kubectl config use-context NAME`"
        )
    got = _kubectl(["kubectl", "config", "view", "--minify", "-o", "jsonpath={..namespace}"])
    return [f"--context={context}", f"--namespace={got.stdout.strip() or 'default'}"]


def _teardown(args: argparse.Namespace) -> int:
    from tools.jobs.copyout import REMOVED_LINE, run_of, teardown

    run_name = run_of(args.overlay, args.claim).run_name
    where = _cluster()
    print(f"teardown in {' '.join(where)}")

    def run(cmd: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
        acts = cmd[1] in ("delete", "apply", "wait") or (cmd[1] == "logs" and "trm-remove-run-" in cmd[-1])
        if args.dry_run and acts:
            print("would run:", " ".join(cmd))
            # the remover's log as it would read, so that the dry run walks every step
            log = f"{REMOVED_LINE}: /workspace/checkpoints/{run_name}" if cmd[1] == "logs" else ""
            return subprocess.CompletedProcess(cmd, 0, log, "")
        return _kubectl([*cmd, *where], stdin)

    done = teardown(args.overlay, run, secrets=args.delete_secrets, claim=args.claim)
    if not args.dry_run:
        for cmd in done:
            print("done:", " ".join(cmd))
    return 0


def _family(args: argparse.Namespace) -> int:
    from tools.jobs.family import choose, read_nodes, write

    choice = choose(args.overlay, read_nodes(args.nodes))
    print(choice.summary())
    if args.write:
        for path in write(choice):
            print(f"wrote {path}")
        print("next: python -m tools.jobs pin (the variant's pushed digest), python -m tools.jobs check")
    elif choice.variant != choice.current:
        print(f"run again with --write to deploy {choice.variant} from {args.overlay}")
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    from tools.jobs.k8s import KUBERNETES_VERSION

    sub = parser.add_subparsers(dest="jobs_command", metavar="ACTION", required=True)
    render = sub.add_parser("render", help="print the objects a kustomization directory renders to")
    render.add_argument(
        "directory",
        type=Path,
        nargs="?",
        help="e.g. jobs/overlays/prod-8xh200; with --experiments the overlay the Job is made from "
        f"(default {DEFAULT_OVERLAY})",
    )
    render.add_argument(
        "--experiments",
        metavar="P",
        help="render one Indexed Job running the experiments that P selects (a glob or a prefix of names, "
        "`python -m trm experiment list`): pod i runs experiment i through the launcher",
    )
    render.add_argument(
        "--parallelism",
        type=int,
        help="with --experiments: pods at a time (default: all experiments at once on a ReadWriteMany "
        "claim, one at a time on a ReadWriteOnce one, where more is refused)",
    )
    render.add_argument(
        "--claim",
        metavar="NAME",
        help="the PersistentVolumeClaim the Job mounts instead of the overlay's: trm-workspace-shared (the "
        "ReadWriteMany claim of jobs/storage/rwx) on a cluster that has only that one, e.g. `render "
        "jobs/overlays/smoke --claim trm-workspace-shared | kubectl apply -f -`; with --experiments, for pods "
        "on several nodes at once. A multi-node Job is refused on a claim that is not ReadWriteMany",
    )
    render.set_defaults(func=_render)
    check = sub.add_parser("check", help="schema-validate every overlay offline and check the job rules")
    check.add_argument(
        "--kubernetes-version", default=KUBERNETES_VERSION, help="schema version (default %(default)s)"
    )
    check.add_argument(
        "--experiments",
        metavar="P",
        default="exp",
        help="also check the Indexed Job of these experiments, made from "
        f"{DEFAULT_OVERLAY} (default %(default)s: the paper's suites)",
    )
    check.set_defaults(func=_check)
    pin = sub.add_parser(
        "pin",
        help="write each overlay's image digest and each SkyPilot task's image_id from docker/images.lock.json",
    )
    pin.add_argument("--check", action="store_true", help="only report stale overlays (exit 1)")
    pin.set_defaults(func=_pin)
    copy_out = sub.add_parser(
        "copy-out",
        help="print the copy-out pod for OVERLAY's run and volume (pipe into kubectl apply -f -): it copies "
        "the run to SYNC_TO/RUN_NAME and verifies the copy (rclone check)",
    )
    copy_out.add_argument(
        "overlay", type=Path, help="the overlay that trained the run, e.g. jobs/overlays/prod-4xh100"
    )
    copy_out.add_argument(
        "--sync-to", required=True, metavar="REMOTE", help="rclone remote:path, e.g. store:bucket/runs"
    )
    copy_out.set_defaults(func=_copy_out)
    teardown = sub.add_parser(
        "teardown",
        help="after the verified copy-out of OVERLAY's run (that RUN_NAME, that claim, started after the Job "
        "ended), in kubectl's current context and namespace read once: delete its finished Job, "
        "its volume when the claim is the run's own (annotated trm-stack/run=RUN_NAME) or else only its "
        "directories on the shared volume, and the copy-out pod last; without the verified copy it deletes "
        "nothing (exit 2); after a failed step a rerun finishes the job",
    )
    teardown.add_argument("overlay", type=Path, help="the overlay that trained the run")
    teardown.add_argument(
        "--dry-run", action="store_true", help="check the copy-out, print the deletes, run none"
    )
    teardown.add_argument(
        "--delete-secrets",
        action="store_true",
        help="also delete the Secrets trm-wandb and trm-rclone (they serve every run on the cluster: only "
        "after the last one)",
    )
    teardown.set_defaults(func=_teardown)
    for p in (copy_out, teardown):
        p.add_argument(
            "--claim",
            metavar="NAME",
            help="the claim the Job was rendered onto with `render --claim` (default: the overlay's own)",
        )
    family = sub.add_parser(
        "family",
        help="pick OVERLAY's image (CUDA 13.0 or 12.8 family) from the cluster's GPU nodes: their "
        "nvidia.com/gpu.product and nvidia.com/cuda.driver.major labels; --write puts it into the overlay",
    )
    family.add_argument("overlay", type=Path, help="e.g. jobs/overlays/prod-4xh100")
    family.add_argument(
        "--nodes",
        required=True,
        metavar="FILE",
        help="`kubectl get nodes -o json` saved to FILE, or - to read it from standard input",
    )
    family.add_argument(
        "--write",
        action="store_true",
        help="write the variant annotation and the driver floor into the overlay",
    )
    family.set_defaults(func=_family)
    for p in (check, pin):
        p.add_argument("--root", type=Path, default=Path("."), help="repository root (default: .)")


def main(argv: list[str] | None = None) -> int:
    """`python -m tools.jobs ARGS`: parse `argv` (default: sys.argv[1:]) and run (tools.cli.TASKS)."""
    from tools.cli import main as run_task

    return run_task("jobs", argv)
