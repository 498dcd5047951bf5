"""The TRM paper's published test numbers per recipe, and which runs trained a published recipe unchanged.

Source: A. Jolicoeur-Martineau, "Less is More: Recursive Reasoning with Tiny Networks", arXiv:2510.04871
(v1), the headline results table. The test-set sizes are those of the paper's benchmarks: ARC-AGI-1 and
ARC-AGI-2 public evaluation (400 and 120 tasks, scored by pass@2), Maze-Hard (1,000 test mazes) and
Sudoku-Extreme (the full test split, about 423k puzzles; the exact count was not re-checked, which moves
its interval by far less than its printed precision).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import PurePath
from typing import Any

from trm.training.config import ARCH_RESUMABLE_KEYS, RUN_ONLY_KEYS, as_dict, compose, is_run_only
from trm.training.recipes import flatten, get_recipe


@dataclass(frozen=True)
class Published:
    """One published test number of the TRM paper."""

    recipe: str
    """The recipe of trm.training.recipes that trains the paper's configuration."""
    benchmark: str
    model: str
    metric: str
    """What the number measures; a run's achieved number is its headline metric (trm.training.config.headline_metric),
    the same measure: ARC/pass@2, or the exact accuracy of the eval set."""
    percent: float
    test_count: int
    """Test items the percentage is over (tasks for ARC, puzzles/mazes otherwise)."""
    unit: str


PUBLISHED: tuple[Published, ...] = (
    Published("arc1", "ARC-AGI-1", "TRM-Att (7M)", "pass@2", 44.6, 400, "tasks"),
    Published("arc2", "ARC-AGI-2", "TRM-Att (7M)", "pass@2", 7.8, 120, "tasks"),
    Published("sudoku-mlp", "Sudoku-Extreme", "TRM-MLP (5M)", "exact accuracy", 87.4, 423_000, "puzzles"),
    Published("sudoku-att", "Sudoku-Extreme", "TRM-Att (7M)", "exact accuracy", 74.7, 423_000, "puzzles"),
    Published("maze", "Maze-Hard", "TRM-Att (7M)", "exact accuracy", 85.3, 1000, "mazes"),
)  # fmt: skip

# Keys that do not make a run a different experiment: its naming and logging, where its data lives (the
# recipe's dataset directory under any parent: compared by name), numerics-only architecture keys, the seed.
_IGNORED = (
    RUN_ONLY_KEYS | {"data_paths", "data_paths_test", "seed"} | {f"arch.{k}" for k in ARCH_RESUMABLE_KEYS}
)


def _defining(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in flatten(config).items() if k not in _IGNORED and not is_run_only(k)}


@cache
def _recipe_config(recipe: str) -> tuple[tuple[str, str], ...]:
    """The defining keys of a recipe's resolved config, as the trainer resolves it (hashable)."""
    resolved = as_dict(compose(list(get_recipe(recipe).overrides)))
    return tuple(sorted((k, repr(v)) for k, v in _defining(resolved).items()))


def _dataset_names(config: dict[str, Any]) -> list[str]:
    paths = config.get("data_paths")
    return [PurePath(str(p)).name for p in paths] if isinstance(paths, list) else []


def published_recipe(config: dict[str, Any] | None) -> Published | None:
    """The published entry whose recipe `config` (a run.json config) trains unchanged, if any: the same
    defining keys, and data_paths naming the recipe's dataset directory (arc1 and arc2 differ only there)."""
    if not config:
        return None
    mine = tuple(sorted((k, repr(v)) for k, v in _defining(config).items()))
    datasets = _dataset_names(config)
    return next(
        (
            p
            for p in PUBLISHED
            if datasets == [get_recipe(p.recipe).dataset] and _recipe_config(p.recipe) == mine
        ),
        None,
    )
