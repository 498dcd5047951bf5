"""The ARC evaluator (TRM_SPEC §10.2): undo augmentations, vote, pass@K, submission.json.

Per evaluation it collects `(task, original test input, predicted grid, sigmoid(q_halt))` from every batch,
gathers the vote tables to rank 0 (gloo object gather; no process group needed in one process), ranks
candidates by count then mean confidence and writes `submission.json` with an entry for every test input.
Votes are per evaluation unless `aggregated_voting=True` (upstream's default, which also counts earlier
evaluations' predictions).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trm.distributed import DistInfo, gather_objects
from trm.evaluation.voting import (
    PASS_KS,
    VoteTable,
    build_submission,
    pass_at_k,
    record_predictions,
    validate_submission,
)
from trm.io import atomic_write_json

log = logging.getLogger(__name__)

SUBMISSION = "submission.json"


class ARCEvaluator:
    """Collects predictions over an evaluation and turns them into `ARC/pass@K` and a submission."""

    required_outputs = ("inputs", "puzzle_identifiers", "q_halt_logits", "preds")

    def __init__(
        self,
        identifiers: list[str],
        test_puzzles: dict[str, Any],
        blank_identifier_id: int,
        *,
        submission_K: int = 2,
        pass_Ks: tuple[int, ...] = PASS_KS,
        aggregated_voting: bool = False,
    ) -> None:
        self.identifiers = identifiers
        self.test_puzzles = test_puzzles
        self.blank_identifier_id = blank_identifier_id
        self.submission_K = submission_K
        self.pass_Ks = tuple(pass_Ks)
        self.aggregated_voting = aggregated_voting
        self.table = VoteTable()

    def begin_eval(self) -> None:
        """Start an evaluation round (clears the votes unless aggregated_voting)."""
        if not self.aggregated_voting:
            self.table.clear()

    def update_batch(self, outputs: dict[str, torch.Tensor]) -> None:
        """Add one batch: int tokens `inputs`/`preds` [B, seq], `puzzle_identifiers` [B], `q_halt_logits` [B]."""
        # Copies on the CPU, outside any inference-mode tensor: nothing here is updated in place later.
        host = {k: outputs[k].detach().to("cpu", copy=True) for k in self.required_outputs}
        ids = host["puzzle_identifiers"].numpy()
        rows = np.nonzero(ids != self.blank_identifier_id)[0]
        record_predictions(
            self.table,
            self.test_puzzles,
            [self.identifiers[int(ids[row])] for row in rows],
            host["inputs"].numpy()[rows],
            host["preds"].numpy()[rows],
            torch.sigmoid(host["q_halt_logits"].float()).numpy()[rows],
        )

    def result(self, save_path: Path | None, info: DistInfo) -> dict[str, float] | None:
        """Gather to rank 0, write `<save_path>/submission.json`, return `ARC/pass@K` (None on other ranks)."""
        tables = gather_objects(self.table, info)
        if tables is None:
            return None
        merged = VoteTable()
        for table in tables:
            merged.merge(table)
        submission = build_submission(self.test_puzzles, merged, self.submission_K)
        validate_submission(submission, self.test_puzzles, self.submission_K)
        if save_path is not None:
            atomic_write_json(Path(save_path) / SUBMISSION, submission, indent=None)
        scores = pass_at_k(self.test_puzzles, merged, self.pass_Ks)
        return {f"ARC/pass@{k}": v for k, v in scores.items()}


def build_evaluators(specs: list[dict[str, Any]], loader: Any) -> list[ARCEvaluator]:
    """Evaluators from the `evaluators` config entries (extra keys are evaluator options)."""
    evaluators = []
    for spec in specs:
        options = {k: v for k, v in spec.items() if k != "name"}
        if "pass_Ks" in options:
            options["pass_Ks"] = tuple(options["pass_Ks"])
        evaluators.append(
            ARCEvaluator(
                loader.identifiers, loader.test_puzzles, loader.metadata.blank_identifier_id, **options
            )
        )
    return evaluators
