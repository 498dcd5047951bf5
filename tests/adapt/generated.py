"""Generated ARC tasks whose demonstrations identify the rule: a colour permutation (fixing black) or a
dihedral transform, of small random grids; and the tiny model the adaptation tests train on them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from trm.data.encoding import dihedral

KINDS = ("colours", "dihedral")


def task(
    rng: np.random.Generator, kind: str, *, demos: int = 3, side: int = 3, colours: int = 10
) -> tuple[dict, list]:
    """One task (Kaggle format, `demos` demonstrations, one test input) and its test output; grids use
    colours 0..colours-1, a permutation moves 1..colours-1 (black stays)."""
    if kind == "colours":
        rule = np.concatenate([[0], rng.permutation(colours - 1) + 1, np.arange(colours, 10)])

        def apply(g: np.ndarray) -> np.ndarray:
            return rule[g]
    else:
        tid = int(rng.integers(1, 8))

        def apply(g: np.ndarray) -> np.ndarray:
            return dihedral(g, tid)

    grids = [rng.integers(0, colours, (side, side)) for _ in range(demos + 1)]
    pairs = [{"input": g.tolist(), "output": apply(g).tolist()} for g in grids]
    return {"train": pairs[:demos], "test": [{"input": pairs[-1]["input"]}]}, [pairs[-1]["output"]]


def write_tasks(
    directory: Path, name: str, count: int, seed: int, kinds: tuple[str, ...] = ("colours",), **shape: int
) -> Path:
    """`<dir>/<name>_challenges.json` and `_solutions.json` with `count` tasks; returns the challenges."""
    rng = np.random.default_rng(seed)
    challenges, solutions = {}, {}
    for i in range(count):
        task_id = f"{name}{seed:03d}{i:03d}"
        challenges[task_id], solutions[task_id] = task(rng, kinds[i % len(kinds)], **shape)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}_challenges.json"
    path.write_text(json.dumps(challenges))
    (directory / f"{name}_solutions.json").write_text(json.dumps(solutions))
    return path
