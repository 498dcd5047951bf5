"""The whole run's expected wall time and cost, printed before it starts (dry run and launch).

    wall = train + evaluation;  cost = wall x GPUs x GPU_HOURLY_USD
    train = total_steps x step time (x the depth curriculum's FLOPs ratio, when depth_curriculum.ramp > 0)
    evaluation = (full evaluations + subset evaluations x eval_subset.fraction) x one full evaluation

- total_steps: the trainer's formula (`trm.training.throughput.total_steps`) from the dataset's
  `train/dataset.json`, epochs and the global batch (capped by max_steps). Before the dataset is built the
  sizes recorded for it (trm.launch.cost.dataset_sizes) stand in, and the estimate says so.
- step time, the first that applies, each labelled with what it is:
  1. "measured (probe)": the probe (PROBE=1) timed this run's steps on this host (launch/probe.json);
  2. "measured (date, GPU)": the tier's `[tier.speed]` in hardware.toml, for the measured recipe's
     model on as many GPUs and rows per step as measured;
     "derived from measured (date, GPU)" otherwise: each GPU runs global batch / world size rows per step
     at the measured seconds per row, times the run's training FLOPs per row over the measured recipe's
     (another depth or width of the same architecture on the same tokens per row; another architecture or
     sequence length falls to 3.); the all-reduce between the GPUs is not in it (not measured);
  3. "estimate": training FLOPs per step / (peak FLOP/s of the GPUs x ASSUMED_MFU).
- the depth curriculum (`depth_curriculum.ramp` > 0, trm.training.curriculum): its early steps run fewer
  recursion cycles; the step time above is a full-depth step (the probe runs at full depth), and training
  time is scaled by the mean training FLOPs per step over the run's steps against a full-depth step's
  (`train_flops_ratio`), which assumes the step time scales with its FLOPs (fixed per-step costs do not
  shrink, so the saving is an upper bound); the dry run says so.
- one full evaluation: every test row (`test/dataset.json`: puzzles x examples per puzzle) for
  halt_max_steps forward ACT steps, at the tier's measured `eval_rows_per_s` (x the GPUs and the forward
  FLOPs ratio: derived, as above) when 2. applies, else at the training step's FLOP rate ("estimate",
  or "derived from the probe's step time" when the probe measured it).
- how many: one evaluation per pass from min_eval_interval on (epochs / eval_interval passes); with the
  subset evaluation (`eval_subset.fraction` < 1) every `eval_subset.full_every`-th is full (0: none in-run)
  and the others score that fraction of the rows, and `best.top_k` candidates get a full evaluation at the
  end (`eval_schedule`).
- early stopping (`early_stop.patience` > 0, trm.training.early_stop) may end the run at any evaluation;
  where is not known before it runs, so the figures stay those of the whole schedule and are stated as an
  upper bound (no saving is claimed).

ASSUMED_MFU is a calibration, not a measurement: 0.30 is the rate at which the paper's ARC-1 run (518,250
steps at batch 768 plus 125 evaluations of 385,815 test examples; TRM_SPEC §6, §8) takes the ~3 days
upstream reports on 4×H100 (this formula: 3.3 days). A measured step time replaces it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from trm.errors import TRMError
from trm.launch.cost.dataset_sizes import recorded_sizes
from trm.launch.host.hardware import BatchLayout, TierSpeed, load_table
from trm.training.config import BestConfig, EvalSubsetConfig, TrainConfig
from trm.training.curriculum import run_schedule, train_flops_per_example
from trm.training.throughput import act_step_flops, peak_flops, total_steps

ASSUMED_MFU = 0.30
ESTIMATE_FILE = "estimate.json"


@dataclass(frozen=True)
class EvalSchedule:
    """Which in-run evaluations are full and which score a subset, and the full ones at the end."""

    fraction: float = EvalSubsetConfig.fraction
    """`eval_subset.fraction`: share of the test rows a subset evaluation scores (1.0: every one is full)."""
    full_every: int = EvalSubsetConfig.full_every
    """`eval_subset.full_every`: every Nth in-run evaluation is also full (0: none in-run)."""
    top_k: int = BestConfig.top_k
    """`best.top_k`: candidates evaluated in full at the end of the run (with a subset evaluation only)."""

    def counts(self, evaluations: int) -> tuple[int, int, int]:
        """(full in-run, subset in-run, full at the end) of `evaluations` in-run evaluations. As the trainer
        runs them (trm.training.subset_eval): every in-run evaluation scores the subset, and every
        `full_every`-th also the whole set; `trm.training.config.evaluation_work` is the same count."""
        if self.fraction >= 1:
            return evaluations, 0, 0
        full = evaluations // self.full_every if self.full_every else 0
        return full, evaluations, min(self.top_k, evaluations)


_SCHEDULE_KEYS = (
    ("eval_subset", "fraction", float),
    ("eval_subset", "full_every", int),
    ("best", "top_k", int),
)


def eval_schedule(config: TrainConfig | Mapping[str, Any]) -> EvalSchedule:
    """The subset-evaluation keys of a resolved trainer config (a TrainConfig or its dict, as run.json
    stores it), each at the trainer's default (trm.training.config) when the config lacks it."""
    values: dict[str, Any] = {}
    for section, key, kind in _SCHEDULE_KEYS:
        part = config.get(section) if isinstance(config, Mapping) else getattr(config, section, None)
        value = part.get(key) if isinstance(part, Mapping) else getattr(part, key, None)
        if value is None:
            continue
        try:
            values[key] = kind(value)
        except (TypeError, ValueError):
            raise TRMError(
                f"{section}.{key}={value!r} is not a number; set it in the recipe or override"
            ) from None
    schedule = EvalSchedule(**values)
    if not 0 < schedule.fraction <= 1:
        raise TRMError(
            f"eval_subset.fraction={schedule.fraction:g} must be in (0, 1] (1.0: every evaluation is full)"
        )
    if schedule.full_every < 0 or schedule.top_k < 0:
        raise TRMError(
            f"eval_subset.full_every={schedule.full_every} and best.top_k={schedule.top_k} must be >= 0"
        )
    return schedule


@dataclass(frozen=True)
class RunEstimate:
    """Expected steps, time and cost of one whole run (all sessions together)."""

    total_steps: int
    step_seconds: float
    step_source: str
    """What the step time is: "measured (probe)", "measured (…)", "derived from measured (…)…", "estimate…"."""
    evaluations: int
    """In-run evaluations (full and subset)."""
    eval_seconds: float
    """One full evaluation."""
    gpus: int
    hourly_usd: float | None
    eval_rows: int = 0
    """Rows one full evaluation scores."""
    eval_source: str = ""
    """What the evaluation time is, labelled like step_source."""
    schedule: EvalSchedule = field(default_factory=EvalSchedule)
    dataset_source: str = "built"
    """"built", or the recorded sizes that stood in for a dataset not built yet."""
    train_flops_ratio: float = 1.0
    """The run's mean training FLOPs per step over a full-depth step's (< 1 with a depth curriculum)."""
    early_stop_patience: int = 0
    """`early_stop.patience`: > 0, the run may end sooner, so the figures are an upper bound."""

    @property
    def train_seconds(self) -> float:
        """Training steps only (a depth curriculum's shallow steps at their share of the FLOPs)."""
        return self.total_steps * self.step_seconds * self.train_flops_ratio

    @property
    def full_evaluations(self) -> float:
        """All evaluations in units of one full one (subset ones count their fraction)."""
        full, subset, final = self.schedule.counts(self.evaluations)
        return full + final + subset * self.schedule.fraction

    @property
    def eval_total_seconds(self) -> float:
        """Every evaluation of the run, in-run and at the end."""
        return self.full_evaluations * self.eval_seconds

    @property
    def wall_seconds(self) -> float:
        """Training plus evaluations (no provisioning, dataset build or restarts)."""
        return self.train_seconds + self.eval_total_seconds

    @property
    def eval_share(self) -> float:
        """Evaluation's share of the wall time."""
        return self.eval_total_seconds / self.wall_seconds if self.wall_seconds else 0.0

    def usd(self, seconds: float) -> float | None:
        """The price of `seconds` on the run's GPUs (None without GPU_HOURLY_USD)."""
        if self.hourly_usd is None:
            return None
        return seconds / 3600 * max(self.gpus, 1) * self.hourly_usd

    @property
    def cost_usd(self) -> float | None:
        """wall × GPUs × GPU_HOURLY_USD (None without a price)."""
        return self.usd(self.wall_seconds)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, derived values included (launch/estimate.json, handoff.json)."""
        return {
            **asdict(self),
            "train_seconds": round(self.train_seconds, 1),
            "eval_total_seconds": round(self.eval_total_seconds, 1),
            "eval_share": round(self.eval_share, 4),
            "wall_seconds": round(self.wall_seconds, 1),
            "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 2),
        }

    def describe_evaluations(self) -> str:
        """`125 full` or `20 full + 105 subset (10 % of the rows) + 3 full at the end`."""
        full, subset, final = self.schedule.counts(self.evaluations)
        parts = [f"{full} full"]
        if subset:
            parts.append(f"{subset} subset ({100 * self.schedule.fraction:.3g} % of the rows)")
        if final:
            parts.append(f"{final} full at the end (best.top_k)")
        return " + ".join(parts)

    def describe_curriculum(self) -> str:
        """The depth curriculum's factor on the train line (empty without one)."""
        if self.train_flops_ratio == 1:
            return ""
        return (
            f" x {self.train_flops_ratio:.3g} (depth curriculum: the run's mean training FLOPs per step "
            "over a full-depth step's, counted as if step time scaled with FLOPs)"
        )

    def describe(self) -> str:
        """Lines for the dry run and the launch log: the total, then training and evaluation, each with
        what its figure is (measured, derived or estimate)."""
        gpus = max(self.gpus, 1)
        if self.cost_usd is not None:
            cost = (
                f"${self.cost_usd:,.2f} at ${self.hourly_usd:g}/GPU-hour x {gpus} GPU(s) = train "
                f"${self.usd(self.train_seconds):,.2f} + evaluation ${self.usd(self.eval_total_seconds):,.2f}"
            )
        else:
            cost = "unknown (set GPU_HOURLY_USD, the price of one GPU-hour)"
        lines = [
            f"expected time     {_hours(self.wall_seconds)} = train {_hours(self.train_seconds)} + evaluation "
            f"{_hours(self.eval_total_seconds)} ({100 * self.eval_share:.1f} % of the hours)",
            f"  train           {self.total_steps:,} steps x {self.step_seconds:.3g} s ({self.step_source})"
            + self.describe_curriculum(),
            f"  evaluation      {self.describe_evaluations()} evaluation(s); a full one: {self.eval_rows:,} rows in "
            f"{_hours(self.eval_seconds)} ({self.eval_source})",
            f"expected cost     {cost}",
        ]
        if self.dataset_source != "built":
            lines.append(f"  dataset         {self.dataset_source}")
        if self.early_stop_patience:
            lines.append(
                f"  early stop      early_stop.patience={self.early_stop_patience}: the time and cost above "
                "are an upper bound (the whole schedule); the run may end sooner, at an evaluation not "
                "known before it runs"
            )
        return "\n".join(lines)


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


def tier_speed(layout: BatchLayout) -> TierSpeed | None:
    """The `[tier.speed]` measurement of the layout's tier (None on CPU or for a tier without one)."""
    if layout.device != "cuda":
        return None
    table = load_table()
    tier = next((t for t in table.tiers if t.name == layout.tier), None)
    return tier.speed if tier is not None else None


@cache
def recipe_config(name: str) -> TrainConfig:
    """A recipe's trainer config as the trainer resolves it (the measured recipe's model)."""
    from trm.training.config import compose
    from trm.training.recipes import get_recipe

    return compose([*get_recipe(name).overrides, "data_paths=[unused]"])


def reference_model(speed: TierSpeed) -> Any:
    """The model config (one row) of the recipe a `[tier.speed]` measured, on its dataset's recorded sizes;
    None when the dataset's sizes are not recorded (trm.launch.cost.dataset_sizes)."""
    from trm.model.registry import model_config
    from trm.training.recipes import get_recipe

    sizes = recorded_sizes(get_recipe(speed.recipe).dataset)
    if sizes is None:
        return None
    return model_config(
        recipe_config(speed.recipe).arch, batch_size=1, seq_len=int(sizes[0]["seq_len"]),
        vocab_size=int(sizes[0]["vocab_size"]), num_puzzle_identifiers=1, forward_dtype="bfloat16",
    )  # fmt: skip


def workload_scale(speed: TierSpeed, cfg: TrainConfig, seq_len: int) -> tuple[float, float] | None:
    """(training, evaluation) FLOPs per row of `cfg` on `seq_len` cells over those of the measured recipe,
    when both run the same architecture on the same tokens per row (else None: the measurement does not
    carry over)."""
    from trm.model.registry import model_config, spec_of

    ref_model = reference_model(speed)
    if ref_model is None or spec_of(ref_model).name != spec_of(cfg.arch).name:
        return None
    run_model = model_config(
        cfg.arch, batch_size=1, seq_len=seq_len, vocab_size=ref_model.vocab_size, num_puzzle_identifiers=1,
        forward_dtype="bfloat16",
    )  # fmt: skip
    if ref_model.total_seq_len != run_model.total_seq_len:
        return None
    ref, run = act_step_flops(ref_model), act_step_flops(run_model)
    evaluation = (run_model.halt_max_steps * run.forward) / (ref_model.halt_max_steps * ref.forward)
    return run.train / ref.train, evaluation


def _scaled(scale: float, speed: TierSpeed) -> str:
    return (
        ""
        if scale == 1
        else f"; x {scale:.3g} for this config's FLOPs per row against the measured {speed.recipe}'s"
    )


def measured_step(speed: TierSpeed, layout: BatchLayout, scale: float = 1.0) -> tuple[float, str]:
    """The step time from the tier's measurement: the run's rows per GPU at the measured seconds per row
    (times `scale`, the FLOPs per row against the measured recipe's)."""
    rows_per_gpu = layout.global_batch_size / layout.world_size
    seconds = rows_per_gpu * speed.row_seconds * scale
    if layout.world_size == speed.gpus and layout.global_batch_size == speed.step_rows and scale == 1:
        return seconds, f"measured ({speed.label})"
    return seconds, (
        f"derived from measured ({speed.label}): {rows_per_gpu:g} rows per GPU x "
        f"{1000 * speed.row_seconds:.3g} ms per row"
        + _scaled(scale, speed)
        + (
            f"; the {layout.world_size}-GPU all-reduce is not in it (not measured)"
            if layout.world_size > 1
            else ""
        )
    )


def measured_eval(speed: TierSpeed, layout: BatchLayout, rows: int, scale: float = 1.0) -> tuple[float, str]:
    """One full evaluation from the tier's measured rows/s (times the GPUs, which share the rows)."""
    seconds = rows / (speed.eval_rows_per_s * layout.world_size / speed.gpus) * scale
    if layout.world_size == speed.gpus and scale == 1:
        return seconds, f"measured ({speed.label}): {speed.eval_rows_per_s:g} rows/s"
    return seconds, (
        f"derived from measured ({speed.label}): {layout.world_size} GPUs x "
        f"{speed.eval_rows_per_s / speed.gpus:g} rows/s per GPU" + _scaled(scale, speed)
    )


def run_sizes(dataset_dir: Path) -> tuple[dict[str, Any], dict[str, Any], str] | str:
    """(train, test, source) figures of the run's dataset: its own when built, else the recorded ones."""
    sizes = read_dataset_sizes(dataset_dir)
    if sizes is not None:
        return *sizes, "built"
    recorded = recorded_sizes(dataset_dir.name)
    if recorded is None:
        return f"unknown until {dataset_dir} is built (the launch prints it after the data step)"
    return (
        *recorded,
        f"{dataset_dir.name} is not built yet: its recorded sizes stand in (trm.launch.cost.dataset_sizes)",
    )


def estimate_run(
    cfg: TrainConfig,
    dataset_dir: Path,
    layout: BatchLayout,
    *,
    hourly_usd: float | None,
    measured_step_seconds: float | None = None,
) -> RunEstimate | str:
    """The run's estimate, or why there is none (dataset neither built nor recorded, CPU without a
    measurement)."""
    sizes = run_sizes(dataset_dir)
    if isinstance(sizes, str):
        return sizes
    train, test, dataset_source = sizes
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
    flops_ratio = train_flops_per_example(model, run_schedule(cfg, steps), 1, step_limit) / flops.train
    eval_rows = round(float(test.get("total_puzzles", 0)) * float(test["mean_puzzle_examples"]))
    eval_flops = eval_rows * model.halt_max_steps * flops.forward
    step_flops = cfg.global_batch_size * flops.train
    gpus = layout.world_size if layout.device == "cuda" else 0
    speed = tier_speed(layout)
    scale = None if speed is None else workload_scale(speed, cfg, int(train["seq_len"]))
    if measured_step_seconds is not None:
        step_seconds, source = measured_step_seconds, "measured (probe)"
    elif speed is not None and scale is not None:
        step_seconds, source = measured_step(speed, layout, scale[0])
    else:
        peak = peak_flops(layout.gpu_name) if gpus else None
        if peak is None:
            where = "on CPU" if not gpus else f"for {layout.gpu_name} (not in the peak FLOP/s table)"
            return f"unknown {where}: no peak FLOP/s; PROBE=1 measures the step time"
        step_seconds = step_flops / (peak * gpus * ASSUMED_MFU)
        source = f"estimate: FLOPs at MFU {ASSUMED_MFU:.2f}"
    if speed is not None and scale is not None:
        eval_seconds, eval_source = measured_eval(speed, layout, eval_rows, scale[1])
    else:
        eval_seconds = step_seconds * eval_flops / step_flops
        eval_source = (
            "derived from the probe's step time by FLOPs"
            if measured_step_seconds is not None
            else f"estimate: FLOPs at MFU {ASSUMED_MFU:.2f}"
        )
    return RunEstimate(
        total_steps=step_limit,
        step_seconds=step_seconds,
        step_source=source,
        evaluations=evaluations(cfg, steps, step_limit),
        eval_seconds=eval_seconds,
        gpus=gpus,
        hourly_usd=hourly_usd,
        eval_rows=eval_rows,
        eval_source=eval_source,
        schedule=eval_schedule(cfg),
        dataset_source=dataset_source,
        train_flops_ratio=flops_ratio,
        early_stop_patience=cfg.early_stop.patience,
    )
