"""The subset-ranking bench's statistics and plot, shared by its Sudoku and ARC modes (tools.bench.subset).

Each mode gives every checkpoint's full-set score and a way to score every checkpoint on one subset (a
fraction and a seed of `trm.evaluation.subset.choose`); `compare` turns them into the table the figures
and the docs quote: Spearman over the checkpoints, same best, full best within the subset's top k, regret.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trm.io import atomic_write_bytes

FRACTIONS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5)
SEEDS = tuple(range(20))
TOP_KS = (1, 2, 3)
NEAR_BEST = 0.85  # the hard case: checkpoints scoring at least this share of the best full score

# (fraction, seed) -> (each checkpoint's score on that subset, how many test examples the subset keeps)
SubsetScores = Callable[[float, int], tuple[np.ndarray, int]]


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rho with average ranks for ties (NaN when either side is constant)."""

    def ranks(x: np.ndarray) -> np.ndarray:
        order = np.argsort(x, kind="stable")
        r = np.empty(len(x))
        r[order] = np.arange(len(x), dtype=float)
        for value in np.unique(x):
            r[x == value] = r[x == value].mean()
        return r

    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def best_index(scores: np.ndarray) -> int:
    """The highest score; ties go to the later checkpoint (as `trm best`)."""
    return int(len(scores) - 1 - np.argmax(scores[::-1]))


def top_k(scores: np.ndarray, k: int) -> list[int]:
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], -i))
    return order[:k]


def best_of(full: np.ndarray, candidates: Sequence[int]) -> int:
    """The candidate with the highest full score, ties to the later one: the choice `best.top_k` makes."""
    return max(candidates, key=lambda i: (full[i], i))


def near_best(full: np.ndarray) -> np.ndarray:
    """Indices of the checkpoints whose full score is at least NEAR_BEST x the best."""
    return np.nonzero(full >= NEAR_BEST * full.max())[0]


def compare(
    full: np.ndarray,
    subset_scores: SubsetScores,
    *,
    size_key: str = "rows",
    fractions: Sequence[float] = FRACTIONS,
) -> dict[str, Any]:
    """Subset rankings against the full ranking (`full`: a score per checkpoint) for every fraction and seed.

    `size_key` names the kept-example count in each row of the table (the last seed's)."""
    best = best_index(full)
    result: dict[str, Any] = {}
    for fraction in fractions:
        rhos: list[float] = []
        same: list[bool] = []
        within: dict[int, list[bool]] = {k: [] for k in TOP_KS}
        regret: dict[int, list[float]] = {k: [] for k in TOP_KS}
        kept = 0
        for seed in SEEDS:
            sub, kept = subset_scores(fraction, seed)
            rhos.append(spearman(sub, full))
            same.append(best_index(sub) == best)
            for k in TOP_KS:
                candidates = top_k(sub, k)
                within[k].append(best in candidates)
                chosen = best_of(full, candidates)
                regret[k].append(float(full[best] - full[chosen]))
        result[str(fraction)] = {
            size_key: kept,
            # None when every subset ties all checkpoints (or there is one): no rank correlation exists
            "spearman_mean": None if np.isnan(rhos).all() else float(np.nanmean(rhos)),
            "spearman_min": None if np.isnan(rhos).all() else float(np.nanmin(rhos)),
            "same_best": float(np.mean(same)),
            **{f"full_best_in_top{k}": float(np.mean(within[k])) for k in TOP_KS},
            **{f"regret_top{k}_mean": float(np.mean(regret[k])) for k in TOP_KS},
            **{f"regret_top{k}_max": float(np.max(regret[k])) for k in TOP_KS},
        }
    return result


def rounded(row: dict[str, Any]) -> dict[str, Any]:
    """A table row for printing: numbers to 3 decimals (None stays None)."""
    return {k: v if v is None else round(v, 3) for k, v in row.items()}


def plot(
    path: Path,
    steps: list[int],
    full: list[float],
    examples: dict[str, list[float]],
    near: dict[str, Any],
    near_count: int,
    metric: str = "exact accuracy",
) -> None:
    """Left: the full and two subsets' scores per checkpoint (`examples`: seed 0's, by fraction); right:
    the comparison over the `near_count` near-best checkpoints (`near`) against the fraction."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(steps, full, "k-o", label="full test set")
    for fraction in (0.05, 0.2):
        left.plot(steps, examples[str(fraction)], "--.", label=f"subset {fraction:g} (seed 0)")
    left.set(xlabel="step", ylabel=metric, title="checkpoints: full vs subset (measured)")
    left.legend()
    fractions = [float(f) for f in near]
    right.plot(fractions, [near[str(f)]["spearman_mean"] for f in fractions], "o-", label="Spearman (mean)")
    right.plot(fractions, [near[str(f)]["same_best"] for f in fractions], "s-", label="same best (share)")
    for k in TOP_KS[1:]:
        right.plot(fractions, [near[str(f)][f"full_best_in_top{k}"] for f in fractions], "^-",
                   label=f"full best in subset top-{k}")  # fmt: skip
    right.set_xscale("log")
    right.set_xticks(fractions, [f"{f:g}" for f in fractions])
    right.minorticks_off()
    right.set(xlabel="eval_subset.fraction", ylim=(0, 1.05),
              title=f"{near_count} near-best checkpoints, {len(SEEDS)} seeds (measured)")  # fmt: skip
    right.legend(loc="lower right")
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, png.getvalue())
