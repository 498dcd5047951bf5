"""ARC voting, pass@K and submission on hand-made predictions; the evaluator undoes augmentations."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from trm.data.encoding import dihedral, encode_grid, identifier
from trm.distributed import DistInfo
from trm.errors import TRMError
from trm.evaluation.arc import ARCEvaluator, build_evaluators
from trm.evaluation.voting import (
    FALLBACK_GRID,
    VoteTable,
    build_submission,
    pass_at_k,
    rank_votes,
    validate_submission,
)

A_IN, A_OUT = [[1, 2], [3, 4]], [[4, 3], [2, 1]]
B_IN1, B_OUT1 = [[5]], [[6]]
B_IN2, B_OUT2 = [[7, 7]], [[8, 8]]
PUZZLES = {
    "a": {"train": [], "test": [{"input": A_IN, "output": A_OUT}]},
    "b": {"train": [], "test": [{"input": B_IN1, "output": B_OUT1}, {"input": B_IN2, "output": B_OUT2}]},
    "c": {"train": [], "test": [{"input": [[0]], "output": [[1]]}]},
}


def test_rank_by_count_then_mean_confidence() -> None:
    ranked = rank_votes([("x", 0.1), ("y", 0.9), ("x", 0.2), ("z", 0.95), ("y", 0.5)])
    assert [(c.key, c.count) for c in ranked] == [("y", 2), ("x", 2), ("z", 1)]
    assert ranked[0].mean_confidence == pytest.approx(0.7)


def test_full_ties_keep_the_candidate_seen_first() -> None:
    # Same count and mean confidence: the earlier first vote wins (upstream's stable sort), not the key.
    for order in (["zz", "aa", "mm"], ["mm", "zz", "aa"], ["aa", "mm", "zz"]):
        votes = [(k, 0.25) for k in order] + [(k, 0.75) for k in order]
        assert [c.key for c in rank_votes(votes)] == order


def make_table() -> VoteTable:
    t = VoteTable()
    # Task a: the right answer has 2 votes but a wrong one has 3 -> right at rank 2.
    for _ in range(3):
        t.add("a", A_IN, [[0, 0], [0, 0]], 0.9)
    t.add("a", A_IN, A_OUT, 0.1)
    t.add("a", A_IN, A_OUT, 0.2)
    # Task b, pair 1: right at rank 1. Pair 2: no prediction at all. Task c: nothing.
    t.add("b", B_IN1, B_OUT1, 0.5)
    t.add("b", B_IN1, [[9]], 0.99)
    t.add("b", B_IN1, B_OUT1, 0.5)
    return t


def test_pass_at_k_on_known_predictions() -> None:
    scores = pass_at_k(PUZZLES, make_table(), (1, 2, 5))
    # pass@1: a 0, b 1/2, c 0 -> 1/6; pass@2 and beyond: a 1, b 1/2, c 0 -> 1/2.
    assert scores == {1: pytest.approx(1 / 6), 2: pytest.approx(0.5), 5: pytest.approx(0.5)}


def test_submission_has_an_entry_for_every_test_input_in_order() -> None:
    sub = build_submission(PUZZLES, make_table())
    validate_submission(sub, PUZZLES)
    assert sub["a"] == [{"attempt_1": [[0, 0], [0, 0]], "attempt_2": A_OUT}]
    # The pair without predictions keeps its slot (upstream dropped it and shifted later pairs).
    assert sub["b"] == [
        {"attempt_1": B_OUT1, "attempt_2": [[9]]},
        {"attempt_1": FALLBACK_GRID, "attempt_2": FALLBACK_GRID},
    ]
    assert sub["c"] == [{"attempt_1": FALLBACK_GRID, "attempt_2": FALLBACK_GRID}]


def test_single_candidate_is_repeated_and_empty_crops_fall_back() -> None:
    t = VoteTable()
    t.add("a", A_IN, A_OUT, 0.3)
    t.add("c", [[0]], np.zeros((0, 0), dtype=np.uint8), 0.3)
    sub = build_submission(PUZZLES, t)
    assert sub["a"] == [{"attempt_1": A_OUT, "attempt_2": A_OUT}]
    assert sub["c"] == [{"attempt_1": FALLBACK_GRID, "attempt_2": FALLBACK_GRID}]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda s: s.pop("b"), "lacks 1 task"),
        (lambda s: s["b"].pop(), "one entry per test input"),
        (lambda s: s["a"][0].pop("attempt_2"), "keys must be"),
        (lambda s: s["a"][0].update(attempt_1=[[1, 2], [3]]), "rectangular"),
        (lambda s: s["a"][0].update(attempt_1=[[10]]), "rectangular grid of 0..9"),
        (lambda s: s["a"][0].update(attempt_1=[]), "rectangular"),
    ],
)
def test_submission_schema_violations_are_caught(mutate, message: str) -> None:
    sub = build_submission(PUZZLES, make_table())
    mutate(sub)
    with pytest.raises(TRMError, match=message):
        validate_submission(sub, PUZZLES)


def augmented_rows(task: str, grid_in, grid_out, tid: int, cmap: np.ndarray | None, ids: list[str]):
    """Token rows as the model sees them for one augmented version (input, prediction = right answer)."""
    name = identifier(task, tid, cmap)
    ids.append(name)

    def forward(g):
        g = dihedral(np.asarray(g, dtype=np.uint8), tid)
        return g if cmap is None else cmap[g]

    return encode_grid(forward(grid_in)), encode_grid(forward(grid_out)), len(ids) - 1


def evaluator_batch(ids: list[str]) -> dict[str, torch.Tensor]:
    perm = np.array([0, 3, 1, 2, 9, 8, 7, 6, 5, 4], dtype=np.uint8)
    rows = [
        augmented_rows("a", A_IN, A_OUT, 0, None, ids),
        augmented_rows("a", A_IN, A_OUT, 3, perm, ids),
        augmented_rows("b", B_IN1, B_OUT1, 6, perm, ids),
        augmented_rows("b", B_IN2, [[1, 1]], 1, np.arange(10, dtype=np.uint8), ids),  # wrong answer, pair 2
    ]
    inputs = torch.tensor(np.stack([r[0] for r in rows] + [np.zeros(900, np.uint8)]), dtype=torch.int32)
    preds = torch.tensor(np.stack([r[1] for r in rows] + [np.zeros(900, np.uint8)]), dtype=torch.int32)
    return {
        "inputs": inputs,
        "preds": preds,
        "puzzle_identifiers": torch.tensor([r[2] for r in rows] + [0], dtype=torch.int32),  # last: blank
        "q_halt_logits": torch.tensor([2.0, 1.0, 0.0, -1.0, 5.0]),
    }


def test_evaluator_undoes_augmentations_and_survives_inference_mode_tensors(tmp_path) -> None:
    ids = ["<blank>"]
    batch = evaluator_batch(ids)
    with torch.inference_mode():
        inference_batch = {k: v.clone() for k, v in batch.items()}
    ev = ARCEvaluator(ids, PUZZLES, blank_identifier_id=0)
    ev.begin_eval()
    ev.update_batch(inference_batch)
    metrics = ev.result(tmp_path, DistInfo())
    assert metrics["ARC/pass@1"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert metrics["ARC/count"] == 3  # the tasks pass@K averages over: reports' confidence intervals
    sub = json.loads((tmp_path / "submission.json").read_text())
    assert sub["a"][0]["attempt_1"] == A_OUT
    assert sub["b"][1]["attempt_1"] == [[1, 1]]
    # Upstream's default pools the votes of every evaluation; this_eval scores only the current one.
    ev.begin_eval()
    pooled = ev.result(None, DistInfo())
    assert pooled["ARC/pass@1"] == pytest.approx(0.5)
    assert pooled["ARC/this_eval/pass@1"] == 0.0
    per_eval = ARCEvaluator(ids, PUZZLES, blank_identifier_id=0, aggregated_voting=False)
    per_eval.update_batch(batch)
    per_eval.begin_eval()
    metrics = per_eval.result(None, DistInfo())
    assert metrics["ARC/pass@1"] == metrics["ARC/this_eval/pass@1"] == 0.0


def test_a_stopped_evaluation_pools_nothing_and_the_rerun_pools_as_if_it_never_ran(tmp_path) -> None:
    ids = ["<blank>"]
    batch = evaluator_batch(ids)
    never, stopped = (ARCEvaluator(ids, PUZZLES, blank_identifier_id=0) for _ in range(2))
    for ev in (never, stopped):
        ev.begin_eval()
        ev.update_batch(batch)
        ev.result(None, DistInfo())
    before = stopped.state_dict()
    # A stop request mid-evaluation: part of the batches seen, then abort_eval() (the runner's call).
    stopped.begin_eval()
    stopped.update_batch({k: v[:2] for k, v in batch.items()})
    stopped.abort_eval()
    assert stopped.state_dict()["stats"] == before["stats"]
    # The resumed run's evaluation starts again (begin_eval must not fold the dropped votes in).
    for ev in (never, stopped):
        ev.begin_eval()
        ev.update_batch(batch)
    assert stopped.result(tmp_path, DistInfo()) == never.result(None, DistInfo())
    assert stopped.state_dict()["stats"] == never.state_dict()["stats"]


def _row(task: str, grid_in, pred, ids: list[str]) -> tuple[np.ndarray, np.ndarray, int]:
    """An unaugmented row: the test input and a predicted grid (None: an empty prediction)."""
    ids.append(task)
    out = np.zeros(900, np.uint8) if pred is None else encode_grid(np.asarray(pred, dtype=np.uint8))
    return encode_grid(np.asarray(grid_in, dtype=np.uint8)), out, len(ids) - 1


def _batch(rows, logits) -> dict[str, torch.Tensor]:
    return {
        "inputs": torch.tensor(np.stack([r[0] for r in rows]), dtype=torch.int32),
        "preds": torch.tensor(np.stack([r[1] for r in rows]), dtype=torch.int64),
        "puzzle_identifiers": torch.tensor([r[2] for r in rows], dtype=torch.int32),
        "q_halt_logits": torch.tensor(logits, dtype=torch.float32),
    }


def test_confidence_is_the_float64_sigmoid_of_the_float32_logit(tmp_path) -> None:
    # Logits 20 and 30 both give exactly 1.0 in float32; in float64 (upstream) 30 ranks first.
    wrong = [[0, 0], [0, 0]]
    ids = ["<blank>"]
    rows = [_row("a", A_IN, wrong, ids), _row("a", A_IN, A_OUT, ids)]
    ev = ARCEvaluator(ids, {"a": PUZZLES["a"]}, blank_identifier_id=0)
    ev.begin_eval()
    ev.update_batch(_batch(rows, [20.0, 30.0]))
    (votes,) = ev.table.votes["a"].values()
    expected = torch.tensor([20.0, 30.0], dtype=torch.float32).double().sigmoid().tolist()
    assert [conf for _, conf in votes] == expected
    assert expected[0] < expected[1] < 1.0
    metrics = ev.result(tmp_path, DistInfo())
    assert metrics["ARC/pass@1"] == 1.0
    assert json.loads((tmp_path / "submission.json").read_text()) == {
        "a": [{"attempt_1": A_OUT, "attempt_2": wrong}]
    }


def test_submission_is_upstreams_by_default_and_kaggle_complete_as_an_option(tmp_path) -> None:
    ids = ["<blank>"]
    # Task a: only an empty crop. Task b: pair 1 has no prediction, pair 2 does. Task c: nothing.
    rows = [_row("a", A_IN, None, ids), _row("b", B_IN2, B_OUT2, ids)]
    upstream = ARCEvaluator(ids, PUZZLES, blank_identifier_id=0)
    kaggle = ARCEvaluator(ids, PUZZLES, blank_identifier_id=0, submission_fallback=True)
    for ev, folder in ((upstream, tmp_path / "up"), (kaggle, tmp_path / "kaggle")):
        ev.begin_eval()
        ev.update_batch(_batch(rows, [0.0, 0.0]))
        assert ev.result(folder, DistInfo())["ARC/pass@1"] == pytest.approx(0.5 / 3)
    # Upstream's file: the pair without a prediction is left out (pair 2 moves up), empty crops stay [],
    # json.dumps defaults and no trailing newline.
    text = (tmp_path / "up" / "submission.json").read_text()
    expected = {
        "a": [{"attempt_1": [], "attempt_2": []}],
        "b": [{"attempt_1": B_OUT2, "attempt_2": B_OUT2}],
        "c": [],
    }
    assert text == json.dumps(expected)
    fallback = json.loads((tmp_path / "kaggle" / "submission.json").read_text())
    validate_submission(fallback, PUZZLES)
    assert fallback["a"] == [{"attempt_1": FALLBACK_GRID, "attempt_2": FALLBACK_GRID}]
    assert fallback["b"] == [
        {"attempt_1": FALLBACK_GRID, "attempt_2": FALLBACK_GRID},
        {"attempt_1": B_OUT2, "attempt_2": B_OUT2},
    ]


def test_hidden_test_set_tasks_count_in_the_denominator_as_upstream() -> None:
    # A hidden subset's test pairs carry the dummy output [[0]] (both builders write it); upstream
    # divides by every task of test_puzzles.json, and a [[0]] prediction matches the dummy.
    puzzles = {
        "seen": {"train": [], "test": [{"input": A_IN, "output": A_OUT}]},
        "hidden1": {"train": [], "test": [{"input": [[3]], "output": [[0]]}]},
        "hidden2": {
            "train": [],
            "test": [{"input": [[4]], "output": [[0]]}, {"input": [[5]], "output": [[0]]}],
        },
        "hidden3": {"train": [], "test": [{"input": [[6]], "output": [[0]]}]},
    }
    table = VoteTable()
    table.add("seen", A_IN, A_OUT, 0.5)
    table.add("hidden1", [[3]], [[7]], 0.5)
    table.add("hidden2", [[4]], [[0]], 0.5)
    assert pass_at_k(puzzles, table, (1,)) == {1: pytest.approx((1 + 0 + 0.5 + 0) / 4)}
    # Kaggle's challenges (no outputs at all) cannot be scored: such tasks are left out.
    kaggle = {**puzzles, "unsolved": {"test": [{"input": [[8]]}]}}
    assert pass_at_k(kaggle, table, (1,)) == pass_at_k(puzzles, table, (1,))


def _tie_batches(ids: list[str]) -> list[dict[str, torch.Tensor]]:
    """Two global batches of 4 rows; candidates X (batch 0, row 2) and Y (batch 1, row 1) tie exactly.

    With 2 ranks X is on rank 1 and Y on rank 0, so merging rank by rank (upstream) would put Y first.
    """
    x, y, blank = [[1, 1]], [[2, 2]], (np.zeros(900, np.uint8), np.zeros(900, np.uint8), 0)
    b0 = [_row("b", B_IN1, B_OUT1, ids), blank, _row("a", A_IN, x, ids), _row("b", B_IN2, B_OUT2, ids)]
    b1 = [_row("b", B_IN1, B_OUT1, ids), _row("a", A_IN, y, ids), blank, blank]
    return [_batch(b0, [1.0] * 4), _batch(b1, [1.0] * 4)]


def _feed(ev: ARCEvaluator, batches, rank: int, world: int, chunk: int = 1) -> None:
    size = 4 // world
    ev.begin_eval()
    for index, batch in enumerate(batches):
        local = {k: v[rank * size : (rank + 1) * size] for k, v in batch.items()}
        for start in range(0, size, chunk):
            ev.update_batch({k: v[start : start + chunk] for k, v in local.items()}, batch_index=index)


def test_tie_order_is_the_test_sets_order_for_any_world_size(tmp_path) -> None:
    ids = ["<blank>"]
    batches = _tie_batches(ids)
    single = ARCEvaluator(ids, PUZZLES, blank_identifier_id=0)
    _feed(single, batches, 0, 1, chunk=3)
    expected = single.result(tmp_path / "one", DistInfo())
    ranks = [ARCEvaluator(ids, PUZZLES, blank_identifier_id=0) for _ in range(2)]
    for rank, ev in enumerate(ranks):
        _feed(ev, batches, rank, 2)
    assert ranks[0].result_from([ev.vote_log for ev in ranks], tmp_path / "two") == expected
    one, two = ((tmp_path / d / "submission.json").read_text() for d in ("one", "two"))
    assert one == two
    assert json.loads(one)["a"] == [{"attempt_1": [[1, 1]], "attempt_2": [[2, 2]]}]


def test_aggregated_voting_pools_rounds_and_this_eval_scores_the_current_one() -> None:
    ids = ["<blank>"]
    right = _batch([_row("a", A_IN, A_OUT, ids)], [0.0])
    wrong = _batch([_row("a", A_IN, [[9]], ids), _row("a", A_IN, [[9]], ids)], [0.0, 0.0])
    ev = ARCEvaluator(ids, {"a": PUZZLES["a"]}, blank_identifier_id=0)  # upstream's default: pooled
    ev.begin_eval()
    ev.update_batch(right)
    first = ev.result(None, DistInfo())
    assert first["ARC/pass@1"] == first["ARC/this_eval/pass@1"] == 1.0
    ev.begin_eval()
    ev.update_batch(right)
    ev.update_batch(wrong)
    second = ev.result(None, DistInfo())
    # Pooled: the answer has 2 votes (rounds 1 and 2), [[9]] has 2 and came later -> the answer first.
    assert second["ARC/pass@1"] == 1.0
    # This evaluation alone: [[9]] has 2 votes against 1.
    assert second["ARC/this_eval/pass@1"] == 0.0
    assert second["ARC/this_eval/pass@2"] == 1.0


def test_evaluator_state_from_another_version_is_a_clear_error() -> None:
    ev = ARCEvaluator(["<blank>"], PUZZLES, blank_identifier_id=0)
    with pytest.raises(TRMError, match="another trm version"):
        ev.load_state_dict({"version": 0, "stats": {}, "grids": {}})


def test_unknown_evaluator_options_are_a_clear_error() -> None:
    loader = SimpleNamespace(
        identifiers=["<blank>"], test_puzzles=PUZZLES, metadata=SimpleNamespace(blank_identifier_id=0)
    )
    (ev,) = build_evaluators([{"name": "arc@ARC", "pass_Ks": [1, 2]}], loader)
    assert ev.aggregated_voting is True and ev.pass_Ks == (1, 2)
    with pytest.raises(TRMError, match=r"unknown option.*aggregate_voting"):
        build_evaluators([{"name": "arc@ARC", "aggregate_voting": False}], loader)


def _gather_worker(rank: int, init_file: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        ids = ["<blank>"]
        batches = _tie_batches(ids)
        ev = ARCEvaluator(ids, PUZZLES, blank_identifier_id=0)
        with torch.no_grad():
            _feed(ev, batches, rank, 2)
        info = DistInfo(rank=rank, world_size=2, object_group=dist.group.WORLD)
        result = ev.result(Path(out) if rank == 0 else None, info)
        if rank == 0:
            torch.save(result, Path(out) / "metrics.pt")
        else:
            assert result is None
    finally:
        dist.destroy_process_group()


@pytest.mark.dist
def test_two_ranks_gather_votes_to_rank_zero_in_the_test_sets_order(tmp_path) -> None:
    out = tmp_path / "two"
    out.mkdir()
    mp.spawn(_gather_worker, args=(str(tmp_path / "init"), str(out)), nprocs=2, join=True)
    ids = ["<blank>"]
    single = ARCEvaluator(ids, PUZZLES, blank_identifier_id=0)
    _feed(single, _tie_batches(ids), 0, 1)
    assert torch.load(out / "metrics.pt") == single.result(tmp_path, DistInfo())
    assert (out / "submission.json").read_text() == (tmp_path / "submission.json").read_text()
