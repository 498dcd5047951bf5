"""A fixed, seeded part of the test set for cheap evaluations between full ones (`eval_subset.*`).

Two ways to pick it, by what the evaluation scores:

- `augmentations` (an ARC evaluator runs): in every group (an original task and its augmented copies) a
  share of the puzzles is kept, at least one, with all their test inputs. Every test input of every task
  still gets predictions, and voting happens over the kept augmentations.
- `rows` (Sudoku, Maze: exact accuracy over rows): a share of each set's examples.

The choice depends only on (seed, set index, the dataset's layout, fraction), so every evaluation of a run
and a resumed run use the same rows. Its metrics are named with SUBSET_PREFIX (`subset/eval/all/...`,
`subset/ARC/pass@2`), never under the full evaluation's names.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

SUBSET_PREFIX = "subset/"
AUGMENTATIONS = "augmentations"
ROWS = "rows"
WILSON_Z = 1.96  # 95 %


def _rng(seed: int, set_index: int) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(np.random.SeedSequence([seed, set_index, 0x5EB5E7])))


def _share(n: int, fraction: float) -> int:
    """How many of `n` items a fraction keeps: at least one (of a non-empty list), at most all."""
    return min(n, max(1, round(fraction * n))) if n else 0


def pick_augmentations(
    group_indices: np.ndarray, puzzle_indices: np.ndarray, fraction: float, rng: np.random.Generator
) -> np.ndarray:
    """Example ids (ascending) of a share of each group's puzzles, at least one puzzle per group."""
    kept: list[np.ndarray] = []
    for lo, hi in itertools.pairwise(group_indices):
        puzzles = np.sort(rng.choice(np.arange(lo, hi), size=_share(int(hi - lo), fraction), replace=False))
        kept.extend(np.arange(puzzle_indices[p], puzzle_indices[p + 1]) for p in puzzles)
    return np.concatenate(kept).astype(np.int64) if kept else np.zeros(0, np.int64)


def pick_rows(num_examples: int, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """A share of the example ids 0..num_examples-1, ascending."""
    ids = rng.choice(num_examples, size=_share(num_examples, fraction), replace=False)
    return np.sort(ids).astype(np.int64)


@dataclass(frozen=True)
class Subset:
    """The chosen example ids of every test set and how they were chosen."""

    examples: dict[str, np.ndarray]
    mode: str
    fraction: float
    seed: int

    def fingerprint(self) -> str:
        """sha256 over the sets' names and example ids: equal fingerprints, equal subsets."""
        digest = hashlib.sha256()
        for name in sorted(self.examples):
            digest.update(name.encode() + b"\0")
            digest.update(np.ascontiguousarray(self.examples[name], dtype="<i8").tobytes())
        return digest.hexdigest()

    def record(self, totals: Mapping[str, int]) -> dict[str, Any]:
        """What run.json records: how it was chosen, rows kept per set (of how many), fingerprint."""
        return {
            "mode": self.mode,
            "fraction": self.fraction,
            "seed": self.seed,
            "examples": {n: [len(ids), int(totals[n])] for n, ids in sorted(self.examples.items())},
            "sha256": self.fingerprint(),
        }


def choose(
    layout: Sequence[tuple[str, np.ndarray, np.ndarray]], fraction: float, seed: int, mode: str
) -> Subset:
    """The subset of a test split laid out as `PuzzleLoader.test_layout()` gives it."""
    examples: dict[str, np.ndarray] = {}
    for index, (name, groups, puzzles) in enumerate(layout):
        rng = _rng(seed, index)
        if mode == AUGMENTATIONS:
            examples[name] = pick_augmentations(groups, puzzles, fraction, rng)
        else:
            examples[name] = pick_rows(int(puzzles[-1]), fraction, rng)
    return Subset(examples, mode, fraction, seed)


class SubsetLoader:
    """A test loader's view that yields only the subset's rows (what trm.evaluation.runner.evaluate reads)."""

    def __init__(self, loader: Any, subset: Subset) -> None:
        self.loader = loader
        self.subset = subset
        self.metadata = loader.metadata

    @property
    def identifiers(self) -> list[str]:
        return self.loader.identifiers

    @property
    def test_puzzles(self) -> dict[str, Any]:
        return self.loader.test_puzzles

    def iter_test(self) -> Iterator[tuple[str, dict[str, torch.Tensor], int]]:
        return self.loader.iter_test(self.subset.examples)


def wilson_interval(successes: float, n: float, z: float = WILSON_Z) -> tuple[float, float]:
    """The Wilson score interval of a proportion successes/n (95 % by default); (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def subset_metrics(metrics: Mapping[str, float], ranked_by: str) -> dict[str, float]:
    """`metrics` of a subset evaluation under SUBSET_PREFIX, plus the Wilson interval of `ranked_by` (a
    full-evaluation name such as ARC/pass@2 or eval/all/exact_accuracy) as `<name>/wilson_low|high`."""
    out = {f"{SUBSET_PREFIX}{k}": float(v) for k, v in metrics.items()}
    if ranked_by in metrics:
        n = denominator(metrics, ranked_by)
        if n is not None:
            low, high = wilson_interval(metrics[ranked_by] * n, n)
            out[f"{SUBSET_PREFIX}{ranked_by}/wilson_low"] = low
            out[f"{SUBSET_PREFIX}{ranked_by}/wilson_high"] = high
    return out


def denominator(metrics: Mapping[str, float], name: str) -> float | None:
    """How many items a proportion metric averages over: ARC/count for ARC metrics, the set's row count
    for `eval/<set>/<metric>`."""
    if name.startswith("ARC/"):
        return metrics.get("ARC/count")
    parts = name.split("/")
    if len(parts) == 3 and parts[0] == "eval":
        return metrics.get(f"eval/{parts[1]}/count")
    return None
