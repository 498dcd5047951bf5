"""The in-run evaluation subset: seeded and deterministic, ARC keeps every task's voting group, the loader
reads exactly the chosen rows, its metrics are named apart, and the Wilson interval is the textbook one."""

from __future__ import annotations

import numpy as np
import pytest

from trm.evaluation.subset import (
    AUGMENTATIONS,
    ROWS,
    SUBSET_PREFIX,
    SubsetLoader,
    choose,
    subset_metrics,
    wilson_interval,
)

# Two sets. "a": 3 groups (tasks) of 4, 1 and 10 puzzles (augmentations), with 1-2 examples (test inputs)
# each; "b": 20 groups of one single-example puzzle (a grid set).
SIZES_A = [1, 2, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 1, 2, 1]
LAYOUT = [
    ("a", np.array([0, 4, 5, 15]), np.concatenate([[0], np.cumsum(SIZES_A)])),
    ("b", np.arange(21), np.arange(21)),
]


def puzzle_of(puzzles: np.ndarray, examples: np.ndarray) -> np.ndarray:
    return np.searchsorted(puzzles, examples, side="right") - 1


def test_the_same_seed_gives_the_same_subset_and_another_seed_another() -> None:
    first = choose(LAYOUT, 0.3, seed=7, mode=ROWS)
    again = choose(LAYOUT, 0.3, seed=7, mode=ROWS)
    other = choose(LAYOUT, 0.3, seed=8, mode=ROWS)
    assert first.fingerprint() == again.fingerprint()
    for name in ("a", "b"):
        assert np.array_equal(first.examples[name], again.examples[name])
    assert first.fingerprint() != other.fingerprint()
    assert len(first.examples["b"]) == 6 and len(first.examples["a"]) == round(0.3 * 19)
    assert all(np.all(np.diff(ids) > 0) for ids in first.examples.values())  # ascending, no repeats


def test_fraction_one_keeps_everything() -> None:
    for mode in (ROWS, AUGMENTATIONS):
        whole = choose(LAYOUT, 1.0, seed=3, mode=mode)
        assert np.array_equal(whole.examples["a"], np.arange(19))
        assert np.array_equal(whole.examples["b"], np.arange(20))


def test_arc_keeps_a_share_of_each_tasks_augmentations_with_all_their_test_inputs() -> None:
    subset = choose(LAYOUT, 0.5, seed=1, mode=AUGMENTATIONS)
    _name, groups, puzzles = LAYOUT[0]
    ids = subset.examples["a"]
    kept = np.unique(puzzle_of(puzzles, ids))
    for p in kept:  # a kept augmentation keeps every test input: its votes are whole
        assert set(range(puzzles[p], puzzles[p + 1])) <= set(ids.tolist())
    per_group = np.bincount(np.searchsorted(groups, kept, side="right") - 1, minlength=3)
    assert per_group.tolist() == [2, 1, 5]  # half of 4, at least 1 of 1, half of 10
    # A tiny fraction still keeps one augmentation of every task: every task is still scored.
    tiny = choose(LAYOUT, 0.01, seed=1, mode=AUGMENTATIONS)
    tiny_kept = np.unique(puzzle_of(puzzles, tiny.examples["a"]))
    assert np.bincount(np.searchsorted(groups, tiny_kept, side="right") - 1).tolist() == [1, 1, 1]


def test_the_record_says_how_it_was_chosen() -> None:
    subset = choose(LAYOUT, 0.25, seed=2, mode=ROWS)
    record = subset.record({"a": 19, "b": 20})
    assert record["mode"] == ROWS and record["fraction"] == 0.25 and record["seed"] == 2
    assert record["examples"] == {"a": [5, 19], "b": [5, 20]}
    assert record["sha256"] == subset.fingerprint()


def test_the_puzzle_loader_yields_exactly_the_chosen_rows(tmp_path) -> None:
    from tests.helpers import SMOKE_BUILD
    from trm.data.build_arc import build_arc_dataset
    from trm.data.loader import PuzzleLoader

    build_arc_dataset(tmp_path / "ds", **{**SMOKE_BUILD, "num_aug": 3, "max_puzzles": 3})
    loader = PuzzleLoader([tmp_path / "ds"], "test", global_batch_size=4)
    everything = [b for _s, b, _n in loader.iter_test()]
    all_inputs = np.concatenate([b["inputs"].numpy() for b in everything])
    subset = choose(loader.test_layout(), 0.5, seed=0, mode=AUGMENTATIONS)
    ids = subset.examples[loader.set_names[0]]
    assert 0 < len(ids) < loader.test_layout()[0][2][-1]
    view = SubsetLoader(loader, subset)
    got = [(b, n) for _s, b, n in view.iter_test()]
    inputs = np.concatenate([b["inputs"].numpy() for b, _n in got])[: len(ids)]
    assert np.array_equal(inputs, all_inputs[ids])
    assert sum(n for _b, n in got) == len(ids)
    assert view.metadata is loader.metadata and view.identifiers == loader.identifiers


def test_subset_metrics_are_named_apart_with_their_wilson_interval() -> None:
    found = {"eval/all/exact_accuracy": 0.5, "eval/all/count": 10.0, "ARC/pass@2": 0.25, "ARC/count": 4.0}
    named = subset_metrics(found, "eval/all/exact_accuracy")
    assert set(named) == {f"{SUBSET_PREFIX}{k}" for k in found} | {
        "subset/eval/all/exact_accuracy/wilson_low",
        "subset/eval/all/exact_accuracy/wilson_high",
    }
    assert named["subset/eval/all/exact_accuracy/wilson_low"] == pytest.approx(0.2366, abs=1e-4)
    arc = subset_metrics(found, "ARC/pass@2")  # n is ARC/count (tasks), not the rows
    assert (arc["subset/ARC/pass@2/wilson_low"], arc["subset/ARC/pass@2/wilson_high"]) == pytest.approx(
        wilson_interval(1, 4)
    )


def test_wilson_interval_matches_the_textbook_values() -> None:
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)
