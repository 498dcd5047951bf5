"""Early stopping inside the training loop: the run ends as finished at the right evaluation, records why,
resumes the count bit-exactly after a stop, and a run without it is unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.training.test_subset_run import SUBSET
from tests.training.test_trainer_inprocess import assert_same_state, metric_rows, run
from trm import exit_codes
from trm.training.checkpointing import layout as ckpt
from trm.training.checkpointing.best import BEST_FILE

# 6 passes of 2 steps, an evaluation after each: steps 2, 4, …, 12.
SIX_EVALUATIONS = ("epochs=6", "eval_interval=1")
METRIC = "eval/all/exact_accuracy"  # the ranking metric without an ARC evaluator or a subset
# The scripted evaluation values by step: best 0.3 at step 4, then 0.2 and a tie at step 8.
SERIES = {2: 0.1, 4: 0.3, 6: 0.2, 8: 0.3, 10: 0.4, 12: 0.5}
# Rank by token accuracy (above 0 from the first evaluation, even for a tiny model that solves no puzzle).
TOKEN_ACCURACY = ("checkpoint.best_metric=eval/all/accuracy",)


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each in-run evaluation returns SERIES[step] as the ranking metric (no model evaluated); the steps
    evaluated."""
    evaluated: list[int] = []

    def evaluate(cfg, info, comps, run_dir, step, should_stop, *, full):
        evaluated.append(step)
        return {METRIC: SERIES[step]}

    monkeypatch.setattr("trm.training.loop.evaluate_or_undo", evaluate)
    return evaluated


def run_json(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())


def test_the_run_ends_as_finished_after_patience_evaluations_without_a_new_best(
    tmp_path: Path, scripted: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING"):
        code, trainer = run(tmp_path / "r", *SIX_EVALUATIONS, "early_stop.patience=2")
    assert code == exit_codes.OK and trainer.progress.finished and trainer.progress.step == 8
    assert scripted == [2, 4, 6, 8]  # no evaluation after the stop, none again at the end
    assert "early stop at step 8 of 12" in caplog.text and "best 0.3 at step 4" in caplog.text
    record = run_json(tmp_path / "r")["early_stop"]
    assert {k: record[k] for k in ("step", "step_limit", "evaluations", "metric", "best_step", "best_value")} == {
        "step": 8, "step_limit": 12, "evaluations": 4, "metric": METRIC, "best_step": 4, "best_value": 0.3,
    }  # fmt: skip
    final = ckpt.find_complete(tmp_path / "r")[-1]
    saved = ckpt.load_torch(final.path / ckpt.STATE)["progress"]
    assert final.step == 8 and final.manifest["kind"] == ckpt.EVAL and saved["finished"]
    assert saved["early_stop"]["stopped"] == record
    assert max(r["step"] for r in metric_rows(tmp_path / "r")) == 8
    # Started again: a finished run, nothing to do; run.json keeps the record.
    caplog.clear()
    with caplog.at_level("INFO"):
        code, again = run(tmp_path / "r", *SIX_EVALUATIONS, "early_stop.patience=2")
    assert code == exit_codes.OK and again.progress.step == 8 and scripted == [2, 4, 6, 8]
    assert "already finished at step 8; nothing to do" in caplog.text
    assert run_json(tmp_path / "r")["early_stop"] == record


def test_run_json_says_it_stopped_early_only_once_the_final_checkpoint_is_saved(
    tmp_path: Path, scripted: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kill between the decision and the final save must not leave run.json claiming a finished run."""
    from trm.training import loop

    recorded = loop.record_in_run_json
    seen = []

    def checking(run_dir: Path, key: str, value: dict) -> None:
        if key == "early_stop":
            final = ckpt.find_complete(run_dir)[-1]
            seen.append((final.step, ckpt.load_torch(final.path / ckpt.STATE)["progress"]["finished"]))
        recorded(run_dir, key, value)

    monkeypatch.setattr(loop, "record_in_run_json", checking)
    code, _ = run(tmp_path / "r", *SIX_EVALUATIONS, "early_stop.patience=2")
    assert code == exit_codes.OK and seen == [(8, True)]


def test_a_patience_in_a_run_that_evaluates_nothing_says_it_does_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING"):
        code, trainer = run(tmp_path / "r", *SIX_EVALUATIONS, "evaluate=false", "early_stop.patience=2")
    assert code == exit_codes.OK and trainer.progress.step == 12
    assert "early_stop.patience=2 does nothing in this run: it evaluates nothing in-run (evaluate=false)" in (
        caplog.text
    )


def test_min_delta_and_min_evaluations_move_the_stop(tmp_path: Path, scripted: list[int]) -> None:
    # 0.3 over 0.1 is more than 0.15, 0.4 over 0.3 is not: best at step 4, stop after steps 6 and 8.
    code, trainer = run(
        tmp_path / "delta", *SIX_EVALUATIONS, "early_stop.patience=2", "early_stop.min_delta=0.15"
    )
    assert code == exit_codes.OK and trainer.progress.step == 8
    code, trainer = run(
        tmp_path / "wait", *SIX_EVALUATIONS, "early_stop.patience=1", "early_stop.min_evaluations=5"
    )
    assert code == exit_codes.OK and trainer.progress.step == 12  # patience 1 would stop at step 6
    assert "early_stop" not in run_json(tmp_path / "wait")  # the last evaluation ends a run anyway


def test_a_stop_inside_the_patience_window_resumes_to_the_same_stop(
    tmp_path: Path, scripted: list[int]
) -> None:
    keys = (*SIX_EVALUATIONS, "early_stop.patience=2")
    code, straight = run(tmp_path / "straight", *keys)
    assert code == exit_codes.OK and straight.progress.step == 8
    # SIGTERM after step 7: the evaluations at 2, 4, 6 are in, one of the two without a new best counted.
    code, stopped = run(tmp_path / "split", *keys, stop_at=7)
    assert code == exit_codes.SAVED_RETRY and stopped.progress.early_stop["since"] == 1
    code, resumed = run(tmp_path / "split", *keys)
    assert code == exit_codes.OK and resumed.resumed_from == tmp_path / "split" / "step_7"
    assert resumed.progress.step == 8 and resumed.progress.finished
    assert_same_state(straight, resumed)
    assert metric_rows(tmp_path / "straight") == metric_rows(tmp_path / "split")
    assert run_json(tmp_path / "split")["early_stop"] == run_json(tmp_path / "straight")["early_stop"]
    assert resumed.progress.early_stop == straight.progress.early_stop


def test_off_by_default_and_an_untriggered_patience_leave_the_run_unchanged(
    tmp_path: Path, scripted: list[int]
) -> None:
    code, plain = run(tmp_path / "plain", *SIX_EVALUATIONS)
    assert (
        code == exit_codes.OK
        and plain.progress.step == 12
        and "early_stop" not in run_json(tmp_path / "plain")
    )
    # The state is kept (so turning the rule on at a resume counts the run so far); it decides nothing.
    state = plain.progress.early_stop
    assert (state["metric"], state["value"], state["step"], state["evaluations"], state["since"]) == (
        METRIC, 0.5, 12, 6, 0,
    )  # fmt: skip
    code, patient = run(tmp_path / "patient", *SIX_EVALUATIONS, "early_stop.patience=3")
    assert (
        code == exit_codes.OK
        and patient.progress.step == 12
        and "early_stop" not in run_json(tmp_path / "patient")
    )
    assert_same_state(plain, patient)
    assert metric_rows(tmp_path / "plain") == metric_rows(tmp_path / "patient")


def test_a_subset_run_stops_on_its_subset_score_and_still_chooses_the_best(tmp_path: Path) -> None:
    """Real evaluations: min_delta 1 means no evaluation after the first is a new best, whatever the
    values, so patience 1 ends the run after its second evaluation; the end then evaluates the best.top_k
    candidates fully as any subset run's does. Ranked by token accuracy: a run whose best is still 0 is
    never stopped, and this tiny model's exact accuracy may well be."""
    code, trainer = run(
        tmp_path / "r",
        *SUBSET,
        *TOKEN_ACCURACY,
        "early_stop.patience=1",
        "early_stop.min_delta=1",
        "eval_interval=1",
    )
    assert code == exit_codes.OK and trainer.progress.finished and trainer.progress.step == 4
    record = run_json(tmp_path / "r")
    assert record["early_stop"]["metric"] == "subset/eval/all/accuracy" and record["early_stop"]["step"] == 4
    assert record["early_stop"]["best_step"] == 2 and record["early_stop"]["step_limit"] == 8
    best = json.loads((tmp_path / "r" / BEST_FILE).read_text())
    assert best["evaluation"] == "full" and {c["step"] for c in best["candidates"]} == {2, 4}
    assert record["best"]["step"] == best["step"]
