"""Statistics of the curve harness (tools.bench.curves): per-checkpoint means with Student-t intervals
across seeds, the final difference's Welch interval, and the parity verdict. Pure Python, no torch.

A curve is one run's metric at each logged step ({step: value}); a checkpoint's value for one run is the
mean over the window of steps ending there (train metrics are per batch and noisy). Two trainers are
"indistinguishable at equal steps" for a metric when their intervals overlap at every checkpoint and the
interval of the final difference (A - B) contains 0; otherwise they part at the first checkpoint whose
intervals are disjoint (or, when every pair overlaps, at the last checkpoint, whose difference excludes 0).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from trm.errors import TRMError

LEVEL = 0.95  # of every interval the harness states

Curve = Mapping[int, float]


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b), by its continued fraction (Lentz's method)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):  # the fraction converges fast only below this point
        return 1.0 - _incomplete_beta(b, a, 1.0 - x)
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1.0) < 1e-14:
            break
    return math.exp(log_front) * result / a


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom."""
    tail = 0.5 * _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p (bisection on t_cdf; p in (0, 1))."""
    lo, hi = -1e6, 1e6
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class Interval:
    """A mean and the half-width of its confidence interval."""

    mean: float
    half: float

    @property
    def low(self) -> float:
        return self.mean - self.half

    @property
    def high(self) -> float:
        return self.mean + self.half

    def overlaps(self, other: Interval) -> bool:
        return self.low <= other.high and other.low <= self.high

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


def mean_interval(values: Sequence[float], level: float) -> Interval:
    """Mean and Student-t half-width of `values` (one per seed); needs two or more."""
    n = len(values)
    if n < 2:
        raise TRMError(f"a confidence interval needs 2 or more seeds, got {n}: pass --seeds 2 or more")
    sd = statistics.stdev(values)
    return Interval(statistics.fmean(values), t_quantile(0.5 + level / 2.0, n - 1) * sd / math.sqrt(n))


def difference_interval(a: Sequence[float], b: Sequence[float], level: float) -> Interval:
    """mean(a) - mean(b) with Welch's interval (unequal variances, Welch-Satterthwaite degrees of freedom)."""
    if len(a) < 2 or len(b) < 2:
        raise TRMError(f"a difference interval needs 2 or more seeds per side, got {len(a)} and {len(b)}")
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    diff = statistics.fmean(a) - statistics.fmean(b)
    if va + vb == 0.0:
        return Interval(diff, 0.0)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return Interval(diff, t_quantile(0.5 + level / 2.0, df) * math.sqrt(va + vb))


def checkpoints(last_step: int, every: int) -> list[int]:
    """every, 2·every, …, up to last_step (which is always the final checkpoint)."""
    if every < 1 or last_step < 1:
        raise TRMError(
            f"checkpoints need a positive spacing and last step, got every={every}, last={last_step}"
        )
    marks = list(range(every, last_step + 1, every))
    return marks if marks and marks[-1] == last_step else [*marks, last_step]


def window_mean(curve: Curve, end: int, window: int) -> float:
    """Mean of a run's values at steps (end - window, end]; an error when none was logged there."""
    values = [v for s, v in curve.items() if end - window < s <= end]
    if not values:
        raise TRMError(
            f"no value logged in steps {end - window + 1}..{end}: the run stopped early or logs sparsely"
        )
    return statistics.fmean(values)


STEPS, COMPUTE = "steps", "compute"  # the comparison's x axis: optimizer steps, or cumulative training FLOPs


def _at(axis: str, x: float) -> str:
    return f"step {int(x)}" if axis == STEPS else f"{x:.3g} FLOPs"


@dataclass(frozen=True)
class MetricComparison:
    """One metric of two trainers: per-checkpoint intervals, the final difference, the verdict."""

    metric: str
    steps: list  # the checkpoints on the axis: steps (int) or cumulative training FLOPs (float)
    a: list[Interval]
    b: list[Interval]
    final_difference: Interval
    parted_at: float | None  # None: indistinguishable at equal steps (or compute)
    axis: str = STEPS

    @property
    def verdict(self) -> str:
        if self.parted_at is None:
            return f"indistinguishable at equal {self.axis}"
        return f"part at {_at(self.axis, self.parted_at)}"

    @classmethod
    def from_dict(cls, d: dict) -> MetricComparison:
        """The inverse of as_dict (a recorded comparison, e.g. to plot it again)."""
        axis = d.get("axis", STEPS)
        xs = d["steps"] if axis == STEPS else d["flops"]

        def side(key: str) -> list[Interval]:
            return [Interval(m, h) for m, h in zip(d[key]["mean"], d[key]["half"], strict=True)]

        fd = d["final_difference"]
        return cls(
            d["metric"],
            list(xs),
            side("a"),
            side("b"),
            Interval(fd["mean"], fd["half"]),
            d["parted_at"],
            axis,
        )

    def as_dict(self) -> dict:
        return {
            "metric": self.metric,
            "axis": self.axis,
            ("steps" if self.axis == STEPS else "flops"): self.steps,
            "a": {"mean": [i.mean for i in self.a], "half": [i.half for i in self.a]},
            "b": {"mean": [i.mean for i in self.b], "half": [i.half for i in self.b]},
            "final_difference": {"mean": self.final_difference.mean, "half": self.final_difference.half},
            "parted_at": self.parted_at,
            "verdict": self.verdict,
        }


def compare_metric(
    metric: str,
    runs_a: Sequence[Curve],
    runs_b: Sequence[Curve],
    steps: Sequence[int],
    window: int,
    level: float = 0.95,
) -> MetricComparison:
    """Both trainers' seeds of one metric at `steps`, and the verdict."""
    per_a = [[window_mean(run, s, window) for run in runs_a] for s in steps]
    per_b = [[window_mean(run, s, window) for run in runs_b] for s in steps]
    a = [mean_interval(v, level) for v in per_a]
    b = [mean_interval(v, level) for v in per_b]
    final = difference_interval(per_a[-1], per_b[-1], level)
    return MetricComparison(metric, list(steps), a, b, final, _verdict(a, b, final, steps))


def _verdict(a: list[Interval], b: list[Interval], final: Interval, xs: Sequence) -> float | None:
    """The first checkpoint with disjoint intervals, else the last when the final difference excludes 0."""
    parted = next((x for x, ia, ib in zip(xs, a, b, strict=True) if not ia.overlaps(ib)), None)
    if parted is None and not final.contains(0.0):
        parted = xs[-1]
    return parted


def interpolate(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """The piecewise-linear curve through (xs, ys) (xs increasing) at x, inside [xs[0], xs[-1]]."""
    if not xs or not xs[0] <= x <= xs[-1]:
        raise TRMError(
            f"{x:g} lies outside the curve's range {xs[0] if xs else '?'}..{xs[-1] if xs else '?'}"
        )
    hi = next(i for i, v in enumerate(xs) if v >= x)
    if xs[hi] == x or hi == 0:
        return ys[hi]
    lo = hi - 1
    return ys[lo] + (ys[hi] - ys[lo]) * (x - xs[lo]) / (xs[hi] - xs[lo])


def window_centres(flops: Sequence[float], window: int) -> list[float]:
    """Where each window mean sits on the compute axis: for the windows ending at steps window..N, the mean
    cumulative FLOPs of their steps (flops[s]: after steps 1..s). A window mean estimates the curve at its
    window's centre, and the two sides' windows span different FLOPs when their steps cost differently."""
    return [statistics.fmean(flops[s - window + 1 : s + 1]) for s in range(window, len(flops))]


def compute_grid(centres_a: Sequence[float], centres_b: Sequence[float], points: int) -> list[float]:
    """`points` equally spaced FLOP values that both sides' window centres cover: from the later first
    centre to the smaller last one."""
    low, high = max(centres_a[0], centres_b[0]), min(centres_a[-1], centres_b[-1])
    if points < 2 or not high > low:
        raise TRMError(
            f"no common compute range: {low:.3g}..{high:.3g} FLOPs (run more steps or a shorter window)"
        )
    return [low + (high - low) * i / (points - 1) for i in range(points)]


def values_at_compute(
    curve: Curve, flops: Sequence[float], window: int, grid: Sequence[float]
) -> list[float]:
    """One run's window means (windows ending at steps window..N), each at its window's centre on the
    compute axis (window_centres), interpolated onto `grid`."""
    ys = [window_mean(curve, s, window) for s in range(window, len(flops))]
    return [interpolate(window_centres(flops, window), ys, g) for g in grid]


def compare_metric_at_compute(
    metric: str,
    runs_a: Sequence[Curve],
    runs_b: Sequence[Curve],
    flops_a: Sequence[float],
    flops_b: Sequence[float],
    window: int,
    points: int = 10,
    level: float = 0.95,
) -> MetricComparison:
    """Both sides of one metric at equal training compute: each run's window means (window steps) placed at
    their windows' centres on its side's cumulative FLOPs (flops_x[s] after steps 1..s; the same for every
    seed of a side), interpolated onto a common grid of `points` FLOP values; intervals and verdict as at
    equal steps."""
    grid = compute_grid(window_centres(flops_a, window), window_centres(flops_b, window), points)
    per_a = list(zip(*(values_at_compute(r, flops_a, window, grid) for r in runs_a), strict=True))
    per_b = list(zip(*(values_at_compute(r, flops_b, window, grid) for r in runs_b), strict=True))
    a = [mean_interval(v, level) for v in per_a]
    b = [mean_interval(v, level) for v in per_b]
    final = difference_interval(per_a[-1], per_b[-1], level)
    return MetricComparison(metric, grid, a, b, final, _verdict(a, b, final, grid), axis=COMPUTE)


def overall_verdict(comparisons: Sequence[MetricComparison]) -> str:
    """One line: indistinguishable, or the earliest checkpoint where a metric parts (and which)."""
    axis = comparisons[0].axis if comparisons else STEPS
    parted = [(c.parted_at, c.metric) for c in comparisons if c.parted_at is not None]
    if not parted:
        return f"indistinguishable at equal {axis}"
    first = min(x for x, _ in parted)
    names = ", ".join(metric for x, metric in parted if x == first)
    return f"part at {_at(axis, first)} ({names})"
