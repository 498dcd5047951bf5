"""The workspace volume a Job mounts: which PersistentVolumeClaims jobs/storage/ defines, and rendering an
overlay onto another claim (`python -m tools.jobs render DIR --claim NAME`).

Runbook 01 creates either claim: `trm-workspace` (ReadWriteOnce, jobs/storage/rwo) or
`trm-workspace-shared` (ReadWriteMany, jobs/storage/rwx). The single-node overlays mount the first; a
cluster that has only the second renders them with `--claim trm-workspace-shared`. A ReadWriteOnce claim
attaches to one node, so a Job whose pods run on several nodes at once is refused on it."""

from __future__ import annotations

from pathlib import Path

from trm.errors import TRMError

READ_WRITE_MANY = "ReadWriteMany"


def claim_access_modes(jobs_dir: Path) -> dict[str, list[str]]:
    """Access modes of the claims jobs/storage/ defines, by claim name."""
    import yaml

    modes: dict[str, list[str]] = {}
    for path in sorted((jobs_dir / "storage").glob("*/pvc.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "PersistentVolumeClaim":
                modes[doc["metadata"]["name"]] = list(doc["spec"].get("accessModes", []))
    return modes


def workspace_claims(pod: dict) -> list[dict]:
    """The `persistentVolumeClaim` entries of a pod spec's volumes (edited in place by `use_claim`)."""
    return [v["persistentVolumeClaim"] for v in pod.get("volumes", []) if "persistentVolumeClaim" in v]


def single_node_claims(pod: dict, modes: dict[str, list[str]]) -> list[str]:
    """The claims `pod` mounts that are not ReadWriteMany (by jobs/storage/'s definitions)."""
    return [
        c["claimName"] for c in workspace_claims(pod) if READ_WRITE_MANY not in modes.get(c["claimName"], [])
    ]


def use_claim(objects: list[dict], claim: str, jobs_dir: Path) -> None:
    """Mount `claim` instead of the claim every Job of `objects` mounts (in place). TRMError when no Job
    mounts a claim, or when a Job runs pods on several nodes at once and `claim` is not ReadWriteMany."""
    modes = claim_access_modes(jobs_dir)
    jobs = [o for o in objects if o.get("kind") == "Job"]
    mounts = [c for job in jobs for c in workspace_claims(job["spec"]["template"]["spec"])]
    if not mounts:
        raise TRMError("--claim: the rendered objects hold no Job that mounts a PersistentVolumeClaim")
    for job in jobs:
        if (job["spec"].get("parallelism") or 1) > 1 and READ_WRITE_MANY not in modes.get(claim, []):
            raise TRMError(
                f"--claim {claim}: Job {job['metadata']['name']} runs pods on several nodes at once and needs a "
                "ReadWriteMany claim (jobs/storage/rwx: trm-workspace-shared); a ReadWriteOnce one attaches "
                "to one node and the others hang with `Multi-Attach error`"
            )
    for mount in mounts:
        mount["claimName"] = claim


def unknown_claim_note(claim: str, jobs_dir: Path) -> str | None:
    """The note for a claim jobs/storage/ does not define (it must exist on the cluster); None for its own."""
    modes = claim_access_modes(jobs_dir)
    if claim in modes:
        return None
    return (
        f"note: claim {claim!r} is not one of jobs/storage/'s ({', '.join(sorted(modes))}): the pods stay "
        f"Pending unless it exists in the namespace (`kubectl get pvc {claim}`)"
    )
