"""The best checkpoint of a run: the complete evaluation checkpoint with the highest value of one metric.

Evaluation checkpoints carry their evaluation's metrics in the manifest (`eval_metrics`) and the name of
the metric the run ranks by (`best_metric`: checkpoint.best_metric, else ARC/pass@2 with an ARC
evaluator, else eval/all/exact_accuracy). Higher is better; ties go to the later step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trm.errors import TRMError
from trm.training.checkpoint import COMPLETE, CheckpointInfo, best_of, find_complete, metric_value


@dataclass(frozen=True)
class Best:
    """The chosen checkpoint, the metric it was chosen by and its value there."""

    info: CheckpointInfo
    metric: str
    value: float

    def as_dict(self) -> dict[str, object]:
        """JSON form (`python -m trm best --json`)."""
        return {
            "path": str(self.info.path),
            "step": self.info.step,
            "metric": self.metric,
            "value": self.value,
        }


def best_checkpoint(run_dir: Path, metric: str | None = None) -> Best:
    """The best complete checkpoint under `run_dir` by `metric` (default: the run's own best_metric)."""
    if (run_dir / COMPLETE).exists():
        raise TRMError(f"{run_dir} is one checkpoint, not a run directory: pass its parent {run_dir.parent}.")
    complete = find_complete(run_dir)
    if not complete:
        raise TRMError(
            f"{run_dir} holds no complete checkpoint (step_N/ folders with COMPLETE): pass the run's "
            "checkpoint_path, or train until its first evaluation."
        )
    if metric is None:
        named = [i.manifest["best_metric"] for i in complete if i.manifest.get("best_metric")]
        if not named:
            raise TRMError(
                f"the checkpoints in {run_dir} predate best-checkpoint tracking (no best_metric in their "
                f"manifests): pass --metric NAME ({_available(complete)})."
            )
        metric = named[-1]
    best = best_of(complete, metric)
    if not best:
        raise TRMError(
            f"no complete checkpoint in {run_dir} carries the metric {metric!r}: {_available(complete)}. "
            "Pass one with --metric, or wait for an evaluation checkpoint (checkpoint.every_eval=true)."
        )
    value = metric_value(best[0], metric)
    assert value is not None
    return Best(best[0], metric, value)


def _available(complete: list[CheckpointInfo]) -> str:
    names = sorted({k for i in complete for k in (i.manifest.get("eval_metrics") or {})})
    return f"metrics available: {', '.join(names)}" if names else "no checkpoint carries evaluation metrics"
