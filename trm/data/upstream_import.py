"""Accept a dataset dir built by upstream TinyRecursiveModels or by URM: check its structure, then write a manifest.

URM's builders write upstream's output layout (`<split>/all__<name>.npy`, `<split>/dataset.json`,
`identifiers.json`, `test_puzzles.json`); only the task files they read are named differently
(`<prefix>_<subset>-challenges.json` instead of `_challenges.json`). Their `dataset.json` has no
`total_puzzles`: the import derives it as upstream's ARC builder defines it, the number of puzzles
(`group_indices[-1]`, one per entry of `puzzle_identifiers`), and writes it into that split's `dataset.json`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from trm.errors import TRMError
from trm.io import atomic_write_json

from . import formats
from .manifest import MANIFEST, identifiers_provenance, write_manifest
from .metadata import DatasetMetadata

UPSTREAM_BUILDER = "upstream TinyRecursiveModels (imported by trm-stack)"
URM_BUILDER = "URM (imported by trm-stack; total_puzzles derived from group_indices)"


def read_split_metadata(root: Path, split: str) -> tuple[dict[str, Any], bool]:
    """The split's raw `dataset.json` and whether it lacks `total_puzzles` (URM's builders omit it)."""
    path = root / split / "dataset.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise TRMError(
            f"{path}: missing or unreadable ({err}); the build did not finish, rebuild it"
        ) from None
    if not isinstance(raw, dict):
        raise TRMError(f"{path}: expected a JSON object of dataset metadata; rebuild the dataset")
    return raw, "total_puzzles" not in raw


def check_split(root: Path, split: str, num_identifiers: int | None) -> dict[str, int]:
    """Validate one materialized split's arrays against its dataset.json; returns its counts.

    A `dataset.json` without `total_puzzles` (URM's) is checked with the puzzle count derived from
    `group_indices`; `import_upstream` writes that value back once every split passed."""
    raw, derive = read_split_metadata(root, split)
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
    if derive:
        raw = {**raw, "total_puzzles": int(group_indices[-1]) if len(group_indices) else 0}
    meta = DatasetMetadata.from_dict(raw, str(root / split / "dataset.json"))
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


def check_test_puzzles(root: Path, identifiers: list[Any]) -> None:
    """`test_puzzles.json`, the last file upstream's (and URM's) ARC builder writes: a JSON object. A build
    killed while or before writing it leaves it truncated or absent, so an ARC dir (more identifiers than the
    blank one; Sudoku and Maze builders write only `["<blank>"]` and no such file) without it is incomplete."""
    path = root / "test_puzzles.json"
    if not path.exists():
        if len(identifiers) > 1:
            raise TRMError(
                f"{path}: missing; upstream's ARC builder writes it last, so the build did not finish: rebuild "
                "the dataset, then import it again"
            )
        return
    try:
        puzzles = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise TRMError(
            f"{path}: unreadable ({err}); the upstream build did not finish, rebuild it, then import it again"
        ) from None
    if not isinstance(puzzles, dict):
        raise TRMError(f"{path}: expected a JSON object of test tasks; rebuild the dataset")


def add_total_puzzles(root: Path, split: str, puzzles: int) -> None:
    """Write the derived `total_puzzles` into a URM-built split's `dataset.json` (keys otherwise unchanged)."""
    raw, _ = read_split_metadata(root, split)
    atomic_write_json(root / split / "dataset.json", {**raw, "total_puzzles": puzzles}, indent=None)


def import_upstream(dataset_dir: str | Path, *, progress: bool = False) -> dict[str, Any]:
    """Check an upstream- or URM-built dir (materialized layout) and write `manifest.json` for it.

    Nothing is written unless both splits pass; a URM build's `dataset.json` files gain `total_puzzles`."""
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
    check_test_puzzles(root, identifiers)
    splits = ("train", "test")
    counts = {split: check_split(root, split, len(identifiers)) for split in splits}
    derived = [split for split in splits if read_split_metadata(root, split)[1]]
    for split in derived:
        add_total_puzzles(root, split, counts[split]["puzzles"])
    counts["identifiers"] = {"total": len(identifiers)}
    args: dict[str, Any] = {"imported": True}
    if derived:
        args["derived_total_puzzles"] = derived
    return write_manifest(
        root,
        form=formats.MATERIALIZED,
        builder=URM_BUILDER if derived else UPSTREAM_BUILDER,
        args=args,
        inputs={},
        counts=counts,
        # upstream's own output; URM's ARC builder assigns identifiers exactly as upstream's does
        identifiers=identifiers_provenance(upstream_identical=True),
    )
