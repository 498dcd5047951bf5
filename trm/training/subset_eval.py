"""The run's subset evaluation: its rows (trm.evaluation.subset), its own evaluators and which in-run
evaluation reads what.

The subset has its own ARC evaluators, so its votes never pool with the full evaluations' votes; their
state is saved in every checkpoint (`subset_evaluators`) and restored on resume. With
`eval_subset.fraction` < 1 every in-run evaluation scores the subset, and every `eval_subset.full_every`-th
one also the whole test set, so all evaluation checkpoints are ranked by the same subset metric.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trm.evaluation.subset import AUGMENTATIONS, ROWS, Subset, SubsetLoader, choose
from trm.training.config import TrainConfig, subset_on


@dataclass
class SubsetTarget:
    """The subset's loader view and evaluators."""

    loader: SubsetLoader
    evaluators: list[Any]

    @property
    def subset(self) -> Subset:
        return self.loader.subset

    def record(self) -> dict[str, Any]:
        """run.json's `eval_subset` entry."""
        totals = {name: int(puzzles[-1]) for name, _groups, puzzles in self.loader.loader.test_layout()}
        return self.subset.record(totals)


def subset_mode(cfg: TrainConfig) -> str:
    """ARC evaluators vote over augmentations: keep a share of them; else a share of the rows."""
    return AUGMENTATIONS if cfg.evaluators else ROWS


def build_subset_target(cfg: TrainConfig, test_loader: Any) -> SubsetTarget | None:
    """The subset of `test_loader` (None when in-run evaluations read the whole test set)."""
    if test_loader is None or not subset_on(cfg):
        return None
    from trm.evaluation.arc import build_evaluators

    subset = choose(
        test_loader.test_layout(), cfg.eval_subset.fraction, cfg.eval_subset.seed, subset_mode(cfg)
    )
    view = SubsetLoader(test_loader, subset)
    return SubsetTarget(view, build_evaluators(cfg.evaluators, view))
