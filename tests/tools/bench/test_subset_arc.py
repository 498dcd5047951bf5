"""The subset bench's ARC mode: votes filed per example, pass@K rescored on a subset's examples, the
generated tasks the ARC builder reads, and the CLI's errors."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tools.bench import arc_synthetic
from tools.bench.subset import main
from tools.bench.subset_arc import VOTES, tables
from tools.bench.subset_votes import ExampleVotes, by_example, rescore
from trm.data.encoding import dihedral, encode_grid, identifier
from trm.distributed import DistInfo
from trm.evaluation.subset import AUGMENTATIONS, choose

GRID_IN, RIGHT, WRONG = [[1, 2], [3, 0]], [[2, 1], [0, 3]], [[5, 5], [5, 5]]
PUZZLES = {"t": {"train": [], "test": [{"input": GRID_IN, "output": RIGHT}]}}
PERM = np.array([0, 3, 1, 2, 9, 8, 7, 6, 5, 4], dtype=np.uint8)
# One task, one test input, 4 augmented puzzles (one example each): the original predicts the right
# grid, the 3 augmentations predict the same wrong grid (in their own frame).
VERSIONS = [(0, None, RIGHT), (1, PERM, WRONG), (5, PERM, WRONG), (6, np.arange(10, dtype=np.uint8), WRONG)]


def _rows() -> tuple[list[str], dict[str, torch.Tensor]]:
    ids, inputs, preds = ["<blank>"], [], []
    for tid, cmap, pred in VERSIONS:
        ids.append(identifier("t", tid, cmap))

        def forward(grid, tid=tid, cmap=cmap):
            g = dihedral(np.asarray(grid, dtype=np.uint8), tid)
            return g if cmap is None else cmap[g]

        inputs.append(encode_grid(forward(GRID_IN)))
        preds.append(encode_grid(forward(pred)))
    batch = {
        "inputs": torch.tensor(np.stack(inputs), dtype=torch.int32),
        "preds": torch.tensor(np.stack(preds), dtype=torch.int32),
        "puzzle_identifiers": torch.arange(1, len(VERSIONS) + 1, dtype=torch.int32),
        "q_halt_logits": torch.tensor([3.0, 0.0, 0.0, 0.0]),
    }
    return ids, batch


def _recorded() -> tuple[ExampleVotes, dict[str, float]]:
    ids, batch = _rows()
    loader = SimpleNamespace(
        identifiers=ids, test_puzzles=PUZZLES, metadata=SimpleNamespace(blank_identifier_id=0)
    )
    recorder = ExampleVotes(loader)
    recorder.begin_eval()
    # Two runner chunks with the same batch index: example ids continue across them.
    recorder.update_batch({k: v[:1] for k, v in batch.items()}, batch_index=0)
    recorder.update_batch({k: v[1:] for k, v in batch.items()}, batch_index=0)
    return recorder, recorder.result(None, DistInfo())


def test_votes_are_filed_per_example_and_rescoring_all_of_them_is_the_evaluators_score() -> None:
    recorder, metrics = _recorded()
    votes = recorder.votes()
    assert [(v[0], v[1], v[2]) for v in votes] == [(0, 1, "t"), (1, 2, "t"), (2, 3, "t"), (3, 4, "t")]
    assert len({v[3] for v in votes}) == 1  # every augmentation votes under the original input
    assert len({v[4] for v in votes[1:]}) == 1 and votes[0][4] != votes[1][4]  # mapped back: one wrong grid
    grouped = by_example(json.loads(json.dumps(votes)))  # as read back from the bench's votes.json
    full = rescore(PUZZLES, grouped)
    # The wrong grid has 3 votes, the right one 1: pass@1 0, pass@2 1; the evaluator's own metrics agree.
    assert full == {1: 0.0, 2: 1.0}
    assert (metrics["ARC/pass@1"], metrics["ARC/pass@2"]) == (full[1], full[2])


def test_a_subset_of_the_augmentations_changes_the_vote() -> None:
    recorder, _ = _recorded()
    votes = by_example(recorder.votes())
    assert rescore(PUZZLES, votes, np.array([0])) == {1: 1.0, 2: 1.0}  # the original alone is right
    assert rescore(PUZZLES, votes, np.array([0, 1])) == {1: 1.0, 2: 1.0}  # 1:1, the right grid is surer
    assert rescore(PUZZLES, votes, np.array([1, 3])) == {1: 0.0, 2: 0.0}  # only the wrong grid voted
    # The in-run choice at fraction 1 keeps every augmentation: the full score.
    layout = [("all", np.array([0, 4]), np.arange(5))]
    every = choose(layout, 1.0, 7, AUGMENTATIONS).examples["all"]
    assert every.tolist() == [0, 1, 2, 3] and rescore(PUZZLES, votes, every) == rescore(PUZZLES, votes)


def test_shift_moves_every_cell_one_step_and_brings_in_background() -> None:
    grid = np.arange(1, 7).reshape(2, 3)
    assert arc_synthetic.shifted(grid, 0).tolist() == [[0, 0, 0], [1, 2, 3]]
    assert arc_synthetic.shifted(grid, 1).tolist() == [[4, 5, 6], [0, 0, 0]]
    assert arc_synthetic.shifted(grid, 2).tolist() == [[0, 1, 2], [0, 4, 5]]
    assert arc_synthetic.shifted(grid, 3).tolist() == [[2, 3, 0], [5, 6, 0]]


def test_tables_compare_each_metric_and_name_the_near_best_steps() -> None:
    full = np.array([[0.1, 0.0], [0.5, 0.4], [0.9, 0.8]])  # 3 checkpoints x (pass@2, pass@1)
    scores = {(f, s): (full.copy(), 12) for f in (0.05, 0.1, 0.2, 0.3, 0.5) for s in range(20)}
    result = tables([100, 200, 300], full, scores)
    assert result["near_best_steps"] == {"pass@2": [300], "pass@1": [300]}
    row = result["comparison"]["pass@2"]["0.1"]
    assert row["examples"] == 12 and row["same_best"] == 1.0 and row["spearman_min"] == pytest.approx(1.0)
    # One near-best checkpoint: nothing to rank, no correlation (null in the JSON), the best is found.
    near = result["comparison_near_best"]["pass@1"]["0.1"]
    assert near["spearman_mean"] is None and near["same_best"] == 1.0


def _one_colour_change(grids: list) -> bool:
    changed = [(int(g[g != o][0]), int(o[g != o][0])) for g, o in grids if (g != o).any()]
    return bool(changed) and len(set(changed)) == 1 and all(len(set(g[g != o])) <= 1 for g, o in grids)


# Each family's rule, checked on a task's pairs (its parameters are the same in every pair).
RULE_HOLDS = {
    "fill": lambda gs: (
        len({int(o[g == 0][0]) for g, o in gs if (g == 0).any()}) == 1
        and all((o[g != 0] == g[g != 0]).all() and (o != 0).all() for g, o in gs)
    ),
    "recolour": _one_colour_change,
    "keep": lambda gs: (
        len({int(c) for _g, o in gs for c in np.unique(o) if c}) == 1
        and all(((o == g) | (o == 0)).all() for g, o in gs)
    ),
    "shift": lambda gs: any(all((o == arc_synthetic.shifted(g, d)).all() for g, o in gs) for d in range(4)),
    "rot180": lambda gs: all((o == np.rot90(g, 2)).all() for g, o in gs),
}


@pytest.mark.parametrize("family", arc_synthetic.FAMILIES)
def test_generated_tasks_follow_their_rule_and_the_arc_builder_reads_them(tmp_path, family) -> None:
    prefix = tmp_path / "src" / "synthetic"
    made = arc_synthetic.write_subsets(prefix, {"train": 2, "eval": 1}, seed=3, families=[family])
    assert made == {"train": {family: 2}, "eval": {family: 1}}
    tasks = json.loads((tmp_path / "src" / "synthetic_eval_challenges.json").read_text())
    solutions = json.loads((tmp_path / "src" / "synthetic_eval_solutions.json").read_text())
    (task_id, task), outputs = next(iter(tasks.items())), next(iter(solutions.values()))
    assert task_id == f"eval-000-{family}" and 2 <= len(task["train"]) <= 4 and 1 <= len(outputs) <= 2
    pairs = [(p["input"], p["output"]) for p in task["train"]] + [
        (t["input"], o) for t, o in zip(task["test"], outputs, strict=True)
    ]
    grids = [(np.array(g), np.array(o)) for g, o in pairs]
    assert all(g.shape == o.shape and min(g.shape) >= 3 and max(g.shape) <= 6 for g, o in grids)
    assert RULE_HOLDS[family](grids)
    from trm.data.build_arc import build_arc_dataset

    manifest = build_arc_dataset(
        tmp_path / "data",
        input_file_prefix=prefix,
        subsets=["train", "eval"],
        test_set_name="eval",
        num_aug=2,
    )
    assert manifest["counts"]["test"]["groups"] == 1 and manifest["counts"]["train"]["groups"] == 3


def test_bad_flags_and_a_work_dir_of_another_setup_are_one_clear_error(tmp_path, capsys) -> None:
    assert main(["--task", "arc", "--steps", "0"]) == 2
    assert "--steps" in capsys.readouterr().err
    (tmp_path / VOTES).write_text(json.dumps({"setup": {"steps": 1}}))
    assert main(["--task", "arc", "--work", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"--work {tmp_path}" in err and "another setup" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.e2e
def test_a_tiny_run_writes_the_figures_and_a_second_call_reuses_its_votes(tmp_path) -> None:
    flags = ["--task", "arc", "--steps", "4", "--every", "2", "--tasks", "3", "--train-tasks", "2"]
    flags += ["--num-aug", "2", "--hidden", "16", "--batch", "8", "--work", str(tmp_path / "work")]
    assert main([*flags, "--out", str(tmp_path / "a")]) == 0
    record = json.loads((tmp_path / "a" / "subset-ranking-arc.json").read_text())
    assert (
        record["steps"] == [2, 4]
        and record["measured"]
        and (tmp_path / "a" / "subset-ranking-arc.png").is_file()
    )
    assert "--work" not in record["command"] and record["command"].startswith(
        "nox -s bench -- subset --task arc"
    )
    assert (
        set(record["comparison"]) == {"pass@2", "pass@1"}
        and record["setup"]["dataset"]["test"]["groups"] == 3
    )
    assert record["puzzles_kept_per_task"]["0.5"] == [2, 2]  # 3 puzzles per task (num_aug 2): round(1.5) = 2
    votes = (tmp_path / "work" / VOTES).stat().st_mtime_ns
    assert main([*flags, "--out", str(tmp_path / "b")]) == 0  # reuses the votes: no second training
    assert (tmp_path / "work" / VOTES).stat().st_mtime_ns == votes
    again = json.loads((tmp_path / "b" / "subset-ranking-arc.json").read_text())
    assert again["full_pass@2"] == record["full_pass@2"] and again["comparison"] == record["comparison"]
