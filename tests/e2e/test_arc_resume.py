"""A resumed run pools the same ARC votes as an uninterrupted one (the evaluator's state is checkpointed)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.e2e.test_train import build_dataset, final_state, rows, train, train_here
from trm.training.checkpointing import layout as ckpt

# End to end: out of the default `make test`, run by `make test-e2e` (CI runs both).
pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("data") / "arc-tiny"
    build_dataset(out, max_puzzles=2)
    return out


def test_resume_keeps_the_pooled_votes_of_earlier_evaluations(dataset: Path, tmp_path: Path) -> None:
    # Three evaluations, a checkpoint after each; retention by recency only (no best-k).
    extra = ("epochs=3", "eval_interval=1", "checkpoint_keep_best=0")
    assert train_here(dataset, tmp_path / "straight", *extra) == 0
    steps = [c.step for c in ckpt.find_complete(tmp_path / "straight")]
    assert len(steps) == 2  # checkpoint_keep: the second and third evaluations'

    # Resume from the second evaluation's checkpoint, as if the run had been stopped right after it.
    split = tmp_path / "split"
    shutil.copytree(tmp_path / "straight", split)
    shutil.rmtree(split / f"step_{steps[-1]}")
    resumed = train(dataset, split, *extra)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from {split / f'step_{steps[0]}'}" in resumed.stderr

    pooled = final_state(tmp_path / "straight")["evaluators"]
    again = final_state(split)["evaluators"]
    assert len(again) == len(pooled) == 1
    assert again[0]["stats"] == pooled[0]["stats"]
    assert again[0]["grids"].keys() == pooled[0]["grids"].keys()
    assert all(np.array_equal(g, pooled[0]["grids"][k]) for k, g in again[0]["grids"].items())
    # Three evaluations pooled: every test input has the same votes in each (its variants' predictions).
    counts = {
        sum(int(stat[0]) for stat in by_pred.values())
        for by_input in pooled[0]["stats"].values()
        for by_pred in by_input.values()
    }
    assert counts and all(c > 0 and c % 3 == 0 for c in counts)
    assert rows(tmp_path / "straight") == rows(split)
    last = f"evaluator_ARC_step_{steps[-1]}/submission.json"
    assert json.loads((split / last).read_text()) == json.loads((tmp_path / "straight" / last).read_text())
