"""The whole run's expected wall time and cost, printed before it starts (dry run and launch).

    wall = total_steps × step time + evaluations × evaluation time;  cost = wall × GPUs × GPU_HOURLY_USD

- total_steps: the trainer's formula (`trm.training.throughput.total_steps`) from the dataset's
  `train/dataset.json`, epochs and the global batch (capped by max_steps).
- step time: measured when the probe (PROBE=1) timed this run's steps (launch/probe.json); otherwise
  estimated as training FLOPs per step ÷ (peak FLOP/s of the GPUs × ASSUMED_MFU) and labelled "estimate".
- evaluations: one after each pass from min_eval_interval on (epochs / eval_interval passes), each
  scoring every test example for halt_max_steps forward ACT steps; timed at the same FLOP rate as training.

ASSUMED_MFU is a calibration, not a measurement: 0.30 is the rate at which the paper's ARC-1 run (518,250
steps at batch 768 plus 125 evaluations of 385,815 test examples; TRM_SPEC §6, §8) takes the ~3 days
upstream reports on 4×H100 (this formula: 3.3 days). A measured step time (PROBE=1) replaces it.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trm.errors import TRMError
from trm.launch.host.hardware import BatchLayout
from trm.training.config import TrainConfig
from trm.training.throughput import act_step_flops, peak_flops, total_steps

ASSUMED_MFU = 0.30
ESTIMATE_FILE = "estimate.json"


@dataclass(frozen=True)
class RunEstimate:
    """Expected steps, time and cost of one whole run (all sessions together)."""

    total_steps: int
    step_seconds: float
    step_source: str
    """"measured (probe)" or "estimate (FLOPs at MFU 0.30)"."""
    evaluations: int
    eval_seconds: float
    """Per evaluation."""
    gpus: int
    hourly_usd: float | None

    @property
    def train_seconds(self) -> float:
        """Training steps only."""
        return self.total_steps * self.step_seconds

    @property
    def wall_seconds(self) -> float:
        """Training plus evaluations (no provisioning, dataset build or restarts)."""
        return self.train_seconds + self.evaluations * self.eval_seconds

    @property
    def cost_usd(self) -> float | None:
        """wall × GPUs × GPU_HOURLY_USD (None without a price)."""
        if self.hourly_usd is None:
            return None
        return self.wall_seconds / 3600 * max(self.gpus, 1) * self.hourly_usd

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, derived values included (launch/estimate.json, handoff.json)."""
        return {
            **asdict(self),
            "train_seconds": round(self.train_seconds, 1),
            "wall_seconds": round(self.wall_seconds, 1),
            "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 2),
        }

    def describe(self) -> str:
        """Lines for the dry run and the launch log."""
        cost = (
            f"${self.cost_usd:,.2f} at ${self.hourly_usd:g}/GPU-hour x {max(self.gpus, 1)} GPU(s)"
            if self.cost_usd is not None
            else "unknown (set GPU_HOURLY_USD, the price of one GPU-hour)"
        )
        return "\n".join(
            [
                f"expected time     {_hours(self.wall_seconds)} = {self.total_steps:,} steps x "
                f"{self.step_seconds:.3g} s ({self.step_source}) + {self.evaluations} evaluation(s) x "
                f"{_hours(self.eval_seconds)}",
                f"expected cost     {cost}",
            ]
        )


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


def read_dataset_sizes(dataset_dir: Path) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(train, test) `dataset.json` of a built dataset; None while it is not built."""
    out = []
    for split in ("train", "test"):
        path = dataset_dir / split / "dataset.json"
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as err:
            raise TRMError(
                f"{path} is unreadable ({err}); `python -m trm data verify {dataset_dir}` says what is wrong"
            ) from None
        for key in (
            "seq_len",
            "vocab_size",
            "num_puzzle_identifiers",
            "total_groups",
            "mean_puzzle_examples",
        ):
            if key not in data:
                raise TRMError(
                    f"{path} has no {key!r}; `python -m trm data verify {dataset_dir}` says what is wrong"
                )
        out.append(data)
    return out[0], out[1]


def probe_step_seconds(launch_dir: Path) -> float | None:
    """The step time the probe measured for this run (launch/probe.json), if it ran and succeeded."""
    path = launch_dir / "probe.json"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    chosen = record.get("chosen_micro_batch_size")
    for attempt in reversed(record.get("attempts") or []):
        if attempt.get("micro_batch_size") == chosen and attempt.get("step_seconds"):
            return float(attempt["step_seconds"])
    return None


def evaluations(cfg: TrainConfig, steps: int, step_limit: int) -> int:
    """Evaluations the trainer runs for `step_limit` of `steps` (trm.training.loop: one per pass from
    min_eval_interval on, and one at the end)."""
    passes = cfg.epochs // (cfg.eval_interval or cfg.epochs)
    done = passes if step_limit >= steps else min(passes, math.ceil(step_limit / max(steps / passes, 1)))
    return max(1, done - (cfg.min_eval_interval or 0))


def estimate_run(
    cfg: TrainConfig,
    dataset_dir: Path,
    layout: BatchLayout,
    *,
    hourly_usd: float | None,
    measured_step_seconds: float | None = None,
) -> RunEstimate | str:
    """The run's estimate, or why there is none yet (dataset not built, CPU without a measurement)."""
    sizes = read_dataset_sizes(dataset_dir)
    if sizes is None:
        return f"unknown until {dataset_dir} is built (the launch prints it after the data step)"
    train, test = sizes
    from trm.model.registry import model_config

    model = model_config(
        cfg.arch,
        batch_size=layout.micro_batch_size,
        seq_len=int(train["seq_len"]),
        vocab_size=int(train["vocab_size"]),
        num_puzzle_identifiers=int(train["num_puzzle_identifiers"]),
        forward_dtype="bfloat16",
    )
    flops = act_step_flops(model)
    steps = total_steps(
        cfg.epochs, int(train["total_groups"]), float(train["mean_puzzle_examples"]), cfg.global_batch_size
    )
    step_limit = min(steps, cfg.max_steps or steps)
    test_examples = float(test.get("total_puzzles", 0)) * float(test["mean_puzzle_examples"])
    eval_flops = test_examples * model.halt_max_steps * flops.forward
    step_flops = cfg.global_batch_size * flops.train
    gpus = layout.world_size if layout.device == "cuda" else 0
    if measured_step_seconds is not None:
        step_seconds, source = measured_step_seconds, "measured by the probe"
    else:
        peak = peak_flops(layout.gpu_name) if gpus else None
        if peak is None:
            where = "on CPU" if not gpus else f"for {layout.gpu_name} (not in the peak FLOP/s table)"
            return f"unknown {where}: no peak FLOP/s; PROBE=1 measures the step time"
        step_seconds = step_flops / (peak * gpus * ASSUMED_MFU)
        source = f"estimate: FLOPs at MFU {ASSUMED_MFU:.2f}"
    return RunEstimate(
        total_steps=step_limit,
        step_seconds=step_seconds,
        step_source=source,
        evaluations=evaluations(cfg, steps, step_limit),
        eval_seconds=step_seconds * eval_flops / step_flops,
        gpus=gpus,
        hourly_usd=hourly_usd,
    )
