"""The best checkpoint of a run: the complete evaluation checkpoint with the highest value of one metric.

Evaluation checkpoints carry their evaluation's metrics in the manifest (`eval_metrics`) and the name of
the metric the run ranks by (`best_metric`: checkpoint.best_metric, else ARC/pass@2 with an ARC
evaluator, else eval/all/exact_accuracy). Higher is better; ties go to the later step.

A run whose in-run evaluations read a subset (eval_subset.fraction < 1) ranks by `subset/<metric>`.
`select_best` then takes the `best.top_k` checkpoints by that score, evaluates each on the full test set
(or reads the score of an in-run full evaluation of it), chooses the highest full score, and writes the
candidates and the choice to BEST_FILE; a later call reuses the full scores recorded there (and where each
came from: a second call, or the rerun of a killed one, writes the record the first call wrote). With
best.top_k=0 the subset score alone decides (the choice says so: `evaluation: subset`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trm.errors import TRMError
from trm.evaluation.subset import SUBSET_PREFIX
from trm.io import atomic_write_json
from trm.training.checkpointing.layout import COMPLETE, CheckpointInfo, best_of, find_complete, metric_value
from trm.training.config import count_metric

log = logging.getLogger(__name__)

BEST_FILE = "best.json"
# A candidate's number of items behind its full score (ARC/count tasks, eval/<set>/count examples): the
# report's Wilson interval of the chosen checkpoint.
FULL_COUNT = "full_count"
FULL = "full"
SUBSET = "subset"
# Evaluates one checkpoint on the full test set and returns its metrics (rank 0; {} on other ranks).
FullEvaluation = Callable[[CheckpointInfo], dict[str, float]]


@dataclass(frozen=True)
class Best:
    """The chosen checkpoint, the metric it was chosen by and its value there."""

    info: CheckpointInfo
    metric: str
    value: float
    evaluation: str = FULL
    """Which evaluation the value comes from: `full` (the whole test set) or `subset`."""
    candidates: list[dict[str, Any]] = field(default_factory=list)
    """With a subset: the top-k by subset score, each with its subset score, Wilson interval and full score."""
    note: str | None = None
    """Why this is not the choice best.json records (its checkpoint is gone): the stated fallback."""

    def as_dict(self) -> dict[str, Any]:
        """JSON form (`python -m trm best --json`, best.json, run.json's `best`)."""
        out: dict[str, Any] = {
            "path": str(self.info.path),
            "step": self.info.step,
            "metric": self.metric,
            "value": self.value,
            "evaluation": self.evaluation,
        }
        if self.candidates:
            out["candidates"] = self.candidates
        if self.note:
            out["note"] = self.note
        return out


def scan_run(run_dir: Path, *, warn: bool = True) -> list[CheckpointInfo]:
    """The run's complete checkpoints, oldest first (a TRMError when it holds none). A torn one is warned
    about (`warn`) each time the directory is read: read it once per command and pass the list on
    (`complete=` below)."""
    if (run_dir / COMPLETE).exists():
        raise TRMError(f"{run_dir} is one checkpoint, not a run directory: pass its parent {run_dir.parent}.")
    complete = find_complete(run_dir, warn=warn)
    if not complete:
        raise TRMError(
            f"{run_dir} holds no complete checkpoint (step_N/ folders with COMPLETE): pass the run's "
            "checkpoint_path, or train until its first evaluation."
        )
    return complete


def best_checkpoint(
    run_dir: Path, metric: str | None = None, *, complete: list[CheckpointInfo] | None = None
) -> Best:
    """The best complete checkpoint under `run_dir` by `metric` (default: the run's own best_metric; for a
    subset run, the choice `select_best` recorded in best.json when it names a complete checkpoint).
    `complete`: the run's `scan_run`, when the caller has read it already."""
    complete = scan_run(run_dir) if complete is None else complete
    chosen_by_run = metric is None
    if metric is None and (chosen := _recorded_choice(run_dir, complete)) is not None:
        return chosen
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
    note = _lost_choice(run_dir, metric, complete) if chosen_by_run else None
    if note:
        log.warning("%s", note)
    return Best(best[0], metric, value, SUBSET if metric.startswith(SUBSET_PREFIX) else FULL, note=note)


def run_ranking(complete: list[CheckpointInfo]) -> tuple[str | None, int | None]:
    """(the metric the run ranks checkpoints by, its best.top_k or None without a subset), read off the
    newest of the run's complete checkpoints (`scan_run`) whose manifest names them."""
    named = [i.manifest for i in complete if i.manifest.get("best_metric")]
    if not named:
        return None, None
    top_k = named[-1].get("best_top_k")
    return str(named[-1]["best_metric"]), int(top_k) if top_k is not None else None


def candidates_of(complete: list[CheckpointInfo], ranked_by: str, top_k: int) -> list[CheckpointInfo]:
    """The `top_k` of the run's complete checkpoints (`scan_run`) with the best `ranked_by` score, best
    first: fewer when retention kept fewer that carry it."""
    return best_of(complete, ranked_by, top_k)


def select_best(
    run_dir: Path,
    top_k: int,
    evaluate_full: FullEvaluation | None,
    *,
    write: bool = True,
    complete: list[CheckpointInfo] | None = None,
) -> Best:
    """The best checkpoint of a run ranked by a subset score: the `top_k` best by it, re-scored on the
    full test set (see the module docstring); `write` records the choice in `run_dir/best.json`.
    `complete`: the run's `scan_run`, when the caller has read it already (the directory is read once).

    Every rank calls it with the same `top_k` (`evaluate_full` may be collective); only rank 0's
    `evaluate_full` returns metrics, so only its result is meaningful."""
    complete = scan_run(run_dir) if complete is None else complete
    ranked_by, _ = run_ranking(complete)
    if ranked_by is None or not ranked_by.startswith(SUBSET_PREFIX):
        return best_checkpoint(run_dir, ranked_by, complete=complete)
    if top_k == 0 or evaluate_full is None:
        return best_checkpoint(run_dir, ranked_by, complete=complete)
    full_metric = ranked_by[len(SUBSET_PREFIX) :]
    count_name = count_metric(full_metric)
    cached = _recorded_full_scores(run_dir, full_metric)
    candidates: list[dict[str, Any]] = []
    scored: list[tuple[float, CheckpointInfo]] = []
    for info in candidates_of(complete, ranked_by, top_k):
        metrics = info.manifest.get("eval_metrics") or {}
        value, source = metric_value(info, full_metric), "in-run"
        count = metrics.get(count_name) if value is not None and count_name else None
        if value is None and info.step in cached:
            recorded, recorded_count, recorded_from, identity = cached[info.step]
            if identity is None:  # a record written before rows carried the checkpoint's identity
                value, count, source = recorded, recorded_count, BEST_FILE
            elif identity == checkpoint_identity(info):  # a step saved again (a rollback) is evaluated again
                value, count, source = recorded, recorded_count, recorded_from
        if value is None:
            full = evaluate_full(info)
            found = full.get(full_metric)
            # None: a damaged candidate the evaluation skipped (its log says why), or another rank
            value = float(found) if found is not None else None
            source = "re-evaluated" if value is not None else "not evaluated"
            count = full.get(count_name) if count_name else None
        candidates.append(
            {
                "step": info.step,
                "path": str(info.path),
                ranked_by: metrics.get(ranked_by),
                "wilson_95": [
                    metrics.get(f"{ranked_by}/wilson_low"),
                    metrics.get(f"{ranked_by}/wilson_high"),
                ],
                full_metric: value,
                FULL_COUNT: None if count is None else float(count),
                "full_from": source,
                "checkpoint": checkpoint_identity(info),
            }
        )
        if value is not None:
            scored.append((value, info))
    if not scored:  # other ranks: evaluate_full gives no metrics
        return best_checkpoint(run_dir, ranked_by, complete=complete)
    scored.sort(key=lambda pair: (-pair[0], -pair[1].step))
    value, info = scored[0]
    best = Best(info, full_metric, value, FULL, candidates)
    if write:
        atomic_write_json(run_dir / BEST_FILE, {"ranked_by": ranked_by, "top_k": top_k, **best.as_dict()})
    return best


def _recorded_choice(run_dir: Path, complete: list[CheckpointInfo]) -> Best | None:
    """The full-set choice recorded in best.json, if it is for the run's current ranking and its
    checkpoint is still complete."""
    try:
        record = json.loads((run_dir / BEST_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    named = [i.manifest["best_metric"] for i in complete if i.manifest.get("best_metric")]
    if not isinstance(record, dict) or not named or record.get("ranked_by") != named[-1]:
        return None
    by_step = {i.step: i for i in complete}
    step, value = record.get("step"), record.get("value")
    if not isinstance(step, int) or step not in by_step or not isinstance(value, int | float):
        return None
    return Best(by_step[step], str(record["metric"]), float(value), str(record.get("evaluation", FULL)),
                list(record.get("candidates") or []))  # fmt: skip


def _lost_choice(run_dir: Path, ranked_by: str, complete: list[CheckpointInfo]) -> str | None:
    """The fallback stated when best.json records a choice for this ranking whose checkpoint is no longer
    complete (deleted, or torn: no COMPLETE, a file missing or of the wrong size); None otherwise."""
    try:
        record = json.loads((run_dir / BEST_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(record, dict) or record.get("ranked_by") != ranked_by:
        return None
    step = record.get("step")
    if not isinstance(step, int) or step in {i.step for i in complete}:
        return None
    return (
        f"{run_dir / BEST_FILE} chose step_{step} ({record.get('metric')} = {record.get('value')}, "
        f"{record.get('evaluation')} evaluation), but {run_dir / f'step_{step}'} is missing or incomplete: "
        f"this is the best by {ranked_by} instead. Restore step_{step} from a copy to use the run's choice"
    )


def checkpoint_identity(info: CheckpointInfo) -> str:
    """What a checkpoint holds, in 16 hex digits: the hash of its manifest's file list (every file's size and
    sha256), so a step saved again with other weights has another identity."""
    files = json.dumps(info.manifest.get("files") or {}, sort_keys=True)
    return hashlib.sha256(files.encode()).hexdigest()[:16]


def _recorded_full_scores(
    run_dir: Path, metric: str
) -> dict[int, tuple[float, float | None, str, str | None]]:
    """(full score, evaluated count, where the score came from, the checkpoint's identity or None) by step
    that an earlier `select_best` recorded in best.json (for the same metric). The source is the recorded
    one (`re-evaluated`, `in-run`), so a second choice writes the record the first did; BEST_FILE for a row
    that does not say."""
    try:
        record = json.loads((run_dir / BEST_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    out: dict[int, tuple[float, float | None, str, str | None]] = {}
    for row in record.get("candidates", []) if isinstance(record, dict) else []:
        if isinstance(row, dict) and isinstance(row.get(metric), int | float) and "step" in row:
            count, source, identity = row.get(FULL_COUNT), row.get("full_from"), row.get("checkpoint")
            out[int(row["step"])] = (
                float(row[metric]),
                float(count) if isinstance(count, int | float) else None,
                source if isinstance(source, str) and source else BEST_FILE,
                identity if isinstance(identity, str) else None,
            )
    return out


def _available(complete: list[CheckpointInfo]) -> str:
    names = sorted({k for i in complete for k in (i.manifest.get("eval_metrics") or {})})
    return f"metrics available: {', '.join(names)}" if names else "no checkpoint carries evaluation metrics"
