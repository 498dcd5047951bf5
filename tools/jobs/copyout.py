"""Copy a Kubernetes run off its volume, verified, and only then delete what keeps billing.

`python -m tools.jobs copy-out OVERLAY --sync-to REMOTE` renders jobs/tools/copy-out for the run the overlay
trains: the overlay's RUN_NAME and the volume its Job mounts (the single-node claim or the multi-node
RWX one). The pod copies, then `rclone check --one-way` compares every copied file with the volume and
prints VERIFIED_LINE only when they match. `python -m tools.jobs teardown OVERLAY` deletes the finished Job,
the copy-out pod, the volume (PVC) and the Secrets only after that pod succeeded and printed the line;
otherwise it deletes nothing.
"""

from __future__ import annotations

import copy
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tools.jobs import k8s
from trm.errors import TRMError

COPY_OUT_DIR = Path("jobs/tools/copy-out")
VERIFIED_LINE = "copy-out verified"
# The Secrets the runbooks create by hand for a run (W&B key, the object store's keys).
RUN_SECRETS = ("trm-wandb", "trm-rclone")
WORKSPACE_VOLUME = "workspace"
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


def run_of(overlay: str | Path) -> RunOnCluster:
    """The Job name, RUN_NAME and workspace claim of `overlay` (errors name the overlay and the fix)."""
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
    return RunOnCluster(job["metadata"]["name"], run_name, volume["persistentVolumeClaim"]["claimName"])


def copy_out_objects(overlay: str | Path, sync_to: str, root: str | Path = ".") -> list[dict]:
    """jobs/tools/copy-out set to `overlay`'s run and volume, copying to SYNC_TO/RUN_NAME."""
    from trm.launch.after_run.sync import check_remote

    remote = check_remote(sync_to)
    if not remote:
        raise TRMError(
            "--sync-to: give the rclone remote:path the run is copied under (e.g. store:bucket/runs)"
        )
    run = run_of(Path(root) / overlay)
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


def teardown(
    overlay: str | Path, run: Callable[[list[str]], subprocess.CompletedProcess], root: str | Path = "."
) -> list[list[str]]:
    """Delete the overlay's Job, copy-out pod, PVC and run Secrets once the copy-out is verified; returns
    the delete commands run. Raises TRMError (deleting nothing) when it is not."""
    target = run_of(Path(root) / overlay)
    phase = run(["kubectl", "get", "pod", target.pod, "-o", "jsonpath={.status.phase}"])
    logs = run(["kubectl", "logs", f"pod/{target.pod}"])
    if phase.returncode != 0 or phase.stdout.strip() != "Succeeded" or VERIFIED_LINE not in logs.stdout:
        raise TRMError(
            f"copy-out pod {target.pod} has not verified a copy of {target.run_name} (phase "
            f"{phase.stdout.strip() or 'unknown'}; no '{VERIFIED_LINE}' in its log): nothing deleted. Run "
            f"`python -m tools.jobs copy-out {overlay} --sync-to REMOTE | kubectl apply -f -` and wait for it"
        )
    deletes = [
        ["kubectl", "delete", "job", target.job, "--cascade=foreground", "--ignore-not-found"],
        ["kubectl", "delete", "pod", target.pod, "--ignore-not-found"],
        ["kubectl", "delete", "pvc", target.claim, "--ignore-not-found"],
        ["kubectl", "delete", "secret", *RUN_SECRETS, "--ignore-not-found"],
    ]
    for cmd in deletes:
        result = run(cmd)
        if result.returncode != 0:
            raise TRMError(
                f"`{' '.join(cmd)}` failed ({result.stderr.strip()}); rerun teardown (it is idempotent)"
            )
    return deletes
