"""ARC dataset builder: validate inputs, draw variants as upstream does, write a compact or materialized dir."""

from __future__ import annotations

import json
import os
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import trm
from trm.errors import TRMError
from trm.io import atomic_directory, atomic_write_bytes, atomic_write_text

from . import formats
from .arc_source import DEFAULT_PREFIX, ArcTask, input_checksums, load_subsets
from .grid_dataset import existing_dataset
from .layout import SplitLayout, grid_store, identifiers_json, num_identifiers, split_layouts, split_metadata
from .manifest import MANIFEST, identifiers_provenance, listed_files, write_manifest
from .materialize import write_examples
from .variants import TaskVariants, draw_all_variants

BUILDER = f"trm-stack {trm.__version__} build-arc"
# How variants and offsets are drawn; part of `args`, so a dataset drawn otherwise is rebuilt, not reused.
DRAWS = "upstream-legacy-numpy"
DEFAULT_SUBSETS = ("training2", "evaluation2", "concept")
UPSTREAM_PREFIX = "kaggle/combined/arc-agi"  # upstream's input prefix, relative to its checkout
# Process workers pay off only for large builds (tasks × augmentations).
_AUTO_WORKERS_MIN_WORK = 20000


def build_arc_dataset(
    output_dir: str | Path,
    *,
    input_file_prefix: str | Path | None = None,
    subsets: Sequence[str] = DEFAULT_SUBSETS,
    test_set_name: str = "evaluation2",
    test_set_name2: str = "your_test_set",
    seed: int = 42,
    num_aug: int = 1000,
    max_puzzles: int | None = None,
    subsample_size: int | None = None,
    puzzle_identifiers_start: int = 1,
    form: str = formats.COMPACT,
    workers: int = 0,
    overwrite: bool = False,
    progress: bool = False,
    flag: str = "--output-dir",
) -> dict[str, Any]:
    """Build an ARC dataset dir (the semantics of upstream's dataset/build_arc_dataset.py) and return its manifest.

    Byte-identical to upstream's builder for the same inputs and flags (every file upstream writes; the
    compact form holds the same index files and renders the same examples). Deterministic for any
    `workers` (0 = auto). Atomic: built in a temporary directory next to `output_dir`, renamed at the end,
    `manifest.json` written last. An existing complete dataset with the same arguments and inputs is left as is;
    another one raises DatasetInTheWay, a folder a builder did not write a TRMError naming `flag` (what the
    caller's user calls `output_dir`).

    `subsample_size` keeps N tasks of each training subset (every subset but the test ones), drawn at random
    from a generator seeded by (`seed`, subset name) and kept in file order; the draws of upstream's
    semantics then run on what is kept. `max_puzzles` (the first N tasks) applies before it.
    """
    output_dir = Path(output_dir)
    prefix = resolve_prefix(input_file_prefix)
    subsets = list(subsets)
    args = _checked_args(
        subsets, test_set_name, test_set_name2, seed, num_aug, max_puzzles, puzzle_identifiers_start, form
    )
    if subsample_size is not None:  # recorded only when given: the default args stay as they were
        if subsample_size < 1:
            raise TRMError(
                f"--subsample-size {subsample_size}: must be at least 1 (or left out to keep every task)"
            )
        args["subsample_size"] = subsample_size
    inputs = input_checksums(prefix, subsets)
    existing = existing_dataset(output_dir, args, inputs, overwrite=overwrite, flag=flag)
    if existing is not None:
        return existing
    test_names = {test_set_name, test_set_name2}
    loaded = _load_tasks(prefix, subsets, max_puzzles, test_names)
    if subsample_size is not None:
        loaded = [
            tasks
            if tasks and tasks[0].subset in test_names
            else subsample_tasks(tasks, subset, subsample_size, seed)
            for subset, tasks in zip(subsets, loaded, strict=True)
        ]
    tasks = draw_all_variants(loaded, test_names, num_aug, seed, progress)
    if workers <= 0:  # auto: one render thread per core (up to 8) when there is enough work to share
        workers = min(os.cpu_count() or 1, 8) if len(tasks) * max(num_aug, 1) >= _AUTO_WORKERS_MIN_WORK else 1
    identifiers = num_identifiers(tasks, puzzle_identifiers_start)
    with atomic_directory(
        output_dir, overwrite=True, kind="dataset", listed_by=listed_files, flag=flag
    ) as tmp:
        counts: dict[str, dict[str, int]] = {}
        known_hashes: dict[str, str] = {}
        for split, layout in split_layouts(tasks, puzzle_identifiers_start).items():
            counts[split] = _write_split(tmp, layout, form, identifiers, workers, progress, known_hashes)
        _write_shared_files(tmp, tasks, form, puzzle_identifiers_start)
        counts.update(_summary_counts(tasks, subsets, identifiers, num_aug))
        _make_readable(tmp)
        manifest = write_manifest(
            tmp,
            form=form,
            builder=BUILDER,
            args=args,
            inputs=inputs,
            counts=counts,
            known_hashes=known_hashes,
            identifiers=identifiers_provenance(upstream_identical=True),
        )
        (tmp / MANIFEST).chmod(0o644)
    return manifest


def _checked_args(
    subsets: list[str],
    test_set_name: str,
    test_set_name2: str,
    seed: int,
    num_aug: int,
    max_puzzles: int | None,
    puzzle_identifiers_start: int,
    form: str,
) -> dict[str, Any]:
    """Validate the flags; returns the manifest's `args` (what a rebuild must match to be skipped)."""
    if form not in formats.FORMS:
        raise TRMError(f"--form {form!r}: choose one of {', '.join(formats.FORMS)}")
    if num_aug < 0 or (max_puzzles is not None and max_puzzles < 1) or puzzle_identifiers_start < 1:
        raise TRMError("--num-aug must be >= 0, --max-puzzles >= 1 and --puzzle-identifiers-start >= 1")
    if not 0 <= seed < 2**32:
        raise TRMError(f"--seed {seed}: numpy's legacy seed (as upstream's) must be in 0..2**32-1")
    if len(set(subsets)) != len(subsets) or not subsets:
        raise TRMError(f"--subsets {' '.join(subsets)}: name each subset once (at least one)")
    if not _has_test_subset(subsets, test_set_name, test_set_name2):
        raise TRMError(
            f"--test-set-name {test_set_name!r} (and --test-set-name2 {test_set_name2!r}) is not one of --subsets "
            f"{' '.join(subsets)}: the test split would be empty; name the evaluation subset, e.g. "
            "--test-set-name evaluation2"
        )
    return {
        "subsets": subsets,
        "test_set_name": test_set_name,
        "test_set_name2": test_set_name2,
        "seed": seed,
        "num_aug": num_aug,
        "max_puzzles": max_puzzles,
        "puzzle_identifiers_start": puzzle_identifiers_start,
        "form": form,
        "draws": DRAWS,
    }


def subsample_tasks(tasks: list[ArcTask], subset: str, size: int, seed: int) -> list[ArcTask]:
    """`size` random tasks of one subset (all when it has no more), in file order; the draw depends only on
    (seed, subset name), so it does not change with the other subsets or their order."""
    if size >= len(tasks):
        return tasks
    rng = np.random.default_rng([seed, zlib.crc32(subset.encode())])
    return [tasks[i] for i in sorted(rng.choice(len(tasks), size=size, replace=False).tolist())]


def _load_tasks(
    prefix: Path, subsets: list[str], max_puzzles: int | None, test_names: set[str]
) -> list[list[ArcTask]]:
    """Tasks per subset in file order; every puzzle needs train-split pairs, a test task test pairs."""
    loaded = load_subsets(prefix, subsets, max_puzzles)
    for task in (t for tasks in loaded for t in tasks):
        if not task.train:
            raise TRMError(
                f"{prefix}_{task.subset}_challenges.json task {task.task_id!r}: no train pairs; fix or remove it"
            )
        if task.subset in test_names and not task.test:
            raise TRMError(
                f"{prefix}_{task.subset}_challenges.json task {task.task_id!r}: no test pairs in a test subset; "
                "fix or remove it"
            )
    return loaded


def _write_split(
    tmp: Path,
    layout: SplitLayout,
    form: str,
    identifiers: int,
    workers: int,
    progress: bool,
    known_hashes: dict[str, str],
) -> dict[str, int]:
    """One split's arrays (and rendered examples for the materialized form) and `dataset.json`; its counts."""
    (tmp / layout.name).mkdir()
    arrays = layout.arrays()
    keep = formats.INDEX_FIELDS + (formats.COMPACT_FIELDS if form == formats.COMPACT else ())
    for name in keep:
        np.save(formats.array_path(tmp, layout.name, name), arrays[name], allow_pickle=False)
    total = int(arrays["puzzle_indices"][-1])
    if form == formats.MATERIALIZED:
        known_hashes.update(write_examples(tmp, layout, total, max(workers, 2), progress))
    metadata = split_metadata(arrays, identifiers)
    atomic_write_text(tmp / layout.name / "dataset.json", json.dumps(metadata.to_dict()))
    return {"groups": metadata.total_groups, "puzzles": metadata.total_puzzles, "examples": total}


def _write_shared_files(tmp: Path, tasks: list[TaskVariants], form: str, identifiers_start: int) -> None:
    """`identifiers.json`, `test_puzzles.json` (as upstream writes them) and the compact form's grid store."""
    if form == formats.COMPACT:
        padded, shapes = grid_store(tasks)
        np.save(tmp / formats.GRIDS, padded, allow_pickle=False)
        np.save(tmp / formats.GRID_SHAPES, shapes, allow_pickle=False)
    atomic_write_bytes(tmp / "identifiers.json", identifiers_json(tasks, identifiers_start))
    test_puzzles = {t.task.task_id: t.task.raw for t in tasks if t.is_test}
    atomic_write_text(tmp / "test_puzzles.json", json.dumps(test_puzzles))


def _summary_counts(
    tasks: list[TaskVariants], subsets: list[str], identifiers: int, num_aug: int
) -> dict[str, dict[str, int]]:
    """Identifier, per-subset task and augmentation-shortfall counts for the manifest."""
    sizes = np.array([len(t.tids) for t in tasks], dtype=np.int64)
    return {
        "identifiers": {"total": identifiers},
        "tasks": {subset: sum(1 for t in tasks if t.task.subset == subset) for subset in subsets},
        "augmentation": {
            "tasks_short_of_target": int((sizes < num_aug + 1).sum()),
            "min_variants": int(sizes.min()) if len(sizes) else 0,
        },
    }


def resolve_prefix(input_file_prefix: str | Path | None) -> Path:
    """The input prefix; upstream's `kaggle/combined/arc-agi` means the shipped (byte-identical) copy."""
    if input_file_prefix is None:
        return DEFAULT_PREFIX
    prefix = Path(input_file_prefix)
    if prefix.as_posix().endswith(UPSTREAM_PREFIX) and not prefix.parent.is_dir():
        print(
            f"note: {prefix} not found; using the shipped copy of upstream's {UPSTREAM_PREFIX}_* files",
            file=sys.stderr,
        )
        return DEFAULT_PREFIX
    return prefix


def _has_test_subset(subsets: Sequence[str], test_set_name: str, test_set_name2: str) -> bool:
    """Whether at least one subset feeds the test split."""
    return test_set_name in subsets or test_set_name2 in subsets


def _make_readable(root: Path) -> None:
    """Temp files are created private; a published dataset is world-readable like any build output."""
    root.chmod(0o755)
    for path in root.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
