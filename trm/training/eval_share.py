"""How much of a run's wall time its evaluations take: two metrics per evaluation, one warning above 10 %.

`eval/seconds` is one evaluation's wall time; `eval/wall_share` is all evaluations' time so far over the
wall time since this process started training (saves included). When the share first exceeds
WARN_SHARE the log says so once (`advice`): the smallest divisor of `epochs` above `eval_interval` that would
bring it under the threshold, or that none would (an interval of `epochs` is one evaluation, at the end), and
the subset evaluation's `eval_subset.fraction` that would. Runs capped by `max_steps` (smoke gates,
probes) evaluate at their end on purpose: they get the metrics, not the warning.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

log = logging.getLogger(__name__)
WARN_SHARE = 0.10


def suggested_eval_interval(eval_interval: int, epochs: int, eval_s: float, train_s: float) -> int:
    """The smallest divisor of `epochs` at which evaluations would take at most WARN_SHARE of the time.

    With evaluations every k times as many epochs the training time between two of them grows k-fold:
    eval_s / (eval_s + k * train_s) <= WARN_SHARE  <=>  k >= eval_s * (1 - WARN_SHARE) / (WARN_SHARE * train_s).
    """
    k = eval_s * (1 - WARN_SHARE) / (WARN_SHARE * max(train_s, 1e-9))
    wanted = max(eval_interval + 1, math.ceil(eval_interval * k))
    return next((d for d in range(wanted, epochs) if epochs % d == 0), epochs)


def suggested_subset_fraction(eval_s: float, train_s: float) -> float:
    """The largest `eval_subset.fraction` (two significant digits, rounded down) at which subset evaluations
    would take at most WARN_SHARE: f * eval_s / (f * eval_s + train_s) <= WARN_SHARE
    <=> f <= WARN_SHARE * train_s / ((1 - WARN_SHARE) * eval_s)."""
    f = WARN_SHARE * train_s / ((1 - WARN_SHARE) * max(eval_s, 1e-9))
    if f >= 1:
        return 1.0
    scale = 10 ** (1 - math.floor(math.log10(f))) if f > 0 else 1
    return max(math.floor(f * scale) / scale, 0.01)


def advice(eval_interval: int, epochs: int, eval_s: float, train_s: float) -> str:
    """What would bring evaluation under WARN_SHARE: a rarer eval_interval when a larger divisor of `epochs`
    exists and suffices, and the subset evaluation; never the interval already in use."""
    better = suggested_eval_interval(eval_interval, epochs, eval_s, train_s)
    fraction = suggested_subset_fraction(eval_s, train_s)
    subset = (
        f"the subset evaluation eval_subset.fraction={fraction:g} (a fixed, seeded share of the rows at each "
        "in-run evaluation; every eval_subset.full_every-th one and the best.top_k candidates at the end "
        f"stay full and add to it) would keep the subset evaluations under {100 * WARN_SHARE:.0f}%"
    )
    if better <= eval_interval:
        return (
            f"eval_interval={eval_interval} is already epochs={epochs} (one evaluation, at the end), so no "
            f"rarer interval exists; {subset}"
        )
    k = better / eval_interval
    share = eval_s / (eval_s + k * train_s)
    head = f"eval_interval={eval_interval} evaluates too often for this speed; "
    if share > WARN_SHARE:
        return (
            f"{head}even eval_interval={better} (a divisor of epochs={epochs}) would leave it at "
            f"{100 * share:.0f}%; {subset}"
        )
    return (
        f"{head}eval_interval={better} (a divisor of epochs={epochs}) would keep it under "
        f"{100 * WARN_SHARE:.0f}%, or {subset}"
    )


class EvalShare:
    """Accumulates evaluation time against wall time; see the module docstring."""

    def __init__(
        self,
        eval_interval: int | None,
        epochs: int,
        *,
        warn: bool,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.eval_interval = eval_interval or epochs
        self.epochs = epochs
        self.warn = warn
        self.clock = clock
        self.started = clock()
        self.eval_s = 0.0
        self.warned = False

    def restart(self) -> None:
        """Training starts (again) in this process: the wall clock counts from now."""
        self.started, self.eval_s = self.clock(), 0.0

    def record(self, seconds: float) -> dict[str, float]:
        """One evaluation took `seconds`: its metrics, and the warning the first time the share is too high."""
        self.eval_s += seconds
        wall = max(self.clock() - self.started, seconds, 1e-9)
        share = self.eval_s / wall
        if self.warn and share > WARN_SHARE and not self.warned:
            self.warned = True
            train_s = wall - self.eval_s
            log.warning(
                "evaluation took %.0f%% of the wall time so far (%.1f s of %.1f s; more than %.0f%%): %s",
                100 * share, self.eval_s, wall, 100 * WARN_SHARE,
                advice(self.eval_interval, self.epochs, self.eval_s, train_s),
            )  # fmt: skip
        return {"eval/seconds": seconds, "eval/wall_share": share}
