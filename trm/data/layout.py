"""From task variants to a dataset's arrays: index arrays, recipes, grid store, metadata and identifiers."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from . import formats
from .encoding import BLANK_IDENTIFIER, GRID_SIZE, ID_SEPARATOR, PAD, SEQ_LEN, VOCAB_SIZE
from .metadata import DatasetMetadata
from .variants import TaskVariants


@dataclass
class SplitLayout:
    """One split: its groups (task variants), each group's pairs and their grid ids, and first identifiers."""

    name: str
    variants: list[TaskVariants]
    pairs: list[list[tuple[np.ndarray, np.ndarray]]]
    grid_ids: list[list[tuple[int, int]]]
    first_ids: np.ndarray  # per group: identifier of its first puzzle (the original task)

    @property
    def translated(self) -> bool:
        """Only the train split gets translation offsets."""
        return self.name == "train"

    def arrays(self) -> dict[str, np.ndarray]:
        """Upstream's index arrays plus the compact form's recipe arrays."""
        sizes = np.array([len(p.tids) for p in self.variants], dtype=np.int64)
        pair_counts = np.array([len(x) for x in self.pairs], dtype=np.int64)
        per_puzzle = np.repeat(pair_counts, sizes)
        n_examples = int(per_puzzle.sum())
        if self.translated:
            offsets = np.concatenate([p.offsets.reshape(-1, 2) for p in self.variants] or [np.zeros((0, 2))])
        else:
            offsets = np.zeros((n_examples, 2))
        ids = [first + np.arange(n) for first, n in zip(self.first_ids, sizes, strict=True)]
        return {
            "puzzle_identifiers": np.concatenate(ids or [np.zeros(0)]).astype(np.int32),
            "puzzle_indices": np.concatenate([[0], np.cumsum(per_puzzle)]).astype(np.int32),
            "group_indices": np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32),
            "puzzle_dihedral": np.concatenate([p.tids for p in self.variants] or [np.zeros(0)]).astype(
                np.uint8
            ),
            "puzzle_colours": np.concatenate([p.cmaps for p in self.variants] or [np.zeros((0, 10))]).astype(
                np.uint8
            ),
            "example_offsets": offsets.astype(np.uint8),
            "group_pair_indices": np.concatenate([[0], np.cumsum(pair_counts)]).astype(np.int32),
            "pair_grids": np.array([g for group in self.grid_ids for g in group], dtype=np.int32).reshape(
                -1, 2
            ),
        }


def split_layouts(variants: list[TaskVariants], identifiers_start: int) -> dict[str, SplitLayout]:
    """Train split: every task; test split: the test subsets' tasks, reusing the train identifiers."""
    sizes = np.array([len(p.tids) for p in variants], dtype=np.int64)
    first_ids = identifiers_start + np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    grid_ids, next_id = [], 0  # every pair of every task, in task order (train pairs, then test pairs)
    for item in variants:
        n = len(item.task.train) + len(item.task.test)
        grid_ids.append([(next_id + 2 * i, next_id + 2 * i + 1) for i in range(n)])
        next_id += 2 * n
    demos = [len(p.task.train) for p in variants]
    test = [i for i, p in enumerate(variants) if p.is_test]
    train_grids = []  # grid ids of each task's train-split pairs, in `TaskVariants.train_pairs` order
    for g, p, n in zip(grid_ids, variants, demos, strict=True):
        train_grids.append(g[:n] if p.is_test else g[n:] + g[:n] if p.task.test_first else g)
    return {
        "train": SplitLayout("train", variants, [p.train_pairs for p in variants], train_grids, first_ids),
        "test": SplitLayout(
            "test",
            [variants[i] for i in test],
            [variants[i].test_pairs for i in test],
            [grid_ids[i][demos[i] :] for i in test],
            first_ids[test],
        ),
    }


def num_identifiers(variants: list[TaskVariants], identifiers_start: int) -> int:
    """Identifier count including the reserved ids below `identifiers_start` (0 = blank)."""
    return identifiers_start + sum(len(p.tids) for p in variants)


def split_metadata(arrays: dict[str, np.ndarray], identifiers: int) -> DatasetMetadata:
    """`dataset.json` of a split with these arrays."""
    puzzles = len(arrays["puzzle_identifiers"])
    examples = int(arrays["puzzle_indices"][-1])
    return DatasetMetadata(
        pad_id=PAD,
        ignore_label_id=PAD,
        blank_identifier_id=0,
        vocab_size=VOCAB_SIZE,
        seq_len=SEQ_LEN,
        num_puzzle_identifiers=identifiers,
        total_groups=len(arrays["group_indices"]) - 1,
        mean_puzzle_examples=examples / puzzles if puzzles else 0.0,
        total_puzzles=puzzles,
        sets=[formats.SET],
    )


def grid_store(variants: list[TaskVariants]) -> tuple[np.ndarray, np.ndarray]:
    """(grids uint8 [n, 30, 30] zero-padded, shapes uint8 [n, 2]) in the grid-id order of `split_layouts`."""
    grids = [g for p in variants for pair in p.task.train + p.task.test for g in pair]
    padded = np.zeros((len(grids), GRID_SIZE, GRID_SIZE), dtype=np.uint8)
    shapes = np.zeros((len(grids), 2), dtype=np.uint8)
    for i, grid in enumerate(grids):
        padded[i, : grid.shape[0], : grid.shape[1]] = grid
        shapes[i] = grid.shape
    return padded, shapes


def identifiers_json(variants: list[TaskVariants], blanks: int) -> bytes:
    """identifiers.json: `blanks` × "<blank>", then per task its original id and each `id|||tN|||digits`."""
    parts = [json.dumps([BLANK_IDENTIFIER] * blanks)[:-1].encode()]
    for item in variants:
        task = json.dumps(item.task.task_id)  # quoted and escaped
        parts.append(f", {task}".encode())
        n = len(item.tids) - 1
        if n == 0:
            continue
        # Fixed-width rows `, "<task>|||t<d>|||<10 digits>"` built as one byte matrix per task.
        head = f", {task[:-1]}{ID_SEPARATOR}t".encode()
        sep = ID_SEPARATOR.encode()
        rows = np.empty((n, len(head) + 1 + len(sep) + 10 + 1), dtype=np.uint8)
        rows[:, : len(head)] = np.frombuffer(head, dtype=np.uint8)
        rows[:, len(head)] = item.tids[1:] + ord("0")
        rows[:, len(head) + 1 : len(head) + 1 + len(sep)] = np.frombuffer(sep, dtype=np.uint8)
        rows[:, len(head) + 1 + len(sep) : -1] = item.cmaps[1:] + ord("0")
        rows[:, -1] = ord('"')
        parts.append(rows.tobytes())
    parts.append(b"]")  # no newline, as upstream writes it
    return b"".join(parts)
