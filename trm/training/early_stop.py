"""Opt-in early stopping: end a run as finished once its in-run evaluations stop improving its ranking metric.

The metric is the one the run ranks its checkpoints by (`trm.training.config.ranking_metric`: a subset run's
per-evaluation subset score, else `checkpoint.best_metric` or its default). An evaluation improves on the
best so far when its value exceeds that best by more than `early_stop.min_delta`; the first one always
does. After `early_stop.patience` evaluations in a row without an improvement (and at least
`early_stop.min_evaluations` evaluations in all) the run ends as a finished one: final checkpoint, the
choice of the best checkpoint (`best.top_k`), run.json's `early_stop` record. A run whose best is still 0
(an accuracy that has not left the floor: ARC's pass@2 stays there for many evaluations) is never ended:
it has no peak to be past.

The state (`EarlyStopState`) lives in the checkpointed progress as a plain dict, so a stopped run resumes
the count where it was; a checkpoint written before it existed starts from an empty state. It is kept for
every run (rank 0 sees the metrics); only a run with patience > 0 acts on it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from trm.training.config import EarlyStopConfig

# run.json's (and handoff.json's) record of a run that early stopping ended; absent otherwise.
EARLY_STOP = "early_stop"


@dataclass
class EarlyStopState:
    """What the run has seen of its ranking metric: the best value, where, and the evaluations since."""

    metric: str | None = None
    """The metric `value` is of (a change of the ranking on resume starts the count again)."""
    value: float | None = None
    """The best value so far (None before the first evaluation that carried the metric)."""
    step: int | None = None
    """The optimizer step of the evaluation that set `value`."""
    evaluations: int = 0
    """Evaluations that carried the metric."""
    since: int = 0
    """Evaluations since the one that set `value`, without an improvement."""
    stopped: dict[str, Any] | None = None
    """Set when the rule ended the run: run.json's `early_stop` record."""

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> EarlyStopState:
        """The state a checkpoint's progress holds (keys this version does not know are ignored)."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in (data or {}).items() if k in known})

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def observe(self, metric: str, value: float, step: int, min_delta: float) -> bool:
        """Count one evaluation's `value` of `metric` at `step`; True when it is a new best. A value that is
        not finite never is."""
        if metric != self.metric:
            self.metric, self.value, self.step, self.evaluations, self.since = metric, None, None, 0, 0
        self.evaluations += 1
        improved = math.isfinite(value) and (self.value is None or value > self.value + min_delta)
        if improved:
            self.value, self.step, self.since = float(value), step, 0
        else:
            self.since += 1
        return improved

    def due(self, cfg: EarlyStopConfig) -> bool:
        """Whether the rule ends the run now: on (patience > 0), a best above 0 (the metrics are accuracies,
        higher is better: a run that has not scored yet has no peak to be past), `patience` evaluations
        without a new best, and at least `min_evaluations` evaluations."""
        return (
            cfg.patience > 0
            and self.value is not None
            and self.value > 0
            and self.since >= cfg.patience
            and self.evaluations >= cfg.min_evaluations
        )

    def record(self, cfg: EarlyStopConfig, step: int, step_limit: int) -> dict[str, Any]:
        """run.json's `early_stop`: where the run stopped and why."""
        return {
            "step": step,
            "step_limit": step_limit,
            "evaluations": self.evaluations,
            "metric": self.metric,
            "best_step": self.step,
            "best_value": self.value,
            "patience": cfg.patience,
            "min_delta": cfg.min_delta,
            "min_evaluations": cfg.min_evaluations,
            "reason": f"no new best of {self.metric} (by more than {cfg.min_delta:g}) in the last "
            f"{self.since} in-run evaluations (early_stop.patience={cfg.patience})",
        }


def stop_index(
    values: Iterable[float], patience: int, min_delta: float = 0.0, min_evaluations: int = 0
) -> int | None:
    """The rule on a series of per-evaluation values: the 0-based index of the evaluation after which the
    run ends (None: it runs to the end of the series)."""
    cfg = EarlyStopConfig(patience=patience, min_delta=min_delta, min_evaluations=min_evaluations)
    state = EarlyStopState()
    for index, value in enumerate(values):
        state.observe("metric", float(value), index, min_delta)
        if state.due(cfg):
            return index
    return None
