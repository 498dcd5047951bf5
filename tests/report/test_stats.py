"""The Wilson score interval against published values."""

from __future__ import annotations

import pytest

from trm.report.stats import wilson_interval


@pytest.mark.parametrize(
    ("successes", "n", "expected"),
    [
        # R: prop.test(8, 10, correct = FALSE)$conf.int -> 0.4901625 0.9433178
        (8, 10, (0.4901625, 0.9433178)),
        # Wilson (1927) / Newcombe (1998) table, 0 of 10 and 10 of 10: 0 to 0.2775 and 0.7225 to 1
        (0, 10, (0.0, 0.2775328)),
        (10, 10, (0.7224672, 1.0)),
        # prop.test(81, 263, correct = FALSE)$conf.int -> 0.2553 0.3662 (Newcombe's example)
        (81, 263, (0.2553, 0.3662)),
    ],
)
def test_known_values(successes, n, expected):
    low, high = wilson_interval(successes, n)
    assert low == pytest.approx(expected[0], abs=1e-4)
    assert high == pytest.approx(expected[1], abs=1e-4)


def test_large_n_approaches_the_normal_interval_and_wider_confidence_is_wider():
    low, high = wilson_interval(500_000, 1_000_000)
    assert (low, high) == pytest.approx((0.5 - 1.959964 * 0.0005, 0.5 + 1.959964 * 0.0005), abs=1e-6)
    narrow, wide = wilson_interval(30, 100, 0.9), wilson_interval(30, 100, 0.99)
    assert wide[0] < narrow[0] < 0.3 < narrow[1] < wide[1]


def test_fractional_successes_and_bad_input():
    assert wilson_interval(7.5, 120)[0] < 7.5 / 120 < wilson_interval(7.5, 120)[1]
    with pytest.raises(ValueError, match="n > 0"):
        wilson_interval(0, 0)
    with pytest.raises(ValueError, match="outside"):
        wilson_interval(11, 10)
