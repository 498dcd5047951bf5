"""ARC dataset builder: tasks -> augmentation plans -> a compact or materialized dataset dir, atomically."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

import trm
from trm.errors import TRMError
from trm.io import atomic_directory, atomic_write_bytes, atomic_write_json, atomic_write_text

from . import formats
from .arc_source import DEFAULT_PREFIX, ArcTask, input_checksums, load_subsets
from .augment import plan_augmentations, plan_translations, task_rng
from .encoding import BLANK_IDENTIFIER, GRID_SIZE, ID_SEPARATOR, PAD, SEQ_LEN, VOCAB_SIZE
from .manifest import MANIFEST, read_manifest, read_verified_manifest, write_manifest
from .metadata import DatasetMetadata
from .render import render_task

BUILDER = f"trm-stack {trm.__version__} build-arc"
DEFAULT_SUBSETS = ("training2", "evaluation2", "concept")
_AUG_STREAM, _TRANSLATION_STREAM, _ORDER_STREAM = 0, 1, 2


@dataclass
class TaskPlan:
    """A task's place in the dataset: its variants and the train-split translation offsets."""

    task: ArcTask
    is_test: bool
    tids: np.ndarray
    cmaps: np.ndarray
    offsets: np.ndarray  # [n_variants, n_train_split_pairs, 2]

    @property
    def train_pairs(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return self.task.train if self.is_test else self.task.train + self.task.test

    @property
    def test_pairs(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return self.task.test if self.is_test else []


def plan_task(job: tuple[ArcTask, bool, int, int]) -> TaskPlan:
    """Augmentations and offsets of one task, from (seed, subset, task id) only (safe in any worker)."""
    task, is_test, num_aug, seed = job
    plan = plan_augmentations(
        task.train + task.test, num_aug, task_rng(seed, task.subset, task.task_id, _AUG_STREAM)
    )
    train_pairs = task.train if is_test else task.train + task.test
    offsets = plan_translations(
        train_pairs, plan.tids, task_rng(seed, task.subset, task.task_id, _TRANSLATION_STREAM)
    )
    return TaskPlan(task=task, is_test=is_test, tids=plan.tids, cmaps=plan.colour_maps, offsets=offsets)


def _ordered_tasks(subsets: list[list[ArcTask]], seed: int) -> list[ArcTask]:
    """Tasks shuffled within each subset (seeded by (seed, subset)), subsets in the given order."""
    ordered = []
    for tasks in subsets:
        if tasks:
            rng = task_rng(seed, tasks[0].subset, "", _ORDER_STREAM)
            ordered.extend(tasks[i] for i in rng.permutation(len(tasks)))
    return ordered


def _plan_all(jobs: list[tuple[ArcTask, bool, int, int]], workers: int, progress: bool) -> list[TaskPlan]:
    bar = tqdm(total=len(jobs), desc="augment", unit="task", disable=not progress, file=sys.stderr)
    plans = []
    if workers > 1 and len(jobs) > 1:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            for plan in pool.imap(plan_task, jobs, chunksize=8):
                plans.append(plan)
                bar.update()
    else:
        for job in jobs:
            plans.append(plan_task(job))
            bar.update()
    bar.close()
    return plans


@dataclass
class SplitLayout:
    """Index arrays and recipes of one split."""

    plans: list[TaskPlan]
    pairs: list[list[tuple[np.ndarray, np.ndarray]]]
    first_ids: np.ndarray  # per group: identifier of its first puzzle

    def arrays(self, grid_ids: list[list[tuple[int, int]]], with_offsets: bool) -> dict[str, np.ndarray]:
        sizes = np.array([len(p.tids) for p in self.plans], dtype=np.int64)
        per_puzzle = np.repeat(np.array([len(x) for x in self.pairs], dtype=np.int64), sizes)
        pair_counts = np.array([len(x) for x in self.pairs], dtype=np.int64)
        empty_offsets = np.zeros((0, 2), dtype=np.uint8)
        return {
            "puzzle_identifiers": np.concatenate(
                [first + np.arange(n) for first, n in zip(self.first_ids, sizes, strict=True)]
                or [np.zeros(0)]
            ).astype(np.int32),
            "puzzle_indices": np.concatenate([[0], np.cumsum(per_puzzle)]).astype(np.int32),
            "group_indices": np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32),
            "puzzle_dihedral": np.concatenate([p.tids for p in self.plans] or [np.zeros(0)]).astype(np.uint8),
            "puzzle_colours": np.concatenate([p.cmaps for p in self.plans] or [np.zeros((0, 10))]).astype(
                np.uint8
            ),
            "example_offsets": (
                np.concatenate([p.offsets.reshape(-1, 2) for p in self.plans] or [empty_offsets])
                if with_offsets
                else np.zeros((int(per_puzzle.sum()), 2))
            ).astype(np.uint8),
            "group_pair_indices": np.concatenate([[0], np.cumsum(pair_counts)]).astype(np.int32),
            "pair_grids": np.array([ids for group in grid_ids for ids in group], dtype=np.int32).reshape(
                -1, 2
            ),
        }


def _metadata(arrays: dict[str, np.ndarray], num_identifiers: int) -> DatasetMetadata:
    puzzles = len(arrays["puzzle_identifiers"])
    examples = int(arrays["puzzle_indices"][-1])
    return DatasetMetadata(
        pad_id=PAD,
        ignore_label_id=PAD,
        blank_identifier_id=0,
        vocab_size=VOCAB_SIZE,
        seq_len=SEQ_LEN,
        num_puzzle_identifiers=num_identifiers,
        total_groups=len(arrays["group_indices"]) - 1,
        mean_puzzle_examples=examples / puzzles if puzzles else 0.0,
        total_puzzles=puzzles,
        sets=[formats.SET],
    )


def _identifiers_json(plans: Iterable[TaskPlan], blanks: int) -> bytes:
    """identifiers.json bytes: `blanks` × "<blank>", then per task its original id and `id|||tN|||digits`."""
    parts = [json.dumps([BLANK_IDENTIFIER] * blanks)[:-1].encode()]
    for plan in plans:
        task = json.dumps(plan.task.task_id)  # quoted and escaped
        parts.append(f", {task}".encode())
        n = len(plan.tids) - 1
        if n == 0:
            continue
        head = f", {task[:-1]}{ID_SEPARATOR}t".encode()
        rows = np.empty((n, len(head) + 1 + len(ID_SEPARATOR) + 10 + 1), dtype=np.uint8)
        rows[:, : len(head)] = np.frombuffer(head, dtype=np.uint8)
        rows[:, len(head)] = plan.tids[1:] + ord("0")
        rows[:, len(head) + 1 : len(head) + 4] = np.frombuffer(ID_SEPARATOR.encode(), dtype=np.uint8)
        rows[:, len(head) + 4 : len(head) + 14] = plan.cmaps[1:] + ord("0")
        rows[:, -1] = ord('"')
        parts.append(rows.tobytes())
    parts.append(b"]\n")
    return b"".join(parts)


def _rendered_blocks(
    layout: SplitLayout, with_offsets: bool, workers: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(inputs, labels) rows of each group in order, rendered by a thread pool a few groups ahead.

    numpy releases the GIL inside the scatter/gather kernels, so threads overlap with each other and
    with the caller's hashing and file writes (which release it too).
    """

    def render(i: int) -> tuple[np.ndarray, np.ndarray]:
        plan, pairs = layout.plans[i], layout.pairs[i]
        offsets = plan.offsets if with_offsets else None
        return tuple(
            render_task([pair[side] for pair in pairs], plan.tids, plan.cmaps, offsets).reshape(-1, SEQ_LEN)
            for side in (0, 1)
        )

    with ThreadPoolExecutor(max_workers=max(workers, 1)) as pool:
        pending: deque = deque()
        for i in range(len(layout.plans)):
            pending.append(pool.submit(render, i))
            if len(pending) > 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _write_materialized(
    root: Path, split: str, layout: SplitLayout, total: int, workers: int, progress: bool
) -> dict[str, str]:
    """Stream all__inputs/all__labels group by group; returns their sha256s (keyed by relative path)."""
    writers = [
        formats.NpyStreamWriter(formats.array_path(root, split, name), (total, SEQ_LEN), np.uint8)
        for name in formats.MATERIALIZED_FIELDS
    ]
    blocks = _rendered_blocks(layout, split == "train", workers)
    bar = tqdm(
        blocks,
        total=len(layout.plans),
        desc=f"write {split}",
        unit="task",
        disable=not progress,
        file=sys.stderr,
    )
    for inputs, labels in bar:
        writers[0].write(inputs)
        writers[1].write(labels)
    return {f"{split}/{w.path.name}": w.close() for w in writers}


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
    puzzle_identifiers_start: int = 1,
    form: str = formats.COMPACT,
    workers: int = 0,
    overwrite: bool = False,
    progress: bool = False,
) -> dict[str, Any]:
    """Build an ARC dataset dir (TRM_SPEC §8 semantics) and return its manifest.

    Deterministic: the same inputs and arguments give the same bytes for any `workers` (0 = auto). Atomic: built in a
    temporary directory next to `output_dir`, renamed at the end, `manifest.json` written last. An existing
    complete dataset with the same arguments and inputs is left as is.
    """
    output_dir = Path(output_dir)
    prefix = Path(input_file_prefix) if input_file_prefix is not None else DEFAULT_PREFIX
    subsets = list(subsets)
    if form not in formats.FORMS:
        raise TRMError(f"--form {form!r}: choose one of {', '.join(formats.FORMS)}")
    if num_aug < 0 or (max_puzzles is not None and max_puzzles < 1) or puzzle_identifiers_start < 1:
        raise TRMError("--num-aug must be >= 0, --max-puzzles >= 1 and --puzzle-identifiers-start >= 1")
    if len(set(subsets)) != len(subsets) or not subsets:
        raise TRMError(f"--subsets {' '.join(subsets)}: name each subset once (at least one)")
    args = {
        "subsets": subsets,
        "test_set_name": test_set_name,
        "test_set_name2": test_set_name2,
        "seed": seed,
        "num_aug": num_aug,
        "max_puzzles": max_puzzles,
        "puzzle_identifiers_start": puzzle_identifiers_start,
        "form": form,
    }
    inputs = input_checksums(prefix, subsets)
    if output_dir.exists():
        existing = _existing_manifest(output_dir)
        if existing is not None and existing["args"] == args and existing.get("inputs") == inputs:
            read_verified_manifest(output_dir)
            return existing
        if not overwrite:
            raise TRMError(
                f"{output_dir}: already exists and holds a different or incomplete dataset; "
                "pass --overwrite to replace it, or choose another --output-dir"
            )
    if not _has_test_subset(subsets, test_set_name, test_set_name2):
        raise TRMError(
            f"--test-set-name {test_set_name!r} (and --test-set-name2 {test_set_name2!r}) is not one of --subsets "
            f"{' '.join(subsets)}: the test split would be empty; name the evaluation subset, e.g. "
            "--test-set-name evaluation2"
        )
    tasks = _ordered_tasks(load_subsets(prefix, subsets, max_puzzles), seed)
    test_names = {test_set_name, test_set_name2}
    for task in tasks:
        if not task.train:
            raise TRMError(
                f"{prefix}_{task.subset}_challenges.json task {task.task_id!r}: no train pairs; fix or remove it"
            )
    if workers <= 0:  # auto: one process per core (up to 8) when there is enough work to share
        workers = min(os.cpu_count() or 1, 8) if len(tasks) * max(num_aug, 1) >= 20000 else 1
    plans = _plan_all([(t, t.subset in test_names, num_aug, seed) for t in tasks], workers, progress)

    # Identifiers: train split first, in group order; test puzzles reuse the train ids of the same variants.
    sizes = np.array([len(p.tids) for p in plans], dtype=np.int64)
    first_ids = puzzle_identifiers_start + np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    num_identifiers = puzzle_identifiers_start + int(sizes.sum())
    # Grid ids: every pair of every task, in task order (train pairs, then test pairs).
    grids, grid_ids, next_id = [], [], 0
    for plan in plans:
        ids = []
        for inp, out in plan.task.train + plan.task.test:
            grids.extend((inp, out))
            ids.append((next_id, next_id + 1))
            next_id += 2
        grid_ids.append(ids)
    n_demo = [len(p.task.train) for p in plans]
    test_idx = [i for i, p in enumerate(plans) if p.is_test]
    layouts = {
        "train": (
            SplitLayout(plans, [p.train_pairs for p in plans], first_ids),
            [g if not p.is_test else g[:n] for g, p, n in zip(grid_ids, plans, n_demo, strict=True)],
        ),
        "test": (
            SplitLayout(
                [plans[i] for i in test_idx], [plans[i].test_pairs for i in test_idx], first_ids[test_idx]
            ),
            [grid_ids[i][n_demo[i] :] for i in test_idx],
        ),
    }

    counts: dict[str, dict[str, int]] = {}
    with atomic_directory(output_dir, overwrite=True) as tmp:
        known_hashes: dict[str, str] = {}
        for split, (layout, split_grid_ids) in layouts.items():
            (tmp / split).mkdir()
            arrays = layout.arrays(split_grid_ids, with_offsets=split == "train")
            metadata = _metadata(arrays, num_identifiers)
            keep = formats.INDEX_FIELDS + (formats.COMPACT_FIELDS if form == formats.COMPACT else ())
            for name in keep:
                np.save(formats.array_path(tmp, split, name), arrays[name], allow_pickle=False)
            total = int(arrays["puzzle_indices"][-1])
            if form == formats.MATERIALIZED:
                known_hashes.update(_write_materialized(tmp, split, layout, total, max(workers, 2), progress))
            atomic_write_json(tmp / split / "dataset.json", metadata.to_dict())
            counts[split] = {
                "groups": metadata.total_groups,
                "puzzles": metadata.total_puzzles,
                "examples": total,
            }
        if form == formats.COMPACT:
            padded = np.zeros((len(grids), GRID_SIZE, GRID_SIZE), dtype=np.uint8)
            shapes = np.zeros((len(grids), 2), dtype=np.uint8)
            for i, grid in enumerate(grids):
                padded[i, : grid.shape[0], : grid.shape[1]] = grid
                shapes[i] = grid.shape
            np.save(tmp / formats.GRIDS, padded, allow_pickle=False)
            np.save(tmp / formats.GRID_SHAPES, shapes, allow_pickle=False)
        atomic_write_bytes(tmp / "identifiers.json", _identifiers_json(plans, puzzle_identifiers_start))
        test_puzzles = {plans[i].task.task_id: plans[i].task.raw for i in test_idx}
        atomic_write_text(tmp / "test_puzzles.json", json.dumps(test_puzzles) + "\n")
        counts["identifiers"] = {"total": num_identifiers}
        counts["tasks"] = {subset: sum(1 for t in tasks if t.subset == subset) for subset in subsets}
        short = sizes < num_aug + 1
        counts["augmentation"] = {
            "tasks_short_of_target": int(short.sum()),
            "min_variants": int(sizes.min()) if len(sizes) else 0,
        }
        _make_readable(tmp)
        manifest = write_manifest(
            tmp,
            form=form,
            builder=BUILDER,
            args=args,
            inputs=inputs,
            counts=counts,
            known_hashes=known_hashes,
        )
        (tmp / MANIFEST).chmod(0o644)
    return manifest


def _has_test_subset(subsets: Sequence[str], test_set_name: str, test_set_name2: str) -> bool:
    """Whether at least one subset feeds the test split."""
    return test_set_name in subsets or test_set_name2 in subsets


def _make_readable(root: Path) -> None:
    """Temp files are created private; a published dataset is world-readable like any build output."""
    root.chmod(0o755)
    for path in root.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)


def _existing_manifest(output_dir: Path) -> dict[str, Any] | None:
    if not (output_dir / MANIFEST).is_file():
        return None
    try:
        return read_manifest(output_dir)
    except TRMError:
        return None
