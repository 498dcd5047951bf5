"""The Wilson score interval of a binomial proportion (no statistics package is a dependency)."""

from __future__ import annotations

import math
from statistics import NormalDist


def wilson_interval(successes: float, n: float, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval (without continuity correction) of `successes` out of `n` trials.

    `successes` may be fractional: ARC's pass@K gives partial credit for tasks with several test inputs,
    so `pass@K x tasks` need not be a whole number; the interval is then that of the observed proportion.
    """
    if n <= 0:
        raise ValueError(f"the Wilson interval needs n > 0 trials, got n={n}")
    if not 0 <= successes <= n:
        raise ValueError(f"successes={successes} is outside [0, n={n}]")
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)
