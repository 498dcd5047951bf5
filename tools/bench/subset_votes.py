"""ARC votes per test example, and pass@K rescored on the examples a subset keeps (tools.bench.subset --task arc).

`ExampleVotes` is an evaluator for `trm.evaluation.runner.evaluate`: it hands every row to the ARC
evaluator (`trm.evaluation.arc.ARCEvaluator`, per-checkpoint voting) one row at a time, filed under the
row's example id instead of its batch index, so the evaluator's own vote log holds each example's vote
(task, original input key, predicted grid key, halting confidence) by example id. Its result is the
evaluator's result over every row, in the test set's order: the full evaluation.

`rescore` keeps the votes of the examples an `eval_subset` choice keeps and ranks them with the same
functions (`merge_in_order`, `pass_at_k`): in the test set's order, as the in-run subset evaluation
(`SubsetLoader`, ascending example ids) adds them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from trm.evaluation.arc import ARCEvaluator, Vote, VoteLog, build_evaluators, merge_in_order
from trm.evaluation.voting import pass_at_k

PASS_KS = (1, 2)


class ExampleVotes:
    """The ARC evaluator's votes by example id, and the example's puzzle identifier (see the module doc)."""

    required_outputs = ARCEvaluator.required_outputs

    def __init__(self, loader: Any) -> None:
        self.evaluator = build_evaluators([{"name": "arc", "aggregated_voting": False}], loader)[0]
        self.identifiers: dict[int, int] = {}
        self._next_example = 0

    def begin_eval(self) -> None:
        self.evaluator.begin_eval()
        self.identifiers.clear()
        self._next_example = 0

    def abort_eval(self) -> None:
        self.evaluator.abort_eval()

    def update_batch(self, outputs: dict[str, torch.Tensor], *, batch_index: int | None = None) -> None:
        """Rows come in the test set's example order (the runner's, one process): each is filed under
        its example id (`batch_index` is not needed)."""
        rows = outputs["preds"].shape[0]
        for row in range(rows):
            example = self._next_example + row
            one = {k: outputs[k][row : row + 1] for k in self.required_outputs}
            self.evaluator.update_batch(one, batch_index=example)
            self.identifiers[example] = int(one["puzzle_identifiers"][0])
        self._next_example += rows

    def result(self, save_path: Any, info: Any) -> dict[str, float] | None:
        return self.evaluator.result(save_path, info)

    def votes(self) -> list[tuple[int, int, str, str, str, float]]:
        """Every vote: (example id, puzzle identifier, task id, input key, predicted grid key, confidence)."""
        return [
            (example, self.identifiers[example], *vote)
            for example, votes in sorted(self.evaluator.vote_log.batches.items())
            for vote in votes
        ]


def by_example(votes: Iterable[Any]) -> dict[int, list[Vote]]:
    """Votes as `votes()` gives them (or read back from JSON), grouped by example id."""
    out: dict[int, list[Vote]] = {}
    for example, _identifier, task_id, input_key, pred_key, confidence in votes:
        out.setdefault(int(example), []).append((task_id, input_key, pred_key, float(confidence)))
    return out


def rescore(
    test_puzzles: dict[str, Any], votes: dict[int, list[Vote]], examples: np.ndarray | None = None
) -> dict[int, float]:
    """pass@K (K in PASS_KS) of the votes of `examples` (all when None), per-checkpoint voting."""
    kept = sorted(votes) if examples is None else [int(e) for e in examples if int(e) in votes]
    log = VoteLog(batches={e: votes[e] for e in kept})
    return pass_at_k(test_puzzles, merge_in_order([log]), PASS_KS)
