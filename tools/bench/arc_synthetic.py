"""Generated ARC tasks with simple rules, for CPU benches that need an ARC model to learn something in minutes.

Every task draws a rule from one family, with its own parameters, and random small input grids (sides
`MIN_SIDE`..`MAX_SIDE`, background 0, about `DENSITY` of the cells coloured); its outputs apply the rule.
Families (all keep the grid's shape):

- `fill`: the background (0) becomes the task's colour;
- `recolour`: one colour of the task becomes another (every input holds it);
- `keep`: every colour but the task's becomes background;
- `shift`: every cell moves one step in the task's direction (cells pushed out are lost, background
  comes in);
- `rot180`: a half turn.

`write_subsets` writes them in the Kaggle "combined" layout the ARC builder reads
(`<prefix>_<subset>_challenges.json` and `_solutions.json`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from trm.io import atomic_write_json

MIN_SIDE, MAX_SIDE = 3, 6
DENSITY = 0.45
FAMILIES = ("fill", "recolour", "keep", "shift", "rot180")

Rule = Callable[[np.ndarray], np.ndarray]


def make_rule(family: str, rng: np.random.Generator) -> tuple[Rule, int | None]:
    """A rule of `family` with parameters drawn from `rng`, and the colour every input must hold (or None)."""
    a, b = (int(c) for c in rng.choice(np.arange(1, 10), size=2, replace=False))
    if family == "fill":
        return (lambda g: np.where(g == 0, a, g)), None
    if family == "recolour":
        return (lambda g: np.where(g == a, b, g)), a
    if family == "keep":
        return (lambda g: np.where(g == a, g, 0)), a
    if family == "shift":
        return partial(shifted, direction=int(rng.integers(4))), None
    if family == "rot180":
        return (lambda g: np.rot90(g, 2)), None
    raise ValueError(f"unknown family {family!r}: choose from {', '.join(FAMILIES)}")


def shifted(grid: np.ndarray, direction: int) -> np.ndarray:
    """`grid` moved one cell down (0), up (1), right (2) or left (3), background filling in."""
    axis, step = divmod(direction, 2)
    out = np.zeros_like(grid)
    src = [slice(None), slice(None)]
    dst = [slice(None), slice(None)]
    src[axis], dst[axis] = (
        (slice(None, -1), slice(1, None)) if step == 0 else (slice(1, None), slice(None, -1))
    )
    out[tuple(dst)] = grid[tuple(src)]
    return out


def random_grid(
    rng: np.random.Generator, holds: int | None, sides: tuple[int, int] = (MIN_SIDE, MAX_SIDE)
) -> np.ndarray:
    """A grid of random shape (sides in `sides`, inclusive) with about DENSITY coloured cells; one cell
    is `holds` when given."""
    h, w = (int(s) for s in rng.integers(sides[0], sides[1] + 1, size=2))
    grid = np.where(rng.random((h, w)) < DENSITY, rng.integers(1, 10, size=(h, w)), 0)
    if holds is not None:
        grid[rng.integers(h), rng.integers(w)] = holds
    return grid


def make_task(
    family: str,
    rng: np.random.Generator,
    demos: int,
    tests: int,
    sides: tuple[int, int] = (MIN_SIDE, MAX_SIDE),
) -> tuple[dict, list]:
    """(challenge {"train": pairs, "test": inputs}, solutions [output per test input]) of one task."""
    rule, holds = make_rule(family, rng)
    pairs = []
    for _ in range(demos + tests):
        grid = random_grid(rng, holds, sides)
        pairs.append({"input": grid.tolist(), "output": rule(grid).tolist()})
    challenge = {"train": pairs[:demos], "test": [{"input": p["input"]} for p in pairs[demos:]]}
    return challenge, [p["output"] for p in pairs[demos:]]


def write_subsets(
    prefix: Path,
    counts: dict[str, int],
    seed: int,
    families: Sequence[str] = FAMILIES,
    sides: tuple[int, int] = (MIN_SIDE, MAX_SIDE),
) -> dict[str, Any]:
    """Write `counts[subset]` tasks per subset under `prefix`, families in turn, 2-4 demonstrations and
    1-2 test inputs each; returns {subset: {family: tasks}}."""
    rng = np.random.default_rng(seed)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    made: dict[str, Any] = {}
    for subset, n in counts.items():
        challenges, solutions, per_family = {}, {}, dict.fromkeys(families, 0)
        for i in range(n):
            family = families[i % len(families)]
            demos, tests = int(rng.integers(2, 5)), int(rng.integers(1, 3))
            task_id = f"{subset}-{i:03d}-{family}"
            challenges[task_id], solutions[task_id] = make_task(family, rng, demos, tests, sides)
            per_family[family] += 1
        for kind, content in (("challenges", challenges), ("solutions", solutions)):
            atomic_write_json(Path(f"{prefix}_{subset}_{kind}.json"), content, indent=None)
        made[subset] = per_family
    return made
