"""Batch arithmetic: the one divisor helper the launcher, the config checks and the slot plan share."""

from __future__ import annotations

import pytest

from trm.batching import divisors, largest_divisor_at_most


def test_largest_divisor():
    assert largest_divisor_at_most(192, 64) == 64
    assert largest_divisor_at_most(96, 64) == 48
    assert largest_divisor_at_most(7, 5) == 1
    assert largest_divisor_at_most(100000, 30000) == 25000  # an eval_interval suggestion
    assert largest_divisor_at_most(8, 0) == 1 and largest_divisor_at_most(8, 100) == 8


def test_divisors():
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    with pytest.raises(ValueError, match="must be >= 1"):
        divisors(0)
