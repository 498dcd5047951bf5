"""ARC voting, pass@K and submission on hand-made predictions; the evaluator undoes augmentations."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from trm.data.encoding import dihedral, encode_grid, identifier
from trm.errors import TRMError
from trm.evaluation.arc import ARCEvaluator
from trm.evaluation.voting import (
    FALLBACK_GRID,
    VoteTable,
    build_submission,
    pass_at_k,
    rank_votes,
    validate_submission,
)
from trm.training.distributed import DistInfo

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
    import json

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


def _gather_worker(rank: int, init_file: str, ids: list[str], out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        batch = evaluator_batch(list(ids[:1]))
        half = {
            k: v[rank * 2 : rank * 2 + 3 - rank] for k, v in batch.items()
        }  # rank 0: rows 0-2, rank 1: 2-3
        ev = ARCEvaluator(ids, PUZZLES, blank_identifier_id=0)
        ev.begin_eval()
        with torch.no_grad():
            ev.update_batch(half)
        info = DistInfo(rank=rank, world_size=2, object_group=dist.group.WORLD)
        result = ev.result(None, info)
        if rank == 0:
            torch.save(result, out)
        else:
            assert result is None
    finally:
        dist.destroy_process_group()


@pytest.mark.dist
def test_two_ranks_gather_votes_to_rank_zero(tmp_path) -> None:
    ids = ["<blank>"]
    evaluator_batch(ids)
    out = tmp_path / "result.pt"
    mp.spawn(_gather_worker, args=(str(tmp_path / "init"), ids, str(out)), nprocs=2, join=True)
    result = torch.load(out)
    # Row 2 (task b pair 1) is seen by both ranks: two votes, same answer; the metrics match one process.
    assert result["ARC/pass@1"] == pytest.approx((1 + 0.5 + 0) / 3)
