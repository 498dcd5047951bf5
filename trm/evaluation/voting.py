"""ARC voting, pass@K and the Kaggle submission: pure functions over a table of predicted grids.

Reused by the in-training evaluator, `python -m trm.eval` and Kaggle inference. A "test puzzle" is the
original ARC task JSON (`{"train": [...], "test": [{"input": grid, "output": grid?}, ...]}`); predictions
are keyed by the task id and the hash of the original (un-augmented) test input grid.

Ranking follows upstream's evaluator exactly: candidates by vote count, then by mean confidence (the
float64 halting sigmoid, summed in vote order and divided by the count), both descending, and on a full
tie the candidate whose first vote came first wins. The order in which votes are added is therefore
part of the result; `trm.evaluation.arc` defines it independently of the world size.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from trm.errors import TRMError

PASS_KS = (1, 2, 5, 10, 100, 1000)
# Kaggle needs a grid for every attempt; this stands in for "no prediction" and for empty crops.
FALLBACK_GRID: list[list[int]] = [[0]]


def grid_key(grid: Any) -> str:
    """Stable hash of a grid (shape + values), for matching test inputs and counting votes."""
    arr = np.asarray(grid, dtype=np.int64)
    if arr.size == 0:
        arr = arr.reshape(0, 0)
    h = hashlib.sha256(repr(arr.shape).encode())
    h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()[:32]


class VoteSink(Protocol):
    """Where `record_predictions` files votes (a `VoteTable`, or the evaluator's ordered log)."""

    def add(self, task_id: str, input_grid: Any, pred_grid: Any, confidence: float) -> None: ...


@dataclass(frozen=True)
class Candidate:
    """One distinct predicted grid for a test input, with its votes."""

    key: str
    count: int
    mean_confidence: float


@dataclass
class VoteTable:
    """Predictions per (task, test input): lists of (grid key, halt confidence), plus the grids by key."""

    votes: dict[str, dict[str, list[tuple[str, float]]]] = field(default_factory=lambda: defaultdict(dict))
    grids: dict[str, list[list[int]]] = field(default_factory=dict)

    def add(self, task_id: str, input_grid: Any, pred_grid: Any, confidence: float) -> None:
        """Record one prediction (already mapped back to the original orientation and colours)."""
        pred_k = grid_key(pred_grid)
        self.grids.setdefault(pred_k, np.asarray(pred_grid, dtype=np.int64).tolist())
        self.add_vote(task_id, grid_key(input_grid), pred_k, confidence)

    def add_vote(self, task_id: str, input_key: str, pred_key: str, confidence: float) -> None:
        """Record one vote by keys (its grid must be in `grids`); votes keep the order they are added in."""
        self.votes[task_id].setdefault(input_key, []).append((pred_key, float(confidence)))

    def merge(self, other: VoteTable) -> None:
        """Add every vote of `other` (e.g. gathered from another rank)."""
        self.grids.update(other.grids)
        for task_id, by_input in other.votes.items():
            for input_k, votes in by_input.items():
                self.votes[task_id].setdefault(input_k, []).extend(votes)

    def clear(self) -> None:
        """Forget all votes (a new evaluation round)."""
        self.votes = defaultdict(dict)
        self.grids = {}

    def ranked(self, task_id: str, input_grid: Any) -> list[Candidate]:
        """Distinct predictions for one test input, best first (see `rank_votes`)."""
        return rank_votes(self.votes.get(task_id, {}).get(grid_key(input_grid), []))

    def __getstate__(self) -> dict[str, Any]:
        return {"votes": {k: dict(v) for k, v in self.votes.items()}, "grids": self.grids}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.votes = defaultdict(dict, state["votes"])
        self.grids = state["grids"]


def rank_votes(votes: list[tuple[str, float]]) -> list[Candidate]:
    """Rank distinct grids by vote count, then by mean halt confidence (both descending).

    Candidates that tie on both keep the order of their first vote (a stable sort, as upstream's):
    the earlier one ranks higher. The mean is the in-order float sum of the confidences over the count.
    """
    stats: dict[str, list[float]] = {}
    _accumulate(stats, votes)
    return _rank(stats)


def _accumulate(stats: dict[str, list[float]], votes: list[tuple[str, float]]) -> None:
    for key, conf in votes:
        entry = stats.setdefault(key, [0, 0.0])
        entry[0] += 1
        entry[1] += conf


def _rank(stats: dict[str, list[float]]) -> list[Candidate]:
    cands = [Candidate(k, int(count), total / count) for k, (count, total) in stats.items()]
    return sorted(cands, key=lambda c: (c.count, c.mean_confidence), reverse=True)


@dataclass
class Tally:
    """Votes folded into (count, confidence sum) per distinct grid, in first-seen order.

    Folding votes in order yields exactly the counts, float sums and tie order that ranking the whole
    list of votes would (`rank_votes`), so pooled voting over many evaluations keeps this instead of
    every vote. Same lookups as `VoteTable` (`ranked`, `grids`).
    """

    stats: dict[str, dict[str, dict[str, list[float]]]] = field(default_factory=dict)
    grids: dict[str, list[list[int]]] = field(default_factory=dict)

    def fold(self, table: VoteTable) -> None:
        """Add every vote of `table`, which come after every vote already folded."""
        for task_id, by_input in table.votes.items():
            per_task = self.stats.setdefault(task_id, {})
            for input_key, votes in by_input.items():
                _accumulate(per_task.setdefault(input_key, {}), votes)
                for pred_key, _ in votes:
                    if pred_key not in self.grids:
                        self.grids[pred_key] = table.grids[pred_key]

    def ranked(self, task_id: str, input_grid: Any) -> list[Candidate]:
        """Distinct predictions for one test input, best first (see `rank_votes`)."""
        return _rank(self.stats.get(task_id, {}).get(grid_key(input_grid), {}))


def _has_solutions(task: dict[str, Any]) -> bool:
    return all("output" in pair for pair in task.get("test", []))


def scored_tasks(test_puzzles: dict[str, Any]) -> dict[str, Any]:
    """The tasks pass@K is averaged over (the denominator of `pass_at_k`): those with test outputs."""
    return {tid: task for tid, task in test_puzzles.items() if _has_solutions(task) and task.get("test")}


def pass_at_k(
    test_puzzles: dict[str, Any], table: VoteTable | Tally, ks: tuple[int, ...] = PASS_KS
) -> dict[int, float]:
    """Mean over tasks of the fraction of test pairs whose answer is in the top K.

    The denominator is every task of `test_puzzles` with outputs, as upstream's: tasks of a hidden test
    set count too, because both builders give their test pairs the dummy output `[[0]]` (which a `[[0]]`
    prediction then matches, exactly as upstream scores it). A task or pair without any vote scores 0.
    Tasks with no test pair, or without outputs (Kaggle's challenges file), are left out; upstream
    cannot score either (it divides by zero or fails on the missing key).
    """
    scored = scored_tasks(test_puzzles)
    totals = dict.fromkeys(ks, 0.0)
    for task_id, task in scored.items():
        hits = dict.fromkeys(ks, 0)
        for pair in task["test"]:
            keys = [c.key for c in table.ranked(task_id, pair["input"])]
            label = grid_key(pair["output"])
            for k in ks:
                hits[k] += label in keys[:k]
        for k in ks:
            totals[k] += hits[k] / len(task["test"])
    return {k: (totals[k] / len(scored) if scored else 0.0) for k in ks}


def _usable(grid: list[list[int]]) -> list[list[int]]:
    return grid if grid and all(grid) else FALLBACK_GRID


def build_submission(
    test_puzzles: dict[str, Any], table: VoteTable | Tally, attempts: int = 2, *, fallback: bool = True
) -> dict[str, Any]:
    """ARC Prize format: `{task: [{"attempt_1": g, "attempt_2": g}, ...]}`, the top `attempts` grids.

    With fewer distinct candidates than attempts, the best one is repeated.
    `fallback=True` (Kaggle needs it): every test input gets an entry, in order; a pair with no
    prediction, and an empty crop, get the fallback grid `[[0]]`.
    `fallback=False` (upstream's `submission.json`): a pair with no prediction is left out, so later pairs
    of that task move up a slot and a task without any prediction gets `[]`; empty crops stay `[]`.
    """
    submission: dict[str, Any] = {}
    for task_id, task in test_puzzles.items():
        entries = []
        for pair in task.get("test", []):
            ranked = table.ranked(task_id, pair["input"])
            grids = [table.grids[c.key] for c in ranked[:attempts]]
            if fallback:
                grids = [_usable(g) for g in grids] or [FALLBACK_GRID]
            elif not grids:
                continue
            grids += [grids[0]] * (attempts - len(grids))
            entries.append({f"attempt_{i + 1}": g for i, g in enumerate(grids)})
        submission[task_id] = entries
    return submission


def validate_submission(submission: Any, test_puzzles: dict[str, Any], attempts: int = 2) -> None:
    """Raise TRMError unless `submission` has a well-formed entry for every test input of every task."""
    if not isinstance(submission, dict):
        raise TRMError("submission.json must be a JSON object {task_id: [...]}.")
    missing = sorted(set(test_puzzles) - set(submission))
    if missing:
        raise TRMError(f"submission.json lacks {len(missing)} task(s), e.g. {missing[0]}: regenerate it.")
    for task_id, task in test_puzzles.items():
        entries = submission[task_id]
        if not isinstance(entries, list) or len(entries) != len(task.get("test", [])):
            raise TRMError(
                f"submission.json task {task_id}: needs one entry per test input ({len(task['test'])})."
            )
        for i, entry in enumerate(entries):
            want = {f"attempt_{a + 1}" for a in range(attempts)}
            if not isinstance(entry, dict) or set(entry) != want:
                raise TRMError(f"submission.json task {task_id} pair {i}: keys must be {sorted(want)}.")
            for name, grid in entry.items():
                ok = isinstance(grid, list) and grid and all(isinstance(r, list) and r for r in grid)
                ok = ok and all(isinstance(v, int) and 0 <= v <= 9 for r in grid for v in r)
                ok = ok and len({len(r) for r in grid}) == 1
                if not ok:
                    raise TRMError(
                        f"submission.json task {task_id} pair {i} {name}: not a rectangular grid of 0..9."
                    )


def record_predictions(
    table: VoteSink,
    test_puzzles: dict[str, Any],
    identifiers: Sequence[str],
    inputs: np.ndarray,
    preds: np.ndarray,
    confidences: np.ndarray,
) -> None:
    """Add a batch of augmented predictions: row i's identifier string names its task and augmentation.

    Crops the 900-token input and prediction, undoes the augmentation and votes under the original test
    input; rows of tasks outside `test_puzzles` are ignored.
    """
    from trm.data.encoding import crop, invert_augmentation, parse_identifier

    for row, name in enumerate(identifiers):
        task_id, tid, colour_map = parse_identifier(name)
        if task_id not in test_puzzles:
            continue
        grid_in = invert_augmentation(crop(inputs[row]), tid, colour_map)
        grid_out = invert_augmentation(crop(preds[row]), tid, colour_map)
        table.add(task_id, grid_in, grid_out, float(confidences[row]))
