"""Evaluation's share of the wall time: a metric per evaluation and one warning naming eval_interval."""

from __future__ import annotations

import json
import logging
import time

import pytest

import tests.training.test_trainer_inprocess as inproc
from trm import exit_codes
from trm.training.eval_share import EvalShare, suggested_eval_interval


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
