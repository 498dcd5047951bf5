"""Write a fixed-size puzzle dataset (Sudoku, Maze), compact or in upstream's materialized layout, atomically.

Every puzzle holds one example and all identifiers are the blank one (0), as upstream's Sudoku and Maze
builders write them. Per split: the three int32 index arrays, `dataset.json` (serialized exactly as
upstream's `json.dump`, including its `total_puzzles`, which counts groups) and either
`all__{inputs,labels}.npy` (materialized, uint8 [N, seq_len]) or the recipe arrays of `grid_recipes`
(compact); then `identifiers.json = ["<blank>"]`, and `manifest.json` last.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trm.errors import TRMError
from trm.io import atomic_directory, atomic_write_bytes, remove_dead_leftovers
from trm.safe_remove import check_replaceable

from . import formats
from .grid_recipes import FORM as GRID_COMPACT
from .manifest import MANIFEST, check_files, count_problems, listed_files, read_manifest, write_manifest
from .metadata import DatasetMetadata

IDENTIFIERS = ["<blank>"]
COMPACT, MATERIALIZED = formats.COMPACT, formats.MATERIALIZED


def check_form(form: str) -> None:
    if form not in (COMPACT, MATERIALIZED):
        raise TRMError(f"--form {form!r}: choose compact or materialized")


def grid_form(form: str) -> str:
    """The manifest's form: upstream's materialized layout, or the Sudoku/Maze compact form."""
    return formats.MATERIALIZED if form == MATERIALIZED else GRID_COMPACT


@dataclass(frozen=True)
class EncodedSplit:
    """One split: `group_size` consecutive puzzles (the original, then its augmentations) per group, one example
    each, stored as `arrays`: `inputs`/`labels` (materialized) or the recipe arrays of `grid_recipes`."""

    total: int
    seq_len: int
    group_size: int
    arrays: dict[str, np.ndarray]

    def index_arrays(self) -> dict[str, np.ndarray]:
        return {
            "group_indices": np.arange(0, self.total + 1, self.group_size, dtype=np.int32),
            "puzzle_indices": np.arange(self.total + 1, dtype=np.int32),
            "puzzle_identifiers": np.zeros(self.total, dtype=np.int32),
        }


@dataclass(frozen=True)
class LinkedSplit:
    """A split byte-identical to the same split of an earlier complete dataset (`root`, its `manifest`):
    its files are hard-linked (copied where links cannot be made), their hashes taken from that manifest.
    `build-sweep` writes the shared test split once this way."""

    root: Path
    manifest: dict[str, Any]

    def files(self, split: str) -> dict[str, str]:
        """{relative path: sha256} of the split's files."""
        return {rel: f["sha256"] for rel, f in self.manifest["files"].items() if rel.startswith(f"{split}/")}

    def complete(self, split: str) -> bool:
        files = self.manifest["files"]
        return all(
            (self.root / rel).is_file() and (self.root / rel).stat().st_size == files[rel]["bytes"]
            for rel in self.files(split)
        )

    def link_into(self, tmp: Path, split: str) -> None:
        for rel in self.files(split):
            try:
                os.link(self.root / rel, tmp / rel)
            except OSError:  # another file system, or links not allowed
                shutil.copyfile(self.root / rel, tmp / rel)


class DatasetInTheWay(TRMError):
    """`output_dir` holds another, an incomplete or a damaged dataset: `problem` says which, the message adds
    the builder's fix (its own flags), so that a caller with other flags can give its own."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem}; {fix}")
        self.problem = problem


def existing_dataset(
    output_dir: Path,
    args: dict[str, Any],
    inputs: dict[str, str],
    *,
    overwrite: bool,
    flag: str = "--output-dir",
) -> dict[str, Any] | None:
    """The manifest of a complete dataset already at `output_dir` built from the same args and inputs, else None.

    Raises DatasetInTheWay when `output_dir` holds another dataset, or the same dataset with damaged files
    (truncated, edited, missing), and `overwrite` is not set (with `overwrite` such a dataset is rebuilt), and
    TRMError naming `flag` (what the caller's user calls `output_dir`) when it holds what a builder did not write.
    A build killed after it published the dataset but before it removed the old one left that temp folder
    beside it: it goes first, also when this build then has nothing to do.
    """
    if output_dir.parent.is_dir():
        remove_dead_leftovers(output_dir)
    if not output_dir.exists():
        return None
    manifest = None
    if (output_dir / MANIFEST).is_file():
        try:
            manifest = read_manifest(output_dir)
        except TRMError:
            manifest = None
    if manifest is not None and manifest["args"] == args and manifest.get("inputs") == inputs:
        problems = check_files(output_dir, manifest, full=False)
        if not problems:
            problems = [
                p
                for split in ("train", "test")
                for p in count_problems(manifest, split, _counts(output_dir, split))
            ]
        if not problems:
            return manifest
        if not overwrite:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise DatasetInTheWay(
                f"{output_dir}: holds this dataset but its files do not match its manifest: {problems[0]}{more}",
                f"pass --overwrite to rebuild it, or choose another {flag}",
            )
    check_replaceable(output_dir, kind="dataset", listed_by=listed_files, flag=flag)  # not ours
    if not overwrite:
        raise DatasetInTheWay(
            f"{output_dir}: already exists and holds a different or incomplete dataset",
            f"pass --overwrite to replace it, or choose another {flag}",
        )
    return None


def _counts(root: Path, split: str) -> dict[str, int]:
    """What a split's (verified) index arrays hold, as the manifest counts it."""
    examples = np.load(formats.array_path(root, split, "puzzle_indices"), allow_pickle=False)
    groups = np.load(formats.array_path(root, split, "group_indices"), allow_pickle=False)
    return {"examples": int(examples[-1]), "groups": len(groups) - 1}


def write_dataset(
    output_dir: Path,
    *,
    splits: dict[str, EncodedSplit | LinkedSplit],
    vocab_size: int,
    builder: str,
    args: dict[str, Any],
    inputs: dict[str, str],
    form: str,
    flag: str = "--output-dir",
) -> dict[str, Any]:
    """Write the splits into a temp dir next to `output_dir`, manifest last, then publish it by rename; `flag`:
    what the caller's user calls `output_dir`, named by a refusal."""
    counts: dict[str, dict[str, int]] = {}
    known: dict[str, str] = {}
    with atomic_directory(
        output_dir, overwrite=True, kind="dataset", listed_by=listed_files, flag=flag
    ) as tmp:
        for split, data in splits.items():
            (tmp / split).mkdir()
            if isinstance(data, LinkedSplit):
                data.link_into(tmp, split)
                known.update(data.files(split))
                counts[split] = data.manifest["counts"][split]
                continue
            total = data.total
            metadata = DatasetMetadata(
                pad_id=0,
                ignore_label_id=0,
                blank_identifier_id=0,
                vocab_size=vocab_size,
                seq_len=data.seq_len,
                num_puzzle_identifiers=len(IDENTIFIERS),
                total_groups=total // data.group_size,
                mean_puzzle_examples=1.0,
                # upstream counts groups here (len(group_indices) - 1), not puzzles; kept for identical bytes
                total_puzzles=total // data.group_size,
                sets=[formats.SET],
            )
            atomic_write_bytes(tmp / split / "dataset.json", json.dumps(metadata.to_dict()).encode())
            for name, array in {**data.arrays, **data.index_arrays()}.items():
                np.save(formats.array_path(tmp, split, name), np.ascontiguousarray(array), allow_pickle=False)
            counts[split] = {"groups": metadata.total_groups, "puzzles": total, "examples": total}
        atomic_write_bytes(tmp / "identifiers.json", json.dumps(IDENTIFIERS).encode())
        counts["identifiers"] = {"total": len(IDENTIFIERS)}
        tmp.chmod(0o755)
        for path in tmp.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        manifest = write_manifest(
            tmp, form=form, builder=builder, args=args, inputs=inputs, counts=counts, known_hashes=known
        )
        (tmp / MANIFEST).chmod(0o644)
    return manifest


def subsample(rng: np.random.RandomState, items: int, size: int | None) -> np.ndarray | None:
    """Indices of a random subset of `size` rows (upstream's draw: without replacement), None to keep all."""
    if size is None or size >= items:
        return None
    return rng.choice(items, size=size, replace=False)


def check_sizes(subsample_size: int | None) -> None:
    if subsample_size is not None and subsample_size < 1:
        raise TRMError(
            f"--subsample-size {subsample_size}: must be at least 1 (or left out to keep every row)"
        )


def bad_row(rows_bad: np.ndarray) -> int | None:
    """The first True index of a boolean row mask, or None."""
    hits = np.flatnonzero(rows_bad)
    return int(hits[0]) if len(hits) else None


def chars_outside(codes: np.ndarray, allowed: str) -> np.ndarray:
    """Per row: whether any code is not one of `allowed`."""
    ok = np.zeros(256, dtype=bool)
    ok[np.frombuffer(allowed.encode(), dtype=np.uint8)] = True
    return ~ok[codes].all(axis=1)


def first_char_outside(codes: np.ndarray, allowed: str) -> str:
    """The first character of a row of codes that is not one of `allowed` (a non-ASCII byte as \\xNN)."""
    code = int(codes[chars_outside(codes[:, None], allowed)][0])
    return chr(code) if code < 128 else f"\\x{code:02x}"
