"""Accept a dataset dir built by upstream TinyRecursiveModels: check its structure, then write a manifest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from trm.errors import TRMError

from . import formats
from .manifest import MANIFEST, identifiers_provenance, write_manifest
from .metadata import DatasetMetadata

UPSTREAM_BUILDER = "upstream TinyRecursiveModels (imported by trm-stack)"


def check_split(root: Path, split: str, num_identifiers: int | None) -> dict[str, int]:
    """Validate one materialized split's arrays against its dataset.json; returns its counts."""
    meta = DatasetMetadata.read(root / split / "dataset.json")
    where = root / split

    def load(name: str, mmap: bool = False) -> np.ndarray:
        path = formats.array_path(root, split, name)
        if not path.is_file():
            raise TRMError(f"{path}: missing; the upstream build did not finish, rebuild it")
        try:
            return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise TRMError(
                f"{path}: unreadable array ({err}); the file is damaged, rebuild the dataset"
            ) from None

    puzzle_indices, group_indices = load("puzzle_indices"), load("group_indices")
    identifiers = load("puzzle_identifiers")
    inputs, labels = load("inputs", mmap=True), load("labels", mmap=True)
    problems = []
    if inputs.shape != labels.shape or inputs.ndim != 2 or inputs.shape[1] != meta.seq_len:
        problems.append(f"inputs {inputs.shape} / labels {labels.shape} are not [N, seq_len={meta.seq_len}]")
    elif inputs.dtype != np.uint8 or labels.dtype != np.uint8:
        problems.append(
            f"inputs/labels are {inputs.dtype}/{labels.dtype}, the loader reads uint8 (upstream's Sudoku builder "
            "writes int64 when it augments: build the same set with `python -m trm data build-sudoku`)"
        )
    if len(puzzle_indices) == 0 or puzzle_indices[0] != 0 or np.any(np.diff(puzzle_indices) < 0):
        problems.append("puzzle_indices must start at 0 and never decrease")
    elif puzzle_indices[-1] != len(inputs):
        problems.append(f"puzzle_indices ends at {puzzle_indices[-1]} but there are {len(inputs)} examples")
    if len(group_indices) == 0 or group_indices[0] != 0 or np.any(np.diff(group_indices) < 0):
        problems.append("group_indices must start at 0 and never decrease")
    elif group_indices[-1] != len(identifiers) or len(identifiers) != len(puzzle_indices) - 1:
        problems.append("group_indices, puzzle_identifiers and puzzle_indices disagree on the puzzle count")
    # upstream's Sudoku and Maze builders write the group count as total_puzzles
    if len(group_indices) - 1 != meta.total_groups or meta.total_puzzles not in (
        len(identifiers),
        meta.total_groups,
    ):
        problems.append("dataset.json total_groups/total_puzzles do not match the arrays")
    limit = num_identifiers if num_identifiers is not None else meta.num_puzzle_identifiers
    if len(identifiers) and (identifiers.min() < 0 or identifiers.max() >= limit):
        problems.append(f"puzzle identifiers outside 0..{limit - 1}")
    if problems:
        raise TRMError(f"{where}: not a complete upstream dataset: {'; '.join(problems)}; rebuild it")
    return {"groups": meta.total_groups, "puzzles": meta.total_puzzles, "examples": len(inputs)}


def import_upstream(dataset_dir: str | Path, *, progress: bool = False) -> dict[str, Any]:
    """Check an upstream-built dir (materialized layout) and write `manifest.json` for it."""
    root = Path(dataset_dir)
    if (root / MANIFEST).exists():
        raise TRMError(
            f"{root / MANIFEST}: already exists; check it with `python -m trm data verify {root}` instead"
        )
    ids_path = root / "identifiers.json"
    try:
        identifiers = json.loads(ids_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise TRMError(
            f"{ids_path}: missing or unreadable ({err}); the upstream build did not finish, rebuild it"
        ) from None
    if not isinstance(identifiers, list):
        raise TRMError(f"{ids_path}: expected a JSON list of identifier strings; rebuild the dataset")
    counts = {split: check_split(root, split, len(identifiers)) for split in ("train", "test")}
    counts["identifiers"] = {"total": len(identifiers)}
    return write_manifest(
        root,
        form=formats.MATERIALIZED,
        builder=UPSTREAM_BUILDER,
        args={"imported": True},
        inputs={},
        counts=counts,
        identifiers=identifiers_provenance(upstream_identical=True),  # upstream's own output
    )
