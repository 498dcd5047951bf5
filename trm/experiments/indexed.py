"""One experiment per pod of a Kubernetes Indexed Job: `python -m trm launch --experiments a,b,c`.

The Job (`python -m tools.jobs render --experiments P`) lists its experiments in the launcher's arguments;
pod i (`JOB_COMPLETION_INDEX=i`, set by Kubernetes) runs the i-th through the production launcher
(preflight, dataset build + verify, hardware tier, smoke gate, supervised torchrun, resume, handoff):
`TASK` is the experiment's recipe, `RUN_NAME` its run name, its overrides come after `TRAIN_OVERRIDES`,
and the dataset is the experiment's own (`data.*` keys). Runs of one Job share a W&B group: the batch id
the same selection gets from `python -m trm experiment batch`.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Mapping

from trm.errors import TRMError
from trm.experiments.suite import Catalog, Experiment
from trm.training.recipes import Recipe

INDEX_VAR = "JOB_COMPLETION_INDEX"


def parse_names(text: str) -> list[str]:
    """`exp01a,exp01b` -> the names, each checked against the shipped suites."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise TRMError("--experiments needs a comma-separated list of experiment names")
    catalog = Catalog.load()
    return [e.name for e in catalog.select(names)]


def selected(names: list[str], environ: Mapping[str, str]) -> Experiment:
    """The experiment of this pod: names[JOB_COMPLETION_INDEX]."""
    raw = environ.get(INDEX_VAR, "").strip()
    if not raw.isdigit() or int(raw) >= len(names):
        raise TRMError(
            f"--experiments needs {INDEX_VAR} between 0 and {len(names) - 1} (Kubernetes sets it in the pods of "
            f"an Indexed Job); it is {raw or 'unset'}. Locally run `python -m trm experiment batch` instead"
        )
    (exp,) = Catalog.load().select([names[int(raw)]])
    return exp


def launch_environment(exp: Experiment, names: list[str], environ: Mapping[str, str]) -> dict[str, str]:
    """The launcher's environment for `exp`: its recipe, run name, overrides after TRAIN_OVERRIDES, W&B group."""
    from trm.experiments.batch import batch_id

    overrides = [*shlex.split(environ.get("TRAIN_OVERRIDES", "")), *exp.trainer_overrides]
    return {
        **environ,
        "TASK": exp.recipe,
        "RUN_NAME": exp.run_name,
        "TRAIN_OVERRIDES": shlex.join(overrides),
        "WANDB_RUN_GROUP": batch_id(names),
        "TRM_EXPERIMENT": exp.name,
    }


def recipe_of(exp: Experiment) -> Recipe:
    """The experiment's recipe with its own dataset (what the launcher builds, verifies and trains on)."""
    dataset = exp.dataset
    return dataclasses.replace(
        exp.base, dataset=dataset.name, builder=dataset.builder, build_args=dataset.build_args
    )
