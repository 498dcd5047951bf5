"""Helpers for the data tests: tiny ARC inputs written to disk and the smoke build settings."""

from __future__ import annotations

import json
from pathlib import Path

SMOKE = {
    "subsets": ["training2", "evaluation2"],
    "test_set_name": "evaluation2",
    "num_aug": 8,
    "max_puzzles": 12,
}


def write_subset(directory: Path, subset: str, challenges: dict, solutions: dict | None = None) -> Path:
    """Write `<dir>/arc-agi_<subset>_{challenges,solutions}.json`; returns the input prefix."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"arc-agi_{subset}_challenges.json").write_text(json.dumps(challenges))
    if solutions is not None:
        (directory / f"arc-agi_{subset}_solutions.json").write_text(json.dumps(solutions))
    return directory / "arc-agi"


def tiny_task(seed: int, test_output: bool = True) -> tuple[dict, list]:
    """A small valid task with 2 demos and 1 test input (colours depend on seed), and its solutions."""
    a, b = seed % 9 + 1, (seed + 3) % 9 + 1
    task = {
        "train": [
            {"input": [[a, 0], [0, b]], "output": [[b, 0, 0], [0, a, 0]]},
            {"input": [[0, a, a]], "output": [[a], [b], [0]]},
        ],
        "test": [{"input": [[b, b], [a, 0], [0, 0]]}],
    }
    return task, [[[a, b], [b, a]]] if test_output else []
