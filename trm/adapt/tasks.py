"""A task file as the ARC dataset builder's input, and its augmented demonstration set.

The challenges file (and solutions, when given) is staged under the builder's input naming
(`<dir>/tasks_adapt_{challenges,solutions}.json`) as one subset that is also the test subset: the
builder then puts every task's demonstrations, augmented, in the train split and its test pairs in the
test split, with the builder's own augmentations, identifiers and encoding. Tasks the builder cannot
take (no demonstrations, a grid it refuses) are left out of the staged file, each with its reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trm.data.arc_source import subset_paths, to_grid
from trm.data.build_arc import build_arc_dataset
from trm.errors import TRMError
from trm.io import atomic_write_text

SUBSET = "adapt"
PREFIX = "tasks"
CHALLENGES_SUFFIX = "_challenges.json"


@dataclass(frozen=True)
class StagedTasks:
    """The staged input prefix, the task ids kept and the tasks left out (id -> why)."""

    prefix: Path
    kept: list[str]
    skipped: dict[str, str]


def default_solutions(challenges: Path) -> Path | None:
    """`X_solutions.json` next to `X_challenges.json` (the builder's naming), when it exists."""
    if not challenges.name.endswith(CHALLENGES_SUFFIX):
        return None
    sibling = challenges.with_name(challenges.name[: -len(CHALLENGES_SUFFIX)] + "_solutions.json")
    return sibling if sibling.is_file() else None


def _read(path: Path, flag: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TRMError(f"{flag} {path}: file not found; pass an ARC task file (Kaggle format)") from None
    except (OSError, ValueError) as err:
        raise TRMError(f"{flag} {path}: not readable JSON ({err}); pass an ARC task file") from None
    if not isinstance(data, dict):
        raise TRMError(f"{flag} {path}: expected an object {{task_id: ...}}; pass an ARC task file")
    return data


def _unusable(task: Any) -> str | None:
    """Why the builder cannot take this task (None: it can)."""
    if not isinstance(task, dict) or not isinstance(task.get("train"), list) or not task["train"]:
        return "no demonstration pairs"
    if not isinstance(task.get("test"), list):
        return "no 'test' list"
    try:
        for i, pair in enumerate(task["train"]):
            to_grid(pair["input"], f"train[{i}].input")
            to_grid(pair["output"], f"train[{i}].output")
        for i, pair in enumerate(task["test"]):
            to_grid(pair["input"], f"test[{i}].input")
    except (TypeError, KeyError):
        return "a pair is not an object with 'input' and 'output'"
    except TRMError as why:
        return str(why).split(";")[0]
    return None


@dataclass(frozen=True)
class SelectedTasks:
    """The usable tasks of a task file (and their solutions), read and checked; nothing written yet."""

    tasks: dict[str, Any]
    answers: dict[str, Any] | None
    skipped: dict[str, str]


def select_tasks(challenges: Path, solutions: Path | None) -> SelectedTasks:
    """Read and check the task file (and solutions): TRMError naming the file and task when none is usable."""
    tasks = _read(challenges, "--challenges")
    answers = _read(solutions, "--solutions") if solutions is not None else None
    skipped = {task_id: why for task_id, task in tasks.items() if (why := _unusable(task)) is not None}
    kept = [task_id for task_id in tasks if task_id not in skipped]
    if not kept:
        first, why = next(iter(skipped.items()), ("-", "the file holds no task"))
        raise TRMError(
            f"--challenges {challenges}: no usable task ({len(skipped)} left out; task {first!r}: {why}); "
            "fix or remove those tasks (grids 1..30 per side, colours 0..9, 'train' pairs), or pass another file"
        )
    if answers is not None:
        missing = [t for t in kept if t not in answers]
        if missing:
            raise TRMError(
                f"--solutions {solutions}: no outputs for task {missing[0]!r} ({len(missing)} missing); pass "
                "the solutions of this task file, or leave --solutions out"
            )
        answers = {t: answers[t] for t in kept}
    return SelectedTasks({t: tasks[t] for t in kept}, answers, skipped)


def only_unseen(selected: SelectedTasks, trained: list[str], challenges: Path) -> SelectedTasks:
    """`selected` without the `trained` tasks (those with trained rows), each left out with its reason;
    TRMError when none is left."""
    if not trained:
        return selected
    kept = [t for t in selected.tasks if t not in set(trained)]
    if not kept:
        raise TRMError(
            f"{challenges}: all {len(selected.tasks)} usable task(s) have trained puzzle-embedding rows in the "
            "checkpoint, so none is unseen; pass a task file the model was not trained on, or score them "
            "without the unseen-only flag"
        )
    why = "trained rows in the checkpoint (only tasks without them are kept)"
    return SelectedTasks(
        {t: selected.tasks[t] for t in kept},
        None if selected.answers is None else {t: selected.answers[t] for t in kept},
        {**selected.skipped, **dict.fromkeys(trained, why)},
    )


def write_tasks(selected: SelectedTasks, inputs_dir: Path) -> StagedTasks:
    """Write the selected tasks (and their solutions) under the builder's naming in `inputs_dir`."""
    inputs_dir.mkdir(parents=True, exist_ok=True)
    prefix = inputs_dir / PREFIX
    staged_challenges, staged_solutions = subset_paths(prefix, SUBSET)
    atomic_write_text(staged_challenges, json.dumps(selected.tasks))
    if selected.answers is not None:
        atomic_write_text(staged_solutions, json.dumps(selected.answers))
    return StagedTasks(prefix, list(selected.tasks), selected.skipped)


def stage_tasks(challenges: Path, solutions: Path | None, inputs_dir: Path) -> StagedTasks:
    """Write the usable tasks (and their solutions) under the builder's naming in `inputs_dir`."""
    return write_tasks(select_tasks(challenges, solutions), inputs_dir)


def build_demonstrations(
    staged: StagedTasks, dataset_dir: Path, *, num_aug: int, seed: int, progress: bool
) -> dict[str, Any]:
    """The builder's dataset of the staged tasks (reused when an identical one is there); its manifest."""
    return build_arc_dataset(
        dataset_dir,
        flag="the adaptation's dataset folder",
        input_file_prefix=staged.prefix,
        subsets=[SUBSET],
        test_set_name=SUBSET,
        seed=seed,
        num_aug=num_aug,
        progress=progress,
    )
