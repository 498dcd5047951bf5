"""Evaluation's share of the wall time: a metric per evaluation and one warning naming eval_interval."""

from __future__ import annotations

import json
import logging
import time

import pytest

import tests.training.test_trainer_inprocess as inproc
from trm import exit_codes
from trm.training.eval_share import EvalShare, advice, suggested_eval_interval, suggested_subset_fraction


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_suggested_interval_brings_the_share_under_ten_percent():
    # 10 s of evaluation per 30 s of training: every 3x as many epochs gives 10/(10+90) = 10 %.
    assert suggested_eval_interval(2, 100, eval_s=10, train_s=30) == 10  # 6 does not divide 100
    assert suggested_eval_interval(2, 96, eval_s=10, train_s=30) == 6
    assert suggested_eval_interval(5, 10, eval_s=50, train_s=10) == 10  # at most once, at the end
    assert suggested_eval_interval(4, 8, eval_s=1, train_s=8.5) == 8  # always a longer interval


def test_share_metric_and_one_warning(caplog):
    clock = Clock()
    share = EvalShare(2, 100, warn=True, clock=clock)
    clock.now = 100.0  # 95 s of training, then a 5 s evaluation (recorded as it ends): 5 %
    with caplog.at_level(logging.WARNING):
        assert share.record(5.0) == {"eval/seconds": 5.0, "eval/wall_share": 0.05}
        assert caplog.text == ""
        clock.now = 200.0  # 80 s of training, a 20 s evaluation: 25 s of 200 s
        assert share.record(20.0)["eval/wall_share"] == 0.125
        clock.now = 300.0
        share.record(50.0)
    (line,) = [r.getMessage() for r in caplog.records]
    assert "evaluation took 12% of the wall time so far (25.0 s of 200.0 s; more than 10%)" in line
    # 25 s of evaluation against 175 s of training: k = 25*0.9/(0.1*175) = 1.29 -> interval >= 3 -> 4
    assert (
        "eval_interval=2 evaluates too often" in line and "eval_interval=4 (a divisor of epochs=100)" in line
    )
    share.restart()  # a new process: the clock starts again
    clock.now = 310.0
    assert share.record(1.0)["eval/wall_share"] == 0.1


def test_the_advice_never_suggests_the_interval_in_use():
    # One epoch evaluated after each: eval_interval=1 is already epochs; before, the warning suggested
    # "eval_interval=1 ... would keep it under 10%".
    text = advice(1, 1, eval_s=10, train_s=30)
    assert "eval_interval=1 (a divisor" not in text
    assert (
        "eval_interval=1 is already epochs=1 (one evaluation, at the end), so no rarer interval exists"
        in text
    )
    # 10 s of evaluation per 30 s of training: a subset of at most 0.1 x 30 / (0.9 x 10) = 0.333 keeps it <= 10 %.
    assert "the subset evaluation eval_subset.fraction=0.33" in text
    assert "eval_subset.full_every" in text and "best.top_k" in text
    # A larger divisor exists but is not enough: say so, with the share it would leave.
    text = advice(5, 10, eval_s=50, train_s=10)  # at eval_interval 10: 50 / (50 + 20) = 71 %
    assert "even eval_interval=10 (a divisor of epochs=10) would leave it at 71%" in text
    assert "eval_subset.fraction=0.022" in text
    # A larger divisor that suffices: both remedies.
    text = advice(2, 100, eval_s=10, train_s=30)
    assert "eval_interval=10 (a divisor of epochs=100) would keep it under 10%, or the subset" in text


def test_the_warning_of_a_run_evaluated_once_per_epoch_of_one(caplog):
    clock = Clock()
    share = EvalShare(1, 1, warn=True, clock=clock)
    clock.now = 40.0  # 30 s of training, a 10 s evaluation
    with caplog.at_level(logging.WARNING):
        share.record(10.0)
    (line,) = [r.getMessage() for r in caplog.records]
    assert "evaluation took 25% of the wall time" in line and "eval_interval=1 (a divisor" not in line
    assert "no rarer interval exists" in line and "eval_subset.fraction=0.33" in line


def test_the_subset_fraction_brings_the_share_to_at_most_ten_percent():
    for eval_s, train_s in ((10, 30), (50, 10), (1, 8.5), (3, 1000), (1000, 1)):
        f = suggested_subset_fraction(eval_s, train_s)
        assert 0 < f <= 1
        if f < 1 and f > 0.01:
            assert f * eval_s / (f * eval_s + train_s) <= 0.1 + 1e-12
    assert suggested_subset_fraction(3, 1000) == 1.0  # already under 10 % with every row


def test_capped_runs_get_the_metric_not_the_warning(caplog):
    clock = Clock()
    share = EvalShare(None, 10, warn=False, clock=clock)
    clock.now = 2.0
    with caplog.at_level(logging.WARNING):
        assert share.record(1.0)["eval/wall_share"] == 0.5
    assert caplog.records == []


@pytest.mark.e2e
def test_the_trainer_logs_the_share_and_warns_once(tmp_path, caplog, monkeypatch):
    """The tiny run evaluates every 4 steps of a fraction of a second; each evaluation is made to last 2 s
    more, so it is far more than 10 % of the wall time however fast or loaded the machine is."""
    from trm.evaluation import runner

    evaluate = runner.evaluate

    def slow_evaluate(*args, **kwargs):
        time.sleep(2.0)
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(runner, "evaluate", slow_evaluate)  # the loop imports it per evaluation
    with caplog.at_level(logging.WARNING, logger="trm.training.eval_share"):
        code, _ = inproc.run(tmp_path / "run")
    assert code == exit_codes.OK
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval/wall_share" in r]
    assert [r["step"] for r in evals] == [4, 8]
    assert all(0 < r["eval/wall_share"] < 1 and r["eval/seconds"] > 0 for r in evals)
    assert evals[1]["eval/wall_share"] > 0.1
    warnings = [r.getMessage() for r in caplog.records if r.name == "trm.training.eval_share"]
    assert len(warnings) == 1 and "eval_interval=2 evaluates too often" in warnings[0]
    assert "eval_interval=4 (a divisor of epochs=4)" in warnings[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="trm.training.eval_share"):
        code, _ = inproc.run(tmp_path / "capped", "max_steps=4")  # a smoke-sized run: no advice
    assert code == exit_codes.OK and not [r for r in caplog.records if r.name == "trm.training.eval_share"]
