"""The ARC evaluator (upstream: evaluators/arc.py): undo augmentations, vote, pass@K, submission.json.

Under upstream's metric names it gives upstream's numbers for the same predictions:

- confidence: each row's `q_halt_logits` converted to float64, then the sigmoid (on the tensor's own
  device, as upstream does), then the mean per candidate;
- ranking: vote count, then mean confidence; on a full tie the candidate seen first wins;
- votes are pooled over every evaluation of the run (`aggregated_voting=True`, upstream's default);
- `submission.json` is upstream's, byte for byte (pairs without a prediction are left out, empty crops
  are `[]`) unless `submission_fallback=True`.

"Seen first" needs an order that does not depend on how the test set was split over ranks. Every vote
carries its position: (global test-batch index, row within this rank's part of the batch). Rank 0
gathers every rank's votes of the evaluation and replays them ordered by (batch, rank, row), after the
votes of earlier evaluations. Each rank holds a contiguous slice of every global batch, in rank order, so
this is the test set's example order, the order one process sees: the result is the same for any world
size (and any batch size), and equals upstream's single-process result.

Earlier evaluations' votes are kept as a `Tally` (count and confidence sum per distinct grid) on rank 0,
which ranks exactly as the full list of votes would; it is part of the trainer's checkpoint
(`state_dict`), so a resumed run pools the same votes as an uninterrupted one.

Beside `ARC/pass@K`, `ARC/this_eval/pass@K` scores only the current evaluation's votes, i.e. the
checkpoint being evaluated on its own (the two are equal with `aggregated_voting=False`).
`ARC/count` is the number of tasks pass@K averages over (for confidence intervals in reports).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trm.distributed import DistInfo, gather_objects
from trm.errors import TRMError
from trm.evaluation.voting import (
    PASS_KS,
    Tally,
    VoteTable,
    build_submission,
    grid_key,
    pass_at_k,
    record_predictions,
    scored_tasks,
    validate_submission,
)
from trm.io import atomic_write_text

log = logging.getLogger(__name__)

SUBMISSION = "submission.json"
THIS_EVAL = "ARC/this_eval"
COUNT = "ARC/count"  # the number of tasks pass@K is averaged over

# (task id, key of the original test input, key of the predicted grid, confidence)
Vote = tuple[str, str, str, float]


@dataclass
class VoteLog:
    """One rank's votes of one evaluation, grouped by global test-batch index, in arrival order.

    A `record_predictions` sink: `add` files the vote under the current batch (set by `at`).
    """

    batches: dict[int, list[Vote]] = field(default_factory=dict)
    grids: dict[str, list[list[int]]] = field(default_factory=dict)
    batch_index: int = 0

    def at(self, batch_index: int) -> None:
        """File the next votes under this global test-batch index."""
        self.batch_index = batch_index

    def add(self, task_id: str, input_grid: Any, pred_grid: Any, confidence: float) -> None:
        """Record one prediction (already mapped back to the original orientation and colours)."""
        pred_key = grid_key(pred_grid)
        if pred_key not in self.grids:
            self.grids[pred_key] = np.asarray(pred_grid, dtype=np.int64).tolist()
        vote = (task_id, grid_key(input_grid), pred_key, float(confidence))
        self.batches.setdefault(self.batch_index, []).append(vote)

    def clear(self) -> None:
        """Forget every vote."""
        self.batches.clear()
        self.grids.clear()


def merge_in_order(logs: list[VoteLog]) -> VoteTable:
    """One table from every rank's log (index = rank), votes ordered by (batch, rank, row)."""
    table = VoteTable()
    for log_ in logs:
        table.grids.update(log_.grids)
    for index in sorted({index for log_ in logs for index in log_.batches}):
        for log_ in logs:
            for task_id, input_key, pred_key, conf in log_.batches.get(index, ()):
                table.add_vote(task_id, input_key, pred_key, conf)
    return table


STATE_VERSION = 1


class ARCEvaluator:
    """Collects predictions over evaluations and turns them into `ARC/pass@K` and a submission."""

    required_outputs = ("inputs", "puzzle_identifiers", "q_halt_logits", "preds")

    def __init__(
        self,
        identifiers: list[str],
        test_puzzles: dict[str, Any],
        blank_identifier_id: int,
        *,
        submission_K: int = 2,
        pass_Ks: tuple[int, ...] = PASS_KS,
        aggregated_voting: bool = True,
        submission_fallback: bool = False,
    ) -> None:
        if submission_K < 1:
            raise TRMError(f"ARC evaluator: submission_K={submission_K} must be at least 1.")
        if not pass_Ks or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in pass_Ks):
            raise TRMError(f"ARC evaluator: pass_Ks={list(pass_Ks)} must be positive integers.")
        self.identifiers = identifiers
        self.test_puzzles = test_puzzles
        self.blank_identifier_id = blank_identifier_id
        self.submission_K = submission_K
        self.pass_Ks = tuple(pass_Ks)
        self.aggregated_voting = aggregated_voting
        self.submission_fallback = submission_fallback
        self.vote_log = VoteLog()  # this evaluation's votes on this rank
        self.pooled = Tally()  # rank 0: the votes of earlier evaluations (aggregated_voting)
        self._folded = False  # whether this evaluation's votes are in `pooled` yet
        self._next_batch = 0

    @property
    def table(self) -> VoteTable:
        """This rank's votes of the current evaluation, in arrival order."""
        return merge_in_order([self.vote_log])

    def begin_eval(self) -> None:
        """Start an evaluation (upstream's call): a new vote log; earlier votes stay pooled if aggregated."""
        if not self._folded and self.aggregated_voting:
            self.pooled.fold(self.table)  # an evaluation that never reached result() (one process)
        if not self.aggregated_voting:
            self.pooled = Tally()
        self.vote_log.clear()
        self._folded = False
        self._next_batch = 0

    def abort_eval(self) -> None:
        """Drop the current evaluation's votes (it was stopped part-way): they are never pooled, so the
        state is what it was before `begin_eval()` and the evaluation can be run again from the start."""
        self.vote_log.clear()
        self._folded = True
        self._next_batch = 0

    def update_batch(self, outputs: dict[str, torch.Tensor], *, batch_index: int | None = None) -> None:
        """Add one batch: int tokens `inputs`/`preds` [B, seq], `puzzle_identifiers` [B], `q_halt_logits` [B].

        `batch_index` is the global test-batch index (the same on every rank for the same global batch);
        calls with the same index must come in row order. Without it each call is the next batch, which
        is only world-size independent in one process.
        """
        if batch_index is None:
            batch_index = self._next_batch
        self._next_batch = batch_index + 1
        self.vote_log.at(batch_index)
        # Upstream's confidence: float64 sigmoid where the logits live, then to the CPU.
        confidence = outputs["q_halt_logits"].detach().to(torch.float64).sigmoid().cpu().numpy()
        # Copies on the CPU, outside any inference-mode tensor: nothing here is updated in place later.
        host = {
            k: outputs[k].detach().to("cpu", copy=True) for k in ("inputs", "preds", "puzzle_identifiers")
        }
        ids = host["puzzle_identifiers"].numpy()
        rows = np.nonzero(ids != self.blank_identifier_id)[0]
        record_predictions(
            self.vote_log,
            self.test_puzzles,
            [self.identifiers[int(ids[row])] for row in rows],
            host["inputs"].numpy()[rows],
            host["preds"].numpy()[rows],
            confidence[rows],
        )

    def result(self, save_path: Path | None, info: DistInfo) -> dict[str, float] | None:
        """Gather to rank 0, write `<save_path>/submission.json`, return the metrics (None on other ranks)."""
        logs = gather_objects(self.vote_log, info)
        if logs is None:
            self._folded = True  # rank 0 pools these votes
            return None
        return self.result_from(logs, save_path)

    def result_from(self, logs: list[VoteLog], save_path: Path | None) -> dict[str, float]:
        """Metrics (and `<save_path>/submission.json`) from every rank's vote log, indexed by rank."""
        current = merge_in_order(logs)
        if self.aggregated_voting and not self._folded:
            self.pooled.fold(current)
        self._folded = True
        votes = self.pooled if self.aggregated_voting else current
        submission = build_submission(
            self.test_puzzles, votes, self.submission_K, fallback=self.submission_fallback
        )
        if self.submission_fallback:
            validate_submission(submission, self.test_puzzles, self.submission_K)
        if save_path is not None:
            # json.dumps' defaults and no trailing newline: the same bytes as upstream's file.
            atomic_write_text(Path(save_path) / SUBMISSION, json.dumps(submission))
        metrics = {f"ARC/pass@{k}": v for k, v in pass_at_k(self.test_puzzles, votes, self.pass_Ks).items()}
        this_eval = pass_at_k(self.test_puzzles, current, self.pass_Ks)
        metrics.update({f"{THIS_EVAL}/pass@{k}": v for k, v in this_eval.items()})
        metrics[COUNT] = float(len(scored_tasks(self.test_puzzles)))  # pass@K's denominator (reports)
        return metrics

    def state_dict(self) -> dict[str, Any]:
        """The pooled votes of the evaluations so far (what a resumed run needs; empty off rank 0).

        Grids are stored as uint8 arrays (a byte per cell), not as lists.
        """
        grids = {k: np.asarray(g, dtype=np.uint8) for k, g in self.pooled.grids.items()}
        return {"version": STATE_VERSION, "stats": self.pooled.stats, "grids": grids}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict()` (pooled votes); the next evaluation adds to them."""
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise TRMError(
                "the checkpoint's ARC evaluator state is from another trm version: resume with the "
                "version that wrote it, or start a new run (checkpoint_path)."
            )
        grids = {k: np.asarray(g).tolist() for k, g in state["grids"].items()}
        self.pooled = Tally(stats=state["stats"], grids=grids)
        self.vote_log.clear()
        self._folded = True


OPTIONS = ("submission_K", "pass_Ks", "aggregated_voting", "submission_fallback")


def build_evaluators(specs: list[dict[str, Any]], loader: Any) -> list[ARCEvaluator]:
    """Evaluators from the `evaluators` config entries (extra keys are evaluator options)."""
    evaluators = []
    for spec in specs:
        options = {k: v for k, v in spec.items() if k != "name"}
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise TRMError(
                f"evaluator {spec.get('name', '?')}: unknown option(s) {', '.join(unknown)}; "
                f"the ARC evaluator takes {', '.join(OPTIONS)}."
            )
        if "pass_Ks" in options:
            options["pass_Ks"] = tuple(options["pass_Ks"])
        evaluators.append(
            ARCEvaluator(
                loader.identifiers, loader.test_puzzles, loader.metadata.blank_identifier_id, **options
            )
        )
    return evaluators
