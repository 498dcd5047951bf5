"""What a run directory says about a run: finished or not, its final and best metrics, its best checkpoint.

Read from the trainer's own files: `metrics.jsonl` (trm.training.metrics_log; a torn last line is
skipped), `run.json` (the step limit) and the complete `step_N/` folders (trm.training.checkpointing.layout).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trm.training.checkpointing import layout as ckpt
from trm.training.config import headline_metric
from trm.training.metrics_log import JSONL

log = logging.getLogger(__name__)

# The metric that picks the best checkpoint, by preference: ARC's pass@2 (the Kaggle score), else the
# exact accuracy of the evaluation (Sudoku, Maze: `eval/<set>/exact_accuracy`, set `all` first).
_NOT_METRICS = ("step", "wall_time")


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """Every row of `metrics.jsonl` (none when the run has not logged yet)."""
    path = Path(run_dir) / JSONL
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    rows = []
    for line in text.splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line torn by a kill mid-write
    return rows


def last_step(run_dir: Path, tail_bytes: int = 8192) -> int | None:
    """The step of the newest metrics row, reading only the end of the file (the live progress table)."""
    path = Path(run_dir) / JSONL
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - tail_bytes))
            lines = f.read().decode("utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return None
    for line in reversed(lines):
        try:
            return int(json.loads(line)["step"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            continue
    return None


def step_limit(run_dir: Path) -> int | None:
    """The run's total optimizer steps (run.json, written when the trainer starts)."""
    try:
        return int(json.loads((Path(run_dir) / "run.json").read_text(encoding="utf-8"))["step_limit"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def final_metrics(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each metric's last logged value, plus the step of the last row."""
    out: dict[str, Any] = {}
    for row in rows:
        out.update({k: v for k, v in row.items() if k not in _NOT_METRICS})
    if rows:
        out["step"] = rows[-1]["step"]
    return out


def best_metric_name(rows: list[dict[str, Any]]) -> str | None:
    """The metric a run is ranked by, read off its metrics rows (trm.training.config.headline_metric)."""
    return headline_metric(k for row in rows for k in row)


@dataclass(frozen=True)
class Best:
    """The best evaluation of a run by `metric`, and the checkpoint saved at that step (if kept)."""

    metric: str
    value: float
    step: int
    metrics: dict[str, Any]
    """Every metric of that evaluation's row."""
    checkpoint: Path | None
    """The best complete `step_N/` still on disk (the best evaluation's own, unless it was pruned)."""


def best(run_dir: Path, metric: str | None = None) -> Best | None:
    """The best evaluation (highest `metric`; the later step on a tie) and the best checkpoint on disk.

    The checkpoint is the complete `step_N/` with the highest `metric` among the steps that have one
    (pruned checkpoints cannot be submitted). None when the run has no evaluation with that metric.
    """
    rows = read_metrics(run_dir)
    metric = metric or best_metric_name(rows)
    scored = [r for r in rows if metric is not None and isinstance(r.get(metric), int | float)]
    if metric is None or not scored:
        return None
    top = max(scored, key=lambda r: (r[metric], r["step"]))
    kept = {c.step: c.path for c in ckpt.find_complete(Path(run_dir), warn=False)}
    with_checkpoint = [r for r in scored if r["step"] in kept]
    chosen = max(with_checkpoint, key=lambda r: (r[metric], r["step"])) if with_checkpoint else None
    return Best(
        metric=metric,
        value=float(top[metric]),
        step=int(top["step"]),
        metrics={k: v for k, v in top.items() if k != "wall_time"},
        checkpoint=kept[chosen["step"]] if chosen is not None else None,
    )


def is_finished(run_dir: Path) -> bool:
    """Whether the checkpoint a resume would start from records the run as finished (the trainer's final
    save): the newest complete one whose files pass their sha256, as `trm.training.checkpointing.resume`
    picks it. A damaged newer one (skipped with a warning) cannot mark an unfinished run as done."""
    from trm.training.checkpointing.state import read_main_state

    for info in reversed(ckpt.find_complete(Path(run_dir), warn=False)):
        try:
            ckpt.check_folder(info.path, verify_hashes=True)
        except ValueError as why:
            log.warning("skipping checkpoint %s: %s (the run resumes from an older one)", info.path, why)
            continue
        try:
            return bool(read_main_state(info.path)["progress"]["finished"])
        except (OSError, RuntimeError, KeyError, EOFError):
            return False
    return False


def has_checkpoint(run_dir: Path) -> bool:
    """Whether the run has a complete checkpoint to resume from."""
    return bool(ckpt.find_complete(Path(run_dir), warn=False))
