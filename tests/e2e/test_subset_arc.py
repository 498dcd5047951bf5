"""An ARC run evaluating a subset: its own votes (never pooled with the full evaluations'), its outputs in
subset/, a resume that pools the same subset votes, and the best chosen on the full set at the end."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.e2e.test_train import build_dataset, final_state, rows, train, train_here
from trm.training.checkpointing import layout as ckpt

pytestmark = pytest.mark.e2e

SUBSET = (
    "epochs=3", "eval_interval=1", "checkpoint.keep=0", "eval_subset.fraction=0.5", "eval_subset.full_every=2",
    "best.top_k=2",
)  # fmt: skip


def votes(state: dict) -> int:
    return sum(
        int(s[0])
        for by_input in state["stats"].values()
        for by_pred in by_input.values()
        for s in by_pred.values()
    )


def test_arc_subset_votes_apart_and_resume_keeps_them(tmp_path: Path) -> None:
    dataset = tmp_path / "arc-tiny"
    build_dataset(dataset, max_puzzles=2)  # 1 augmentation: 2 puzzles per task, the subset keeps 1
    assert train_here(dataset, tmp_path / "straight", *SUBSET) == 0
    state = final_state(tmp_path / "straight")
    (full,), (subset,) = state["evaluators"], state["subset_evaluators"]
    # 3 subset evaluations of 1 augmentation per test input vs 1 full evaluation (the 2nd) of 2.
    assert votes(subset) == 3 * votes(full) // 2 and votes(full) > 0
    assert len(list((tmp_path / "straight" / "subset").glob("evaluator_ARC_step_*/submission.json"))) == 3
    names = {k for r in rows(tmp_path / "straight") for k in r}
    assert "subset/ARC/this_eval/pass@2/wilson_high" in names and "ARC/pass@2" in names
    record = json.loads((tmp_path / "straight" / "run.json").read_text())
    assert record["eval_subset"]["mode"] == "augmentations" and record["best"]["evaluation"] == "full"

    split = tmp_path / "split"  # resume from the first evaluation's checkpoint
    shutil.copytree(tmp_path / "straight", split)
    for later in ckpt.find_complete(split)[1:]:
        shutil.rmtree(later.path)
    (split / "best.json").unlink()
    resumed = train(dataset, split, *SUBSET)
    assert resumed.returncode == 0, resumed.stderr
    again = final_state(split)["subset_evaluators"][0]
    assert again["stats"] == subset["stats"]
    assert all(np.array_equal(g, subset["grids"][k]) for k, g in again["grids"].items())
    assert rows(tmp_path / "straight") == rows(split)
    best = [json.loads((d / "best.json").read_text()) for d in (tmp_path / "straight", split)]
    assert best[0]["step"] == best[1]["step"] and best[0]["value"] == best[1]["value"]
