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


PlanJob = tuple[list[tuple[np.ndarray, np.ndarray]], int, str, str, int, int]


def plan_task(job: PlanJob) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tids, cmaps, offsets) of one task from (all pairs, #train-split pairs, subset, task id, num_aug,
    seed) only, so it is the same in any worker; jobs and results are small to pickle."""
    pairs, n_train_split, subset, task_id, num_aug, seed = job
    plan = plan_augmentations(pairs, num_aug, task_rng(seed, subset, task_id, _AUG_STREAM))
    offsets = plan_translations(
        pairs[:n_train_split], plan.tids, task_rng(seed, subset, task_id, _TRANSLATION_STREAM)
    )
    return plan.tids, plan.colour_maps, offsets


_FORKED_JOBS: list[PlanJob] = []


def _plan_forked(index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return plan_task(_FORKED_JOBS[index])


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
    is_test = [task.subset in test_names for task in tasks]
    jobs = [
        (task.train + task.test, len(task.train) if test else len(task.train) + len(task.test),
         task.subset, task.task_id, num_aug, seed)
        for task, test in zip(tasks, is_test, strict=True)
    ]  # fmt: skip
    bar = tqdm(total=len(jobs), desc="augment", unit="task", disable=not progress, file=sys.stderr)
    results = []
    if workers > 1 and len(jobs) > 1:
        _FORKED_JOBS[:] = jobs  # forked workers inherit the jobs: only indices and results are pickled
        try:
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                for result in pool.imap(_plan_forked, range(len(jobs)), chunksize=8):
                    results.append(result)
                    bar.update()
        finally:
            _FORKED_JOBS.clear()
    else:
        for job in jobs:
            results.append(plan_task(job))
            bar.update()
    plans = [
        TaskPlan(task=task, is_test=test, tids=tids, cmaps=cmaps, offsets=offsets)
        for task, test, (tids, cmaps, offsets) in zip(tasks, is_test, results, strict=True)
    ]
    bar.close()
    return plans
