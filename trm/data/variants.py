"""Each task's variants (dihedral id and colour map per puzzle) and train-split offsets, drawn as upstream does.

All draws come from one `LegacyWords` stream seeded like upstream's `np.random.seed(seed)`, in upstream's
order: per subset (in --subsets order) a shuffle of its tasks, then each task's augmentation tries in the
shuffled order; after all tasks, the train split's anchors and offsets, then the test split's anchors. The
draws are cheap and sequential; rendering the examples they describe is left to the writers.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from .arc_source import ArcTask
from .legacy_draws import LegacyWords, draw_offsets, draw_variants, skip_anchors


@dataclass
class TaskVariants:
    """A task's puzzles (row 0 the original) and the train-split translation offsets of their examples."""

    task: ArcTask
    is_test: bool  # its test pairs form the test split
    tids: np.ndarray  # uint8 [n_variants]
    cmaps: np.ndarray  # uint8 [n_variants, 10]
    offsets: np.ndarray  # uint8 [n_variants, n_train_split_pairs, 2]

    @property
    def train_pairs(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Pairs in the train split: the demonstrations, plus the test pairs of a non-test subset (in the
        order of the task's JSON keys, as upstream)."""
        task = self.task
        if self.is_test:
            return task.train
        return task.test + task.train if task.test_first else task.train + task.test

    @property
    def test_pairs(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Pairs in the test split (test subsets only)."""
        return self.task.test if self.is_test else []


def draw_all_variants(
    subsets: list[list[ArcTask]], test_names: set[str], num_aug: int, seed: int, progress: bool = False
) -> list[TaskVariants]:
    """Every task's variants and offsets in upstream's processing order (subsets in order, tasks shuffled)."""
    words = LegacyWords(seed)
    total = sum(len(tasks) for tasks in subsets)
    bar = tqdm(total=total, desc="augment", unit="task", disable=not progress, file=sys.stderr)
    result = []
    for tasks in subsets:
        for index in words.shuffled(len(tasks)):
            task = tasks[index]
            tids, cmaps = draw_variants(words, task.train + task.test, num_aug)
            result.append(TaskVariants(task, task.subset in test_names, tids, cmaps, np.zeros(0)))
            bar.update()
    bar.close()
    for item in result:  # the train split comes first in upstream's output loop
        item.offsets = draw_offsets(words, item.train_pairs, item.tids)
    for item in result:
        if item.is_test:
            skip_anchors(words, len(item.test_pairs), len(item.tids))
    return result
