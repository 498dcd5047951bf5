"""Rank 0's records of a run besides its checkpoints: `run.json` (what ran, where, with which code) and
the metric log with its sinks (trm.training.metrics_log)."""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

from trm.distributed import DistInfo
from trm.io import atomic_write_json
from trm.training import curriculum
from trm.training.builder import Components
from trm.training.checkpointing.layout import git_sha
from trm.training.config import TrainConfig, as_dict, config_hash
from trm.training.early_stop import EARLY_STOP
from trm.training.metrics_log import MetricsLog, TensorBoardSink, WandbSink, wandb_wanted
from trm.versions import collect_versions


def open_metrics(cfg: TrainConfig, run_dir: Path, resume_step: int | None) -> MetricsLog:
    """The run's metric log (rows after `resume_step` dropped) with the W&B / TensorBoard sinks asked for."""
    metrics = MetricsLog(run_dir, resume_step=resume_step)
    if wandb_wanted(cfg.wandb):
        metrics.add_sink(WandbSink(str(cfg.project_name), str(cfg.run_name), as_dict(cfg), run_dir))
    if cfg.tensorboard:
        metrics.add_sink(TensorBoardSink(run_dir))
    return metrics


def write_run_json(
    cfg: TrainConfig,
    info: DistInfo,
    comps: Components,
    run_dir: Path,
    *,
    total_steps: int,
    step_limit: int,
    resumed_from: Path | None,
    early_stop: dict[str, Any] | None = None,
) -> None:
    """`run_dir/run.json`, written atomically at every start of the run (a `best` recorded by an earlier
    start is kept); `early_stop`: the record of a run that early stopping ended (from its progress)."""
    previous = read_json_or_empty(run_dir / "run.json")
    atomic_write_json(
        run_dir / "run.json",
        {
            "config": as_dict(cfg),
            "config_hash": config_hash(cfg),
            "world_size": info.world_size,
            "device": str(info.device),
            "micro_batch_size": comps.plan.micro_batch_size,
            "accum_steps": comps.plan.accum_steps,
            "total_steps": total_steps,
            "step_limit": step_limit,
            "resumed_from": str(resumed_from) if resumed_from else None,
            "versions": collect_versions(),
            "platform": platform.platform(),
            "git_sha": git_sha(),
            "image_digest": os.environ.get("TRM_IMAGE_DIGEST") or None,
            # which AdamATan2 ran: "ext" (the compiled adam-atan2 extension) or "torch" (trm's)
            "optimizer_backends": {
                o.name: getattr(o.optimizer, "trm_backend", None)
                for o in comps.optimizers
                if hasattr(o.optimizer, "trm_backend")
            },
            "command": sys.argv,
            # The in-run evaluations' subset (eval_subset.fraction < 1): how chosen, rows kept, sha256.
            "eval_subset": comps.subset.record() if comps.subset is not None else None,
            # The depth curriculum's stages (depth_curriculum.ramp > 0): steps, cycles, training FLOPs.
            "depth_curriculum": (
                curriculum.record(curriculum.run_schedule(cfg, total_steps), comps.model.config)
                if cfg.depth_curriculum.ramp > 0
                else None
            ),
            **({"best": previous["best"]} if "best" in previous else {}),
            **({EARLY_STOP: early_stop} if early_stop else {}),
        },
    )


def record_best(run_dir: Path, best: dict[str, object]) -> None:
    """Add the chosen best checkpoint (trm.training.checkpointing.best.select_best) to run.json as `best`."""
    record_in_run_json(run_dir, "best", best)


def record_in_run_json(run_dir: Path, key: str, value: dict[str, Any]) -> None:
    """Set run.json's `key` (the rest kept; the file replaced atomically)."""
    path = run_dir / "run.json"
    record = read_json_or_empty(path)
    record[key] = value
    atomic_write_json(path, record)


def read_json_or_empty(path: Path) -> dict[str, Any]:
    """The JSON object in `path`; {} when it does not exist or is not one."""
    try:
        value = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return value if isinstance(value, dict) else {}
