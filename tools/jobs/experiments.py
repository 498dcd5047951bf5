"""An experiment suite as one Kubernetes Indexed Job (`python -m tools.jobs render --experiments P`).

The Job is an overlay's trainer Job (default `jobs/overlays/prod-4xh100`: the GPUs, deadline, image pin
and volumes of one run) turned into `completionMode: Indexed` with one completion per experiment. Its
trainer runs `python -m trm launch --experiments <the rendered list>`, so pod i runs experiment i through
the production launcher (`trm.experiments.indexed`), resuming from the shared volume when a pod is
replaced. No controller beyond the core Job API; `jobs check` validates it like the overlays.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

from tools.jobs import k8s
from tools.jobs.claims import claim_access_modes, single_node_claims, use_claim
from tools.jobs.policy import EXPERIMENTS_FLAG
from trm.errors import TRMError
from trm.experiments.batch import batch_id
from trm.experiments.suite import Catalog

# Set per pod by the launcher from the experiment; the overlay's values would only mislead a reader.
PER_EXPERIMENT_ENV = ("TASK", "RUN_NAME")
EXPERIMENTS_ANNOTATION = "trm-stack/experiments"


def experiments_job(
    pattern: str, overlay: str | Path, parallelism: int | None = None, claim: str | None = None
) -> list[dict]:
    """The objects of `overlay` with its Job made an Indexed Job over the experiments `pattern` selects.

    Pods run at once only on a claim every node can mount: a ReadWriteOnce claim (the single-node overlays'
    `trm-workspace`) attaches to one node, so a second pod scheduled elsewhere hangs in ContainerCreating
    with `Multi-Attach error`. On such a claim the default is one pod at a time and `--parallelism` > 1 is
    refused; `claim` mounts another claim (e.g. the ReadWriteMany `trm-workspace-shared`) instead."""
    names = [e.name for e in Catalog.load().select(pattern=pattern)]
    objects = copy.deepcopy(k8s.render(overlay))
    jobs = [o for o in objects if o["kind"] == "Job"]
    if len(jobs) != 1:
        raise TRMError(f"{overlay} renders {len(jobs)} Jobs; pick an overlay with exactly one trainer Job")
    job = jobs[0]
    spec = job["spec"]
    if (spec.get("parallelism") or 1) > 1:
        raise TRMError(f"{overlay} is a multi-node Job; an experiment Job runs one single-node run per pod")
    jobs_dir = Path(overlay).resolve().parents[1]
    if claim is not None:
        use_claim(objects, claim, jobs_dir)
    single_node = single_node_claims(spec["template"]["spec"], claim_access_modes(jobs_dir))
    if parallelism is not None and parallelism < 1:
        raise TRMError(f"--parallelism {parallelism}: give 1 or more")
    width = min(parallelism or (1 if single_node else len(names)), len(names))
    if width > 1 and single_node:
        raise TRMError(
            f"--parallelism {parallelism} with claim {', '.join(single_node)}, which is not ReadWriteMany "
            "(jobs/storage/): pods on a second node would hang with `Multi-Attach error`. Use --parallelism 1, "
            "or add --claim trm-workspace-shared (the ReadWriteMany claim of jobs/storage/rwx)"
        )
    ident = batch_id(names)
    job["metadata"]["name"] = f"trm-{ident}"
    job["metadata"].setdefault("annotations", {})[EXPERIMENTS_ANNOTATION] = pattern
    waves = math.ceil(len(names) / width)
    spec.update(
        completionMode="Indexed",
        completions=len(names),
        parallelism=width,
        # Each index may use the overlay's retries; the deadline covers the runs that wait for a slot.
        backoffLimit=int(spec.get("backoffLimit", 0)) * len(names),
        activeDeadlineSeconds=int(spec["activeDeadlineSeconds"]) * waves,
    )
    (trainer,) = [c for c in spec["template"]["spec"]["containers"] if c["name"] == "trainer"]
    trainer["args"] = [*trainer.get("args", []), EXPERIMENTS_FLAG, ",".join(names)]
    trainer["env"] = [v for v in trainer.get("env", []) if v["name"] not in PER_EXPERIMENT_ENV]
    return objects
