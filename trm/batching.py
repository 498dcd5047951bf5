"""Batch arithmetic shared by the launcher's hardware plan, the trainer's checks and the out-of-memory step-down:
divisors of a batch."""

from __future__ import annotations


def divisors(n: int) -> list[int]:
    """Every divisor of n >= 1, ascending."""
    if n < 1:
        raise ValueError(f"divisors of {n}: n must be >= 1")
    return [d for d in range(1, n + 1) if n % d == 0]


def largest_divisor_at_most(n: int, cap: int) -> int:
    """The largest divisor of n that is <= cap (1 when cap < 1): the micro-batch or interval nearest below."""
    return max(d for d in divisors(n) if d <= max(1, cap))


def halved_micro_batch(local: int, micro: int) -> int | None:
    """The micro-batch after an out-of-memory at `micro`: the largest divisor of the per-rank batch `local`
    at most half of it (twice the accumulation or more, the same rows per optimizer step); None at 1."""
    if micro <= 1:
        return None
    return largest_divisor_at_most(local, micro // 2)
