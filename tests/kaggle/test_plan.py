"""The competition time plan of `python -m trm infer` (trm.kaggle.plan), with numbers."""

from __future__ import annotations

import dataclasses

import pytest

from trm.adapt.run import AdaptSettings
from trm.errors import TRMError
from trm.kaggle.competition import competition
from trm.kaggle.plan import RESERVE_MINUTES, Speed, competition_speed, plan_time, planned_settings

ARC = competition()  # 4 x L4, 12 h
# 7.5 s per 768-row step (0.125 min), 0.1 s per inference row: 156 test inputs x 1000 = 260 min.
SPEED = Speed(adapt_step_seconds=7.5, adapt_step_rows=768, infer_row_seconds=0.1, source="test")


def plan(**kw: object):  # type: ignore[no-untyped-def]
    args: dict[str, object] = dict(
        tasks=120, unseen_tasks=120, test_inputs=156, num_aug=1000, adapt_steps=None, adapt_minutes=None,
        max_minutes=None,
    )  # fmt: skip
    args.update(kw)
    return plan_time(ARC, SPEED, **args)  # type: ignore[arg-type]


def test_the_default_competition_is_arc_prize_2025_on_four_l4_for_12_hours_offline() -> None:
    assert (ARC.name, ARC.gpu, ARC.gpus, ARC.hours, ARC.internet) == (
        "arc-prize-2025",
        "NVIDIA L4",
        4,
        12.0,
        False,
    )
    assert competition(gpus=2, hours=9).describe() == "arc-prize-2025: 2 x NVIDIA L4, 9 h, offline"
    with pytest.raises(TRMError, match="--competition 'arc-prize-2030'"):
        competition("arc-prize-2030")
    with pytest.raises(TRMError, match="--gpus 0"):
        competition(gpus=0)
    with pytest.raises(TRMError, match="--hours -1"):
        competition(hours=-1)


def test_steps_that_fit_are_kept_and_the_rest_is_inference() -> None:
    p = plan(adapt_steps=2000)
    assert p.budget_minutes == 12 * 60 - RESERVE_MINUTES == 700
    assert (p.adapt_steps, p.adapt_minutes, p.inference_minutes) == (2000, 250, 450)
    assert p.inference_minutes_needed == pytest.approx(260) and p.rounds == 1000
    assert not p.over and not p.shortened
    assert p.share(p.adapt_minutes) == pytest.approx(250 / 720)
    text = p.describe()
    assert "2,000 steps, 250.0 min (34.7 % of 12 h)" in text and "450.0 min left (62.5 % of 12 h)" in text
    assert "1000 of 1000 augmentation rounds fit" in text and "OVER TIME" not in text
    assert "3 of the 4 GPUs idle" in text


def test_minutes_become_steps_at_the_planned_step_time() -> None:
    p = plan(adapt_minutes=100)
    assert (p.adapt_steps, p.adapt_minutes) == (800, 100)
    both = plan(adapt_steps=500, adapt_minutes=100)  # whichever ends first
    assert (both.adapt_steps, both.adapt_minutes) == (500, pytest.approx(62.5))


def test_adaptation_that_does_not_leave_inference_its_time_is_shortened() -> None:
    p = plan(adapt_minutes=600)  # 600 + 260 > 700
    assert p.over and p.shortened
    assert p.adapt_minutes == pytest.approx(440) and p.adapt_steps == 3520 and p.rounds == 1000
    assert "OVER TIME      adaptation 600.0 min + inference 260.0 min exceed the budget of 700.0 min" in (
        p.describe()
    )
    assert "adaptation shortened to 440.0 min" in p.describe()
    settings = planned_settings(p, AdaptSettings(minutes=600))
    assert settings.minutes == pytest.approx(440)  # the trainer's deadline stops adaptation in time
    unchanged = AdaptSettings(steps=10)
    assert planned_settings(plan(adapt_steps=10), unchanged) is unchanged
    assert planned_settings(p, None) is None


def test_when_inference_alone_is_too_long_adaptation_keeps_up_to_half_and_fewer_rounds_run() -> None:
    p = plan(num_aug=3000, adapt_minutes=300)  # inference alone needs 780 min of 700
    assert p.over and not p.shortened and p.adapt_minutes == 300
    assert p.rounds == 1538  # 400 min / (156 rows x 0.1 s)
    assert "adaptation kept, inference runs 1538 of 3000 rounds" in p.describe()
    greedy = plan(num_aug=3000, adapt_minutes=650)
    assert greedy.adapt_minutes == 350 and greedy.rounds == 1346  # half the budget


def test_max_minutes_is_the_budget_and_capped_to_the_competitions_hours() -> None:
    assert plan(max_minutes=300).budget_minutes == 300
    capped = plan(max_minutes=900)
    assert capped.budget_minutes == 700 and "--max-minutes 900 capped" in capped.budget_source
    short = plan_time(
        competition(hours=1), SPEED, tasks=1, unseen_tasks=1, test_inputs=1, num_aug=1, adapt_steps=None,
        adapt_minutes=None, max_minutes=None,
    )  # fmt: skip
    assert short.budget_minutes == 40
    with pytest.raises(TRMError, match=r"--hours 0\.25"):
        plan_time(
            competition(hours=0.25), SPEED, tasks=1, unseen_tasks=1, test_inputs=1, num_aug=1,
            adapt_steps=None, adapt_minutes=None, max_minutes=None,
        )  # fmt: skip


def test_no_unseen_task_or_no_budget_means_no_adaptation() -> None:
    for p in (plan(unseen_tasks=0, adapt_minutes=100), plan()):
        assert (p.adapt_steps, p.adapt_minutes, p.inference_minutes) == (0, 0, 700)


def test_l4_step_is_the_measured_h100_step_times_the_peak_flops_ratio() -> None:
    from trm.kaggle.bundle import arch_fields
    from trm.launch.cost.estimate import reference_model
    from trm.launch.host.hardware import load_table
    from trm.model.registry import spec_of

    h100 = next(t.speed for t in load_table().tiers if t.name == "h100-80g")
    assert h100 is not None
    ref = reference_model(h100)  # the measured recipe's model: FLOPs ratio 1
    config = {"arch_name": spec_of(ref).name, "arch": arch_fields(ref), "train": {"global_batch_size": 768}}
    speed = competition_speed(ARC, config)
    assert speed.adapt_step_rows == 768
    assert speed.adapt_step_seconds == pytest.approx(0.907 * 989.4 / 121.0)  # 7.42 s
    assert speed.infer_row_seconds == pytest.approx(1 / 80 * 989.4 / 121.0)
    assert speed.source.startswith(
        "estimate, derived from the NVIDIA H100 80GB HBM3 measurement of 2026-11-26, arc2"
    )
    # A quarter of the batch and a model half as deep: a quarter of the rows, about half the FLOPs each.
    small = dataclasses.replace(ref, L_layers=ref.L_layers // 2)
    config = {"arch_name": spec_of(ref).name, "arch": arch_fields(small), "train": {"global_batch_size": 192}}
    scaled = competition_speed(ARC, config)
    assert 0.1 < scaled.adapt_step_seconds / speed.adapt_step_seconds < 0.25
    assert "this model's training FLOPs per row" in scaled.source
