"""The augmented test set of a challenges file, built in memory for inference.

Each test input of each task becomes up to `num_aug` rows: the original, then dihedral × colour variants.
A task present in the bundle's `identifiers.json` (seen in training) uses its trained variants and
embedding rows; any other task gets variants planned like the dataset builder (seeded per task), all on
the bundle's mean "unseen" row — the model never sees demonstrations, so the plan only dedups the test
inputs and such a task scores about zero (`unseen_task_ids` counts them; adaptation, `trm.kaggle.adapt`,
gives them rows first). Tasks that cannot be encoded (a grid over 30×30, colours outside 0..9) get no rows; the
submission still has fallback attempts for them.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trm.data.arc_source import to_grid
from trm.data.augment import plan_augmentations, task_rng
from trm.data.encoding import BLANK_IDENTIFIER, identifier, parse_identifier
from trm.data.render import render_pairs
from trm.errors import TRMError
from trm.evaluation.voting import FALLBACK_GRID

INFERENCE_STREAM = 7  # random stream for planning unseen tasks' variants (any fixed value)


@dataclass
class TaskVariants:
    """Rows of one task: per variant its identifier string and embedding row, inputs [n_var, n_test, 900]."""

    task_id: str
    names: list[str]
    embedding_ids: list[int]
    inputs: np.ndarray


@dataclass
class TestSet:
    """Everything inference needs: submission skeleton, per-task variants, and skipped tasks with reasons."""

    test_puzzles: dict[str, Any]
    tasks: list[TaskVariants]
    skipped: dict[str, str] = field(default_factory=dict)

    def rows(self, rounds: int) -> list[tuple[int, int, int]]:
        """(task index, variant, test index) for variants < rounds, ordered variant-major (round by round)."""
        out = []
        for k in range(rounds):
            for t, task in enumerate(self.tasks):
                if k < len(task.names):
                    out.extend((t, k, j) for j in range(task.inputs.shape[1]))
        return out

    @property
    def max_variants(self) -> int:
        return max((len(t.names) for t in self.tasks), default=0)


def read_challenges(path: str | Path) -> dict[str, Any]:
    """Kaggle's `{task_id: {"train": [...], "test": [{"input": grid}, ...]}}`, structurally checked."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TRMError(f"--challenges {path}: file not found; pass arc-agi_test_challenges.json") from None
    except (OSError, ValueError) as err:
        raise TRMError(
            f"--challenges {path}: not readable JSON ({err}); pass the Kaggle challenges file"
        ) from None
    if not isinstance(data, dict):
        raise TRMError(f"--challenges {path}: expected an object {{task_id: task}}; pass the challenges file")
    for task_id, task in data.items():
        tests = task.get("test") if isinstance(task, dict) else None
        if not isinstance(tests, list) or not all(isinstance(t, dict) and "input" in t for t in tests):
            raise TRMError(
                f"--challenges {path} task {task_id!r}: needs a 'test' list of {{'input': grid}} objects; "
                "fix or remove the task"
            )
    return data


def unseen_task_ids(challenges: dict[str, Any], identifiers: list[str] | None) -> list[str]:
    """The tasks of `challenges` without a trained row in `identifiers` (all of them without identifiers)."""
    trained = _trained_variants(identifiers) if identifiers else {}
    return [task_id for task_id in challenges if task_id not in trained]


def _trained_variants(identifiers: list[str]) -> dict[str, list[tuple[str, int]]]:
    """task id → [(identifier string, row)] in table order (original first, as the builder writes them)."""
    by_task: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for row, name in enumerate(identifiers):
        if name == BLANK_IDENTIFIER:
            continue
        by_task[parse_identifier(name)[0]].append((name, row))
    return by_task


def build_test_set(
    challenges: dict[str, Any],
    *,
    num_aug: int,
    identifiers: list[str] | None,
    unseen_id: int,
    seed: int = 0,
) -> TestSet:
    """Variants of every task (at most `num_aug` each, the original first), rendered at offset (0, 0)."""
    if num_aug < 1:
        raise TRMError(f"--num-aug {num_aug}: must be at least 1 (the original task)")
    trained = _trained_variants(identifiers) if identifiers else {}
    test_puzzles: dict[str, Any] = {}
    tasks: list[TaskVariants] = []
    skipped: dict[str, str] = {}
    for task_id, task in challenges.items():
        test_puzzles[task_id] = {"test": [{"input": t["input"]} for t in task["test"]]}
        try:
            grids = [to_grid(t["input"], f"task {task_id!r} test[{i}]") for i, t in enumerate(task["test"])]
        except TRMError as why:
            skipped[task_id] = str(why).split(";")[0]
            # No votes will exist for this task; a well-formed stand-in input keeps voting's lookups valid.
            test_puzzles[task_id] = {"test": [{"input": FALLBACK_GRID} for _ in task["test"]]}
            continue
        if not grids:
            continue
        seen = trained.get(task_id)
        if seen:
            chosen = seen[:num_aug]
            names = [name for name, _ in chosen]
            rows = [row for _, row in chosen]
            parsed = [parse_identifier(n) for n in names]
            tids = np.array([p[1] for p in parsed], dtype=np.uint8)
            cmaps = np.stack([p[2] if p[2] is not None else np.arange(10) for p in parsed]).astype(np.uint8)
        else:
            plan = plan_augmentations(
                [(g, g) for g in grids], num_aug - 1, task_rng(seed, "inference", task_id, INFERENCE_STREAM)
            )
            tids, cmaps = plan.tids, plan.colour_maps
            names = [
                identifier(task_id, int(t), None if k == 0 else cmap)
                for k, (t, cmap) in enumerate(zip(tids, cmaps, strict=True))
            ]
            rows = [unseen_id] * len(names)
        inputs, _ = render_pairs([(g, g) for g in grids], tids, cmaps, None)  # inputs only matter
        tasks.append(TaskVariants(task_id=task_id, names=names, embedding_ids=rows, inputs=inputs))
    return TestSet(test_puzzles=test_puzzles, tasks=tasks, skipped=skipped)
