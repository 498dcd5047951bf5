"""Task order and per-task augmentation plans (which variants, which offsets), optionally in processes."""

from __future__ import annotations

import multiprocessing
import sys
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from .arc_source import ArcTask
from .augment import plan_augmentations, plan_translations, task_rng

_AUG_STREAM, _TRANSLATION_STREAM, _ORDER_STREAM = 0, 1, 2


@dataclass
class TaskPlan:
    """A task's place in the dataset: its variants and the train-split translation offsets."""

    task: ArcTask
    is_test: bool  # its test pairs form the test split
    tids: np.ndarray  # uint8 [n_variants]
    cmaps: np.ndarray  # uint8 [n_variants, 10]
    offsets: np.ndarray  # uint8 [n_variants, n_train_split_pairs, 2]

    @property
    def train_pairs(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Pairs in the train split: the demonstrations, plus the test pairs of a non-test subset."""
        return self.task.train if self.is_test else self.task.train + self.task.test

    @property
    def test_pairs(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Pairs in the test split (test subsets only)."""
        return self.task.test if self.is_test else []


def plan_task(job: tuple[ArcTask, bool, int, int]) -> TaskPlan:
    """Variants and offsets of one task from (task, is_test, num_aug, seed) only: safe in any worker."""
    task, is_test, num_aug, seed = job
    plan = plan_augmentations(
        task.train + task.test, num_aug, task_rng(seed, task.subset, task.task_id, _AUG_STREAM)
    )
    train_pairs = task.train if is_test else task.train + task.test
    offsets = plan_translations(
        train_pairs, plan.tids, task_rng(seed, task.subset, task.task_id, _TRANSLATION_STREAM)
    )
    return TaskPlan(task=task, is_test=is_test, tids=plan.tids, cmaps=plan.colour_maps, offsets=offsets)


def ordered_tasks(subsets: list[list[ArcTask]], seed: int) -> list[ArcTask]:
    """Tasks shuffled within each subset (seeded by (seed, subset)), subsets in the given order."""
    ordered = []
    for tasks in subsets:
        if tasks:
            rng = task_rng(seed, tasks[0].subset, "", _ORDER_STREAM)
            ordered.extend(tasks[i] for i in rng.permutation(len(tasks)))
    return ordered


def plan_all(
    tasks: list[ArcTask], test_names: set[str], num_aug: int, seed: int, workers: int, progress: bool
) -> list[TaskPlan]:
    """Plans of all tasks in order; `workers` > 1 uses forked processes (same result)."""
    jobs = [(task, task.subset in test_names, num_aug, seed) for task in tasks]
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
