"""Evaluation passes with more ACT steps than training: URM's loop extrapolation (`arch.loop_deltas`).

The reference evaluates every time with `loops + delta` ACT steps for each delta (default 0 and 8), with
the same evaluators, so ARC votes pool across the passes. Delta 0's metrics keep their names; another
delta's are prefixed `loops+<d>/` and its outputs go to a `loops+<d>/` folder of the run directory.
Architectures without `loop_deltas` evaluate once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class EvalPass:
    """One evaluation pass: the extra ACT steps and the metric prefix (and output folder) it logs under."""

    delta: int
    prefix: str


def eval_passes(arch: Any) -> list[EvalPass]:
    """The passes of one evaluation, in the order the reference runs them."""
    deltas = list(getattr(arch, "loop_deltas", None) or [0])
    return [EvalPass(d, "" if d == 0 else f"loops{d:+d}/") for d in deltas]


@contextlib.contextmanager
def act_steps_raised(model_config: Any, delta: int) -> Iterator[None]:
    """Run with `loops + delta` ACT steps (the model reads its config at every step), then restore."""
    if delta == 0:
        yield
        return
    before = model_config.loops
    model_config.loops = before + delta
    try:
        yield
    finally:
        model_config.loops = before


def evaluate_passes(
    arch: Any, model_config: Any, save_dir: Path, run_pass: Callable[[Path], dict[str, float]]
) -> dict[str, float]:
    """Run `run_pass(save_dir)` once per pass with its step limit; the metrics of all passes, prefixed."""
    metrics: dict[str, float] = {}
    for one in eval_passes(arch):
        with act_steps_raised(model_config, one.delta):
            found = run_pass(save_dir / one.prefix if one.prefix else save_dir)
        metrics.update({f"{one.prefix}{k}": v for k, v in found.items()})
    return metrics
