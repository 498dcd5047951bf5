"""Early stopping's rule on a series of evaluation values, its state in the progress, and its keys."""

from __future__ import annotations

import math

import pytest

from trm.errors import TRMError
from trm.training.checkpointing.state import Progress
from trm.training.config import EarlyStopConfig, compose, config_hash, is_run_only, math_dict
from trm.training.early_stop import EarlyStopState, stop_index

BASE = ["data_paths=[unused]", "evaluators=[]"]


@pytest.mark.parametrize(
    ("values", "patience", "min_delta", "min_evaluations", "expected"),
    [
        ([0.1, 0.2, 0.3, 0.4], 1, 0.0, 0, None),  # rising: runs to the end
        ([0.1, 0.3, 0.2, 0.3, 0.5], 2, 0.0, 0, 3),  # a tie is no new best
        ([0.1, 0.3, 0.2, 0.3, 0.5], 3, 0.0, 0, None),
        ([0.1, 0.15, 0.19, 0.3], 2, 0.1, 0, 2),  # improvements of 0.1 or less do not count
        ([0.1, 0.15, 0.21, 0.25], 2, 0.1, 0, None),  # 0.21 > 0.1 + 0.1 is a new best
        ([0.0, 0.0, 0.0, 0.0, 0.5, 0.6], 1, 0.0, 0, None),  # a flat start at 0 never stops the run
        ([0.0, 0.0, 0.0, 0.0, 0.0], 2, 0.0, 4, None),  # nor does a run that never scores
        ([0.0, 0.0, 0.2, 0.1, 0.1], 2, 0.0, 0, 4),  # patience counts from the first score above 0
        ([0.2, 0.1, 0.1, 0.1, 0.1], 2, 0.0, 4, 3),  # min_evaluations counts, then patience decides
        ([0.5, math.nan, math.nan], 2, 0.0, 0, 2),  # a non-finite value is never a new best
        ([0.5, 0.4, 0.3, 0.2], 0, 0.0, 0, None),  # patience 0: off
    ],
)
def test_stop_index(values, patience, min_delta, min_evaluations, expected) -> None:
    assert stop_index(values, patience, min_delta, min_evaluations) == expected


def test_the_state_counts_the_best_and_the_evaluations_since() -> None:
    state = EarlyStopState()
    assert state.observe("m", 0.2, 10, 0.0) and not state.observe("m", 0.1, 20, 0.0)
    assert (state.value, state.step, state.evaluations, state.since) == (0.2, 10, 2, 1)
    assert state.due(EarlyStopConfig(patience=1)) and not state.due(EarlyStopConfig(patience=2))
    assert not state.due(EarlyStopConfig(patience=1, min_evaluations=3))
    # Another ranking metric (the subset turned on at a resume) starts the count again.
    assert state.observe("subset/m", 0.05, 30, 0.0)
    assert (state.metric, state.value, state.step, state.evaluations, state.since) == (
        "subset/m",
        0.05,
        30,
        1,
        0,
    )


def test_the_state_round_trips_and_an_old_checkpoint_starts_empty() -> None:
    state = EarlyStopState("m", 0.5, 8, 4, 2)
    assert EarlyStopState.from_dict(state.as_dict()) == state
    assert EarlyStopState.from_dict({}) == EarlyStopState() == EarlyStopState.from_dict(None)
    assert EarlyStopState.from_dict({**state.as_dict(), "from_a_newer_version": 1}) == state
    # A checkpoint's progress from before early stopping: it loads, with an empty state.
    old = Progress(**{"step": 3, "iteration": 1, "pass_done": True, "finished": False})
    assert old.early_stop == {} and EarlyStopState.from_dict(old.early_stop) == EarlyStopState()


def test_the_record_says_where_and_why() -> None:
    state = EarlyStopState("subset/ARC/this_eval/pass@2", 0.25, 400, 7, 3)
    record = state.record(EarlyStopConfig(patience=3, min_delta=0.01), step=700, step_limit=1000)
    assert {k: record[k] for k in ("step", "step_limit", "evaluations", "best_step", "best_value")} == {
        "step": 700, "step_limit": 1000, "evaluations": 7, "best_step": 400, "best_value": 0.25,
    }  # fmt: skip
    assert "no new best of subset/ARC/this_eval/pass@2 (by more than 0.01) in the last 3" in record["reason"]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("early_stop.patience=-1", "early_stop.patience=-1 must be ≥ 0"),
        ("early_stop.min_evaluations=-2", "early_stop.min_evaluations=-2 must be ≥ 0"),
        ("early_stop.min_delta=-0.1", "early_stop.min_delta=-0.1 must be ≥ 0"),
        ("early_stop.min_delta=nan", "early_stop.min_delta=nan is not a finite number"),
        ("early_stop.patience=two", "bad configuration"),
    ],
)
def test_bad_values_are_one_error_naming_the_key(override: str, message: str) -> None:
    with pytest.raises(TRMError, match=message.replace("(", r"\(")):
        compose([*BASE, override])


def test_the_keys_are_run_only() -> None:
    plain = compose(BASE)
    stopping = compose(
        [*BASE, "early_stop.patience=5", "early_stop.min_delta=0.01", "early_stop.min_evaluations=3"]
    )
    assert (stopping.early_stop.patience, stopping.early_stop.min_delta, stopping.early_stop.min_evaluations) == (
        5, 0.01, 3,
    )  # fmt: skip
    assert config_hash(plain) == config_hash(stopping) and "early_stop" not in math_dict(stopping)
    assert all(is_run_only(f"early_stop.{k}") for k in ("patience", "min_delta", "min_evaluations"))
    assert plain.early_stop == EarlyStopConfig(patience=0, min_delta=0.0, min_evaluations=0)  # off by default
