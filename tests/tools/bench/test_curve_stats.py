"""The curve harness's statistics on synthetic curves: t quantiles, intervals, overlap, the verdict."""

from __future__ import annotations

import math

import pytest

from tools.bench import curve_stats as cs
from trm.errors import TRMError


@pytest.mark.parametrize(
    ("df", "expected"),  # two-sided 95 % critical values of Student's t (standard tables)
    [(1, 12.7062), (2, 4.3027), (4, 2.7764), (9, 2.2622), (30, 2.0423), (1000, 1.9623)],
)
def test_t_quantile_matches_tables(df, expected):
    assert cs.t_quantile(0.975, df) == pytest.approx(expected, abs=1e-3)
    assert cs.t_quantile(0.025, df) == pytest.approx(-expected, abs=1e-3)


def test_mean_interval_is_the_student_interval():
    values = [1.0, 2.0, 3.0]
    interval = cs.mean_interval(values, 0.95)
    assert interval.mean == 2.0
    assert interval.half == pytest.approx(4.3027 * 1.0 / math.sqrt(3), abs=1e-3)


def test_one_seed_is_refused_with_the_fix():
    with pytest.raises(TRMError, match="2 or more seeds"):
        cs.mean_interval([1.0], 0.95)


def test_welch_interval():
    a, b = [10.0, 11.0, 12.0, 13.0], [1.0, 3.0, 5.0]
    d = cs.difference_interval(a, b, 0.95)
    va, vb = (5 / 3) / 4, 4.0 / 3
    df = (va + vb) ** 2 / (va**2 / 3 + vb**2 / 2)
    assert d.mean == pytest.approx(11.5 - 3.0)
    assert d.half == pytest.approx(cs.t_quantile(0.975, df) * math.sqrt(va + vb))
    assert not d.contains(0.0)


def test_checkpoints_end_at_the_last_step():
    assert cs.checkpoints(100, 25) == [25, 50, 75, 100]
    assert cs.checkpoints(55, 10) == [10, 20, 30, 40, 50, 55]


def curve(steps, f, noise):
    """A synthetic run: f(step) plus a deterministic seed-dependent wiggle."""
    return {s: f(s) + noise * math.sin(3.1 * s + 7 * noise) for s in range(1, steps + 1)}


def seeds(f, n=4, steps=100, spread=0.02):
    return [curve(steps, f, spread * (k + 1)) for k in range(n)]


def loss(s):
    return 2.0 * math.exp(-s / 40)


def test_same_curves_are_indistinguishable():
    marks = cs.checkpoints(100, 10)
    comp = cs.compare_metric("train/lm_loss", seeds(loss), seeds(loss, spread=0.025), marks, window=10)
    assert comp.parted_at is None
    assert comp.verdict == "indistinguishable at equal steps"
    assert comp.final_difference.contains(0.0)
    assert cs.overall_verdict([comp]) == "indistinguishable at equal steps"


def test_curves_that_part_name_the_first_disjoint_checkpoint():
    # identical until step 50, then B stops learning: its loss stays at loss(50)
    def stalled(s):
        return loss(min(s, 50))

    marks = cs.checkpoints(100, 10)
    comp = cs.compare_metric("train/lm_loss", seeds(loss), seeds(stalled), marks, window=10)
    first_disjoint = next(s for s, a, b in zip(marks, comp.a, comp.b, strict=True) if not a.overlaps(b))
    assert 50 < first_disjoint <= 100
    assert comp.parted_at == first_disjoint
    assert comp.verdict == f"part at step {first_disjoint}"
    assert not comp.final_difference.contains(0.0)
    same = cs.compare_metric("train/accuracy", seeds(loss), seeds(loss), marks, window=10)
    assert cs.overall_verdict([same, comp]) == f"part at step {first_disjoint} (train/lm_loss)"


def test_final_difference_alone_parts_at_the_last_checkpoint():
    # seeds spread 0, 1, 2 on both sides, B shifted by 3 at the end: each mean's interval is ±2.48 (t 4.30,
    # 3 seeds), so they overlap; Welch's interval of the difference is ±2.27 (t 2.78, 4 df): 0 is outside
    a = [{1: v, 2: v} for v in (0.0, 1.0, 2.0)]
    b = [{1: v, 2: v + 3.0} for v in (0.0, 1.0, 2.0)]
    comp = cs.compare_metric("m", a, b, [1, 2], window=1)
    assert all(x.overlaps(y) for x, y in zip(comp.a, comp.b, strict=True))
    assert not comp.final_difference.contains(0.0)
    assert comp.parted_at == 2
    # a shift of 2 stays inside the difference's interval: indistinguishable
    b = [{1: v, 2: v + 2.0} for v in (0.0, 1.0, 2.0)]
    assert cs.compare_metric("m", a, b, [1, 2], window=1).parted_at is None


def test_a_missing_window_names_the_steps():
    with pytest.raises(TRMError, match=r"no value logged in steps 11\.\.20"):
        cs.window_mean({1: 0.0, 2: 0.0}, 20, 10)


def test_interpolation_and_the_common_compute_grid():
    assert cs.interpolate([0.0, 10.0, 30.0], [1.0, 3.0, 7.0], 20.0) == pytest.approx(5.0)
    assert cs.interpolate([0.0, 10.0], [1.0, 3.0], 10.0) == 3.0
    with pytest.raises(TRMError, match="outside the curve's range"):
        cs.interpolate([0.0, 10.0], [1.0, 3.0], 11.0)
    # Side A costs 2 per step, side B 1 per step, 10 steps each, window 2: each window mean sits at its
    # steps' mean FLOPs, so A's windows at 3, 5, ..., 19 and B's at 1.5, 2.5, ..., 9.5; the grid runs from
    # A's first centre to B's last.
    flops_a, flops_b = [2.0 * s for s in range(11)], [1.0 * s for s in range(11)]
    centres_a, centres_b = cs.window_centres(flops_a, 2), cs.window_centres(flops_b, 2)
    assert centres_a[:2] == [3.0, 5.0] and centres_b[-1] == 9.5 and len(centres_a) == 9
    assert cs.compute_grid(centres_a, centres_b, points=3) == [3.0, 6.25, 9.5]
    with pytest.raises(TRMError, match="no common compute range"):
        cs.compute_grid(centres_a, [0.5, 1.0], points=3)


def test_a_side_at_half_the_cost_parts_at_equal_steps_but_not_at_equal_compute():
    # Both sides learn the same function of the FLOPs spent; B spends half as much per step (a depth
    # curriculum that saves compute without losing anything per FLOP).
    def by_flops(x):
        return loss(x / 2.0)  # A: 2 FLOPs per step, so at step s it has spent 2s

    def runs(f, shift=0.0):
        """4 seeds, each off the curve by its own constant (the seed-to-seed spread of real runs: ±0.015)."""
        return [
            {s: v + offset + shift for s, v in c.items()}
            for c, offset in zip(seeds(f), (-0.015, -0.005, 0.005, 0.015), strict=True)
        ]

    steps, window = 100, 10
    flops_a = [2.0 * s for s in range(steps + 1)]
    flops_b = [1.0 * s for s in range(steps + 1)]
    runs_a = runs(lambda s: by_flops(flops_a[s]))
    runs_b = runs(lambda s: by_flops(flops_b[s]), shift=0.002)
    marks = cs.checkpoints(steps, window)
    assert cs.compare_metric("train/lm_loss", runs_a, runs_b, marks, window=window).parted_at is not None
    comp = cs.compare_metric_at_compute("train/lm_loss", runs_a, runs_b, flops_a, flops_b, window=window)
    assert comp.axis == cs.COMPUTE and comp.parted_at is None
    assert comp.verdict == "indistinguishable at equal compute"
    # From A's first window centre (steps 1-10: 11 FLOPs) to B's last (steps 91-100: 95.5), 10 points.
    assert comp.steps[0] == 11.0 and comp.steps[-1] == 95.5
    assert len(comp.steps) == 10 and comp.as_dict()["flops"] == comp.steps
    # B learning half as much per FLOP parts at equal compute, and the verdict names the FLOPs.
    slow = runs(lambda s: by_flops(flops_b[s] / 2.0))
    parted = cs.compare_metric_at_compute("train/lm_loss", runs_a, slow, flops_a, flops_b, window=window)
    assert parted.parted_at is not None and parted.verdict == f"part at {parted.parted_at:.3g} FLOPs"
    assert cs.overall_verdict([comp, parted]) == f"part at {parted.parted_at:.3g} FLOPs (train/lm_loss)"
