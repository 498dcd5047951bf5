"""Copy a Kubernetes run off its volume, verified, and only then delete what keeps billing.

`python -m tools.jobs copy-out OVERLAY --sync-to REMOTE` renders jobs/tools/copy-out for the run the overlay
trains: the overlay's RUN_NAME and the volume its Job mounts (the single-node claim or the multi-node
RWX one). The pod copies, then `rclone check --one-way` compares every copied file with the volume and
prints VERIFIED_LINE only when they match. `python -m tools.jobs teardown OVERLAY` deletes only what belongs
to that one run, and only after that pod (for this RUN_NAME and claim, started after the run's Job ended)
succeeded and printed the line for this run: the finished Job, then the volume when the claim is the run's own (annotated RUN_ANNOTATION), else
the run's directories on the shared volume, and the copy-out pod last.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

import yaml

from tools.jobs import k8s
from trm.errors import TRMError

COPY_OUT_DIR = Path("jobs/tools/copy-out")
VERIFIED_LINE = "copy-out verified"
# The Secrets the runbooks create by hand for a run (W&B key, the object store's keys).
RUN_SECRETS = ("trm-wandb", "trm-rclone")
WORKSPACE_VOLUME = "workspace"
# A claim made for one run carries this annotation with the run's RUN_NAME; teardown deletes only such a
# claim. Any other claim (trm-workspace, trm-workspace-shared) is shared: teardown removes the run's
# directories from it and leaves the claim to the other runs.
RUN_ANNOTATION = "trm-stack/run"
REMOVED_LINE = "run directory removed"


class Kubectl(Protocol):
    """Runs one kubectl command line (with `stdin` for `apply -f -`) and returns how it ended."""

    def __call__(self, cmd: list[str], stdin: str | None = None, /) -> subprocess.CompletedProcess: ...


_REFERENCE = re.compile(r"\$\(")


@dataclass(frozen=True)
class RunOnCluster:
    """What one overlay's Job leaves on the cluster."""

    job: str
    run_name: str
    claim: str

    @property
    def pod(self) -> str:
        return f"trm-copy-out-{self.job.removeprefix('trm-train-')}"

    @property
    def remover(self) -> str:
        return f"trm-remove-run-{self.job.removeprefix('trm-train-')}"


def run_of(overlay: str | Path, claim: str | None = None) -> RunOnCluster:
    """The Job name, RUN_NAME and workspace claim of `overlay` (`claim` when the Job was rendered onto
    another one with `render --claim`); errors name the overlay and the fix."""
    jobs = [o for o in k8s.render(overlay) if o["kind"] == "Job"]
    if len(jobs) != 1:
        raise TRMError(f"{overlay} renders {len(jobs)} Jobs; name an overlay with one trainer Job")
    job = jobs[0]
    pod = job["spec"]["template"]["spec"]
    trainer = next(c for c in pod["containers"] if c["name"] == "trainer")
    run_name = next((e.get("value", "") for e in trainer.get("env", []) if e["name"] == "RUN_NAME"), "")
    if not run_name or _REFERENCE.search(run_name):
        raise TRMError(
            f"{overlay}: RUN_NAME is {run_name or 'unset'}, not a fixed name (the smoke's runs are scratch, one "
            "per Job); copy out a production overlay, or set RUN_NAME in its job-patch.yaml"
        )
    volume = next((v for v in pod.get("volumes", []) if v["name"] == WORKSPACE_VOLUME), None)
    if volume is None or "persistentVolumeClaim" not in volume:
        raise TRMError(f"{overlay}: the Job mounts no PersistentVolumeClaim named {WORKSPACE_VOLUME!r}")
    return RunOnCluster(
        job["metadata"]["name"], run_name, claim or volume["persistentVolumeClaim"]["claimName"]
    )


def copy_out_objects(
    overlay: str | Path, sync_to: str, root: str | Path = ".", claim: str | None = None
) -> list[dict]:
    """jobs/tools/copy-out set to `overlay`'s run and volume (`claim` instead of the overlay's, as the Job
    was rendered), copying to SYNC_TO/RUN_NAME."""
    from trm.launch.storage.sync import check_remote

    remote = check_remote(sync_to)
    if not remote:
        raise TRMError(
            "--sync-to: give the rclone remote:path the run is copied under (e.g. store:bucket/runs)"
        )
    run = run_of(Path(root) / overlay, claim)
    objects = copy.deepcopy(k8s.render(Path(root) / COPY_OUT_DIR))
    (pod,) = [o for o in objects if o["kind"] == "Pod"]
    pod["metadata"]["name"] = run.pod
    spec = pod["spec"]
    for volume in spec["volumes"]:
        if volume["name"] == WORKSPACE_VOLUME:
            volume["persistentVolumeClaim"]["claimName"] = run.claim
    (container,) = spec["containers"]
    values = {"RUN_NAME": run.run_name, "SYNC_TO": remote}
    container["env"] = [e for e in container.get("env", []) if e["name"] not in values] + [
        {"name": k, "value": v} for k, v in values.items()
    ]
    return objects


def remover_objects(target: RunOnCluster, root: str | Path = ".") -> list[dict]:
    """The pod that removes `target`'s own directories (checkpoints/RUN_NAME, artifacts/RUN_NAME) from a
    shared volume: the copy-out pod's image and security context, the volume mounted read-write, no Secret.
    Its log ends with REMOVED_LINE and lists the runs still on the volume."""
    objects = copy.deepcopy(k8s.render(Path(root) / COPY_OUT_DIR))
    (pod,) = [o for o in objects if o["kind"] == "Pod"]
    pod["metadata"]["name"] = target.remover
    pod["metadata"]["labels"]["app.kubernetes.io/component"] = "remove-run"
    spec = pod["spec"]
    spec["activeDeadlineSeconds"] = 3600
    for volume in spec["volumes"]:
        if volume["name"] == WORKSPACE_VOLUME:
            volume["persistentVolumeClaim"] = {"claimName": target.claim}
    (container,) = spec["containers"]
    container["name"] = "remove-run"
    container.pop("envFrom", None)
    container["env"] = [{"name": "HOME", "value": "/tmp"}, {"name": "RUN_NAME", "value": target.run_name}]
    for mount in container["volumeMounts"]:
        mount.pop("readOnly", None)
    container["args"] = [
        'case "$RUN_NAME" in ""|.|..|*/*) echo "RUN_NAME=$RUN_NAME names no run directory" >&2; exit 2;; esac\n'
        'rm -rf -- "/workspace/checkpoints/${RUN_NAME}" "/workspace/artifacts/${RUN_NAME}"\n'
        'echo "runs left on the volume:" $(ls -A /workspace/checkpoints)\n'
        f'echo "{REMOVED_LINE}: /workspace/checkpoints/${{RUN_NAME}}"\n'
    ]
    return objects


def _json(result: subprocess.CompletedProcess) -> dict:
    try:
        data = json.loads(result.stdout or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def verified_copy_problem(target: RunOnCluster, run: Kubectl) -> str | None:
    """Why the copy-out pod of `target` is no proof of a verified copy of THAT run (None: it is): it must
    have succeeded, copied this RUN_NAME from this claim, printed the verified line for this run, and
    started after the run's Job ended (`copy_after_the_job_problem`). A failed read is a problem too."""
    got = run(["kubectl", "get", "pod", target.pod, "--ignore-not-found", "-o", "json"])
    if got.returncode != 0:
        return f"`kubectl get pod {target.pod}` failed ({got.stderr.strip()})"
    pod = _json(got)
    if not pod:
        return f"there is no copy-out pod {target.pod}"
    phase = pod.get("status", {}).get("phase", "unknown")
    if phase != "Succeeded":
        return f"copy-out pod {target.pod} is {phase}, not Succeeded"
    spec = pod.get("spec", {})
    env = {e.get("name"): e.get("value") for c in spec.get("containers", []) for e in c.get("env", [])}
    if env.get("RUN_NAME") != target.run_name:
        return f"copy-out pod {target.pod} copied run {env.get('RUN_NAME')!r}, not {target.run_name!r}"
    claims = {
        v["persistentVolumeClaim"].get("claimName")
        for v in spec.get("volumes", [])
        if v.get("name") == WORKSPACE_VOLUME and "persistentVolumeClaim" in v
    }
    if claims != {target.claim}:
        return f"copy-out pod {target.pod} read the volume {sorted(claims)}, not {target.claim!r}"
    logs = run(["kubectl", "logs", f"pod/{target.pod}"])
    if f"{VERIFIED_LINE}: /workspace/checkpoints/{target.run_name} -> " not in logs.stdout:
        return f"the log of copy-out pod {target.pod} has no '{VERIFIED_LINE}' line for {target.run_name}"
    return copy_after_the_job_problem(target, pod, run)


def _time(stamp: object) -> datetime | None:
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return None


def copy_after_the_job_problem(target: RunOnCluster, pod: dict, run: Kubectl) -> str | None:
    """Why the copy-out pod `pod` may miss checkpoints of `target` (None: it cannot): the run's Job must
    have ended (condition Complete or Failed) before the pod started, else the trainer wrote on after the
    copy (or still writes) and deleting the Job and the volume would lose that. A Job no longer on the
    cluster (an earlier teardown deleted it) writes nothing."""
    got = run(["kubectl", "get", "job", target.job, "--ignore-not-found", "-o", "json"])
    if got.returncode != 0:
        return f"`kubectl get job {target.job}` failed ({got.stderr.strip()})"
    job = _json(got)
    if not job:
        return None
    ended = [
        _time(c.get("lastTransitionTime"))
        for c in job.get("status", {}).get("conditions", [])
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
    ]
    if not ended or ended[0] is None:
        return (
            f"Job {target.job} has not ended (no Complete or Failed condition) and its trainer may still write "
            f"the run; wait for it to end, `kubectl delete pod {target.pod}`, then copy out again"
        )
    started = _time(pod.get("status", {}).get("startTime"))
    if started is None or started < ended[0]:
        return (
            f"copy-out pod {target.pod} started at {pod.get('status', {}).get('startTime')}, before Job "
            f"{target.job} ended at {ended[0].isoformat()}: the copy may miss its last checkpoints; "
            f"`kubectl delete pod {target.pod}`, then copy out again"
        )
    return None


def claim_is_the_runs(target: RunOnCluster, run: Kubectl) -> bool | None:
    """Whether the claim was made for this one run (annotated RUN_ANNOTATION=RUN_NAME); None when it no
    longer exists (an earlier teardown deleted it)."""
    got = run(["kubectl", "get", "pvc", target.claim, "--ignore-not-found", "-o", "json"])
    if got.returncode != 0:
        raise TRMError(
            f"`kubectl get pvc {target.claim}` failed ({got.stderr.strip()}); nothing more deleted"
        )
    claim = _json(got)
    if not claim:
        return None
    return claim.get("metadata", {}).get("annotations", {}).get(RUN_ANNOTATION) == target.run_name


def teardown(
    overlay: str | Path,
    run: Kubectl,
    root: str | Path = ".",
    *,
    secrets: bool = False,
    claim: str | None = None,
) -> list[list[str]]:
    """Delete what belongs to the overlay's one run, once the copy-out of that run is verified: its Job; its
    volume when the claim is the run's own (annotated RUN_ANNOTATION=RUN_NAME), else only its directories on
    the shared volume (a remover pod); the run Secrets only with `secrets`; the copy-out pod, the proof,
    last, so that a rerun after a partial failure still finds it and finishes. Returns the commands run.
    Raises TRMError (deleting nothing) without the verified copy, or naming the step that failed. `claim`:
    the claim the Job was rendered onto (`render --claim`) instead of the overlay's."""
    target = run_of(Path(root) / overlay, claim)
    problem = verified_copy_problem(target, run)
    if problem:
        raise TRMError(
            f"{problem}: no verified copy of {target.run_name}, nothing deleted. Run `python -m tools.jobs "
            f"copy-out {overlay} --sync-to REMOTE | kubectl apply -f -` and wait for it"
        )
    done: list[list[str]] = []

    def step(cmd: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
        result = run(cmd) if stdin is None else run(cmd, stdin)
        done.append(cmd)
        if result.returncode != 0:
            raise TRMError(
                f"`{' '.join(cmd)}` failed ({result.stderr.strip()}); the copy-out pod {target.pod} is kept: "
                "fix the cause and rerun teardown, it finishes the job"
            )
        return result

    step(["kubectl", "delete", "job", target.job, "--cascade=foreground", "--ignore-not-found"])
    own = claim_is_the_runs(target, run)
    if own:
        step(["kubectl", "delete", "pvc", target.claim, "--ignore-not-found"])
    elif own is False:  # a shared claim: only this run's directories go, the claim stays for the others
        manifest = yaml.safe_dump_all(remover_objects(target, root), sort_keys=False)
        step(["kubectl", "delete", "pod", target.remover, "--ignore-not-found"])
        step(["kubectl", "apply", "-f", "-"], manifest)
        step(
            ["kubectl", "wait", "--for=jsonpath={.status.phase}=Succeeded", f"pod/{target.remover}",
             "--timeout=30m"]
        )  # fmt: skip
        log = step(["kubectl", "logs", f"pod/{target.remover}"]).stdout
        if f"{REMOVED_LINE}: /workspace/checkpoints/{target.run_name}" not in log:
            raise TRMError(
                f"pod {target.remover} did not confirm removing {target.run_name} from {target.claim}; the "
                f"copy-out pod {target.pod} is kept: read `kubectl logs pod/{target.remover}` and rerun teardown"
            )
        step(["kubectl", "delete", "pod", target.remover, "--ignore-not-found"])
    if secrets:
        step(["kubectl", "delete", "secret", *RUN_SECRETS, "--ignore-not-found"])
    step(["kubectl", "delete", "pod", target.pod, "--ignore-not-found"])
    return done
