"""Opt-in depth curriculum: early optimizer steps run fewer recursion cycles, in the spirit of CGAR's
progressive depth curriculum (arXiv 2511.08653).

With `depth_curriculum.ramp=r` (a share of the schedule's optimizer steps, the LR schedule's `total_steps`)
and `depth_curriculum.stages=n`, the first r x total_steps steps are split into n-1 equal parts; part k
(0-based) runs `ceil(H x (k+1)/n)` outer and `ceil(L x (k+1)/n)` inner cycles, where H and L are the
configured `arch.H_cycles` and `arch.L_cycles`, and every later step runs the full H and L. Adjacent parts
of the same depth merge into one stage. CGAR's schedule is r = 0.6, n = 3 at H 3, L 6: (1, 2) for the
first 30 %, (2, 4) up to 60 %, then (3, 6).

The depth is a pure function of the step and of the run's fixed facts (the config and the schedule's
length), so a resumed run runs the same depth at every step as an uninterrupted one. Only training steps
run shallower: `at_depth` sets the model config's cycle counts for one step and restores them, so
evaluation, checkpoints and exports always see the configured depth. Under torch.compile the cycle
counts are constants of the graph: each stage compiles once, and a stage seen before reuses its graph.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from trm.errors import TRMError

MAX_STAGES = 6
"""Each stage is one compiled graph of the training step, besides evaluation's: torch's dynamo recompiles a
function at most `recompile_limit` (8) times before it falls back to eager for it."""


@dataclass(frozen=True)
class Stage:
    """Steps first..last (1-based, both included) run H_cycles outer and L_cycles inner cycles (None for an
    architecture without them, which only ever has the one full-depth stage)."""

    first: int
    last: int
    H_cycles: int | None
    L_cycles: int | None

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


def depth_of(config: Any) -> tuple[int | None, int | None]:
    """(H_cycles, L_cycles) of an architecture or model config (None where it has no such key)."""
    return getattr(config, "H_cycles", None), getattr(config, "L_cycles", None)


def stages(H: Any, L: Any, ramp: float, count: int, total_steps: int) -> list[Stage]:
    """The schedule over steps 1..total_steps (one full-depth stage when ramp is 0)."""
    ramp_steps = ramp * total_steps
    out: list[Stage] = []
    first = 1
    for k in range(count - 1 if ramp > 0 else 0):
        last = math.floor((k + 1) * ramp_steps / (count - 1))
        depth = (math.ceil(H * (k + 1) / count), math.ceil(L * (k + 1) / count))
        first = _append(out, first, last, depth)
    _append(out, first, max(total_steps, first), (H, L))
    return out


def _append(out: list[Stage], first: int, last: int, depth: tuple[Any, Any]) -> int:
    """Add steps first..last at `depth` (merged into the previous stage when it has that depth); the next
    first step."""
    if last < first:
        return first
    if out and (out[-1].H_cycles, out[-1].L_cycles) == depth:
        out[-1] = dataclasses.replace(out[-1], last=last)
    else:
        out.append(Stage(first, last, *depth))
    return last + 1


def stage_at(schedule: Sequence[Stage], step: int) -> Stage:
    """The stage of optimizer step `step` (1-based; past the schedule: the last stage, full depth)."""
    return next((s for s in schedule if step <= s.last), schedule[-1])


def run_schedule(cfg: Any, total_steps: int) -> list[Stage]:
    """A TrainConfig's schedule over its `total_steps` (the LR schedule's length)."""
    c = cfg.depth_curriculum
    return stages(*depth_of(cfg.arch), c.ramp, c.stages, total_steps)


def validate(cfg: Any) -> None:
    """Check `depth_curriculum.*` against the architecture (each message names the key and the fix)."""
    from trm.model.registry import ARCHS, spec_of

    c = cfg.depth_curriculum
    ramp = c.ramp
    if isinstance(ramp, bool) or not isinstance(ramp, int | float) or not 0 <= ramp < 1:
        raise TRMError(
            f"depth_curriculum.ramp={ramp} must be in [0, 1): the share of the schedule's steps over which the "
            "depth ramps up (0: off, every step at full depth; CGAR's is 0.6)."
        )
    if isinstance(c.stages, bool) or not isinstance(c.stages, int) or not 2 <= c.stages <= MAX_STAGES:
        raise TRMError(
            f"depth_curriculum.stages={c.stages} must be an integer from 2 to {MAX_STAGES} (the last one is "
            f"full depth; each is one compiled graph; CGAR's is 3)."
        )
    if ramp == 0:
        return
    spec = spec_of(cfg.arch)
    if not spec.depth_cycles:
        recursive = ", ".join(name for name, each in ARCHS.items() if each.depth_cycles)
        raise TRMError(
            f"depth_curriculum.ramp={ramp} with arch={spec.name}: it has no recursion cycles to ramp; set "
            f"depth_curriculum.ramp=0 (or use one of {recursive})."
        )
    depths = {
        (s.H_cycles, s.L_cycles) for s in stages(cfg.arch.H_cycles, cfg.arch.L_cycles, ramp, c.stages, 1000)
    }
    if len(depths) < 2:
        raise TRMError(
            f"depth_curriculum.ramp={ramp} with arch.H_cycles={cfg.arch.H_cycles} arch.L_cycles="
            f"{cfg.arch.L_cycles}: there is no shallower depth to start from; set depth_curriculum.ramp=0."
        )


def _changes(model_config: Any, stage: Stage) -> dict[str, int]:
    """The cycle counts the stage sets that differ from the model config's (a key the stage has no value
    for, or the config lacks, stays as it is)."""
    wanted = {"H_cycles": stage.H_cycles, "L_cycles": stage.L_cycles}
    return {
        k: v
        for k, v in wanted.items()
        if v is not None and hasattr(model_config, k) and getattr(model_config, k) != v
    }


@contextmanager
def at_depth(model_config: Any, stage: Stage) -> Iterator[None]:
    """Run the block with the model config's cycle counts set to the stage's, then restore them (a no-op
    at the configured depth)."""
    changes = _changes(model_config, stage)
    saved = {k: getattr(model_config, k) for k in changes}
    for k, v in changes.items():
        setattr(model_config, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(model_config, k, v)


def depth_config(model_config: Any, stage: Stage) -> Any:
    """The model config at the stage's depth (a copy when it differs; for FLOP counts)."""
    changes = _changes(model_config, stage)
    return dataclasses.replace(model_config, **changes) if changes else model_config


def train_flops_per_example(model_config: Any, schedule: Sequence[Stage], first: int, last: int) -> float:
    """Mean training FLOPs per example per step over steps first..last (trm.training.throughput's count at
    each step's depth)."""
    from trm.training.throughput import act_step_flops

    if last < first:
        raise ValueError(f"empty step range {first}..{last}")
    total = 0.0
    for i, s in enumerate(schedule):
        hi = last if i == len(schedule) - 1 else min(last, s.last)  # the last stage runs on past the schedule
        lo = max(first, s.first)
        if hi >= lo:
            total += (hi - lo + 1) * act_step_flops(depth_config(model_config, s)).train
    return total / (last - first + 1)


def cumulative_train_flops(
    model_config: Any, schedule: Sequence[Stage], steps: int, batch: int
) -> list[float]:
    """Training FLOPs of steps 1..s of `batch` examples each, for s = 0..steps (index s)."""
    from trm.training.throughput import act_step_flops

    per_stage = {s: act_step_flops(depth_config(model_config, s)).train * batch for s in schedule}
    out = [0.0]
    for step in range(1, steps + 1):
        out.append(out[-1] + per_stage[stage_at(schedule, step)])
    return out


def record(schedule: Sequence[Stage], model_config: Any | None) -> list[dict[str, Any]]:
    """run.json's `depth_curriculum`: each stage with its training FLOPs per example (when countable)."""
    from trm.training.throughput import act_step_flops

    out = []
    for s in schedule:
        row: dict[str, Any] = s.as_dict()
        if model_config is not None:
            with suppress(ValueError):  # an architecture without a FLOP count
                row["train_flops_per_example"] = act_step_flops(depth_config(model_config, s)).train
        out.append(row)
    return out
