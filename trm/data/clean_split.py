"""The clean evaluation split of a data audit: the test tasks that overlap no training task.

A test task is clean when none of its test pairs, test inputs or test outputs occurs in a training task
other than itself, exactly or up to the dataset's augmentations (a dihedral transform and a permutation of
colours 1-9), and the task as a whole duplicates no other task: the overlaps `trm.data.audit` finds, read
from its report, nothing computed twice. A match inside the test task's own demonstrations is no overlap
with another task; it says the task repeats itself.

Whether a clean task also has trained puzzle-embedding rows is recorded per task (`trained_rows`): the
training side holds its demonstrations under its task id, so a checkpoint trained there has rows for it
and scores it the way it scores a task it saw. The honest measurement of how a bundle meets a hidden test
set is the clean tasks without trained rows (`trm.eval --adapt-unseen-only` keeps exactly those).

The clean tasks are written as ARC's Kaggle pair, copied verbatim from the challenges and solutions files
the dataset was built from (checked against the sha256s its manifest records): `clean_challenges.json`
and `clean_solutions.json`, which `python -m trm.eval --adapt-challenges` and `python -m trm infer
--challenges` take as they are.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trm.errors import TRMError
from trm.io import atomic_write_json, sha256_file

from .arc_source import subset_paths

LIST_NAME = "clean_tasks.json"
CHALLENGES_NAME = "clean_challenges.json"
SOLUTIONS_NAME = "clean_solutions.json"
_SINGULAR = {"pairs": "pair", "inputs": "input", "outputs": "output"}


def select_clean(
    test_tasks: list[tuple[str, str]],
    matches: dict[str, list[dict[str, Any]]],
    duplicates: list[dict[str, Any]],
    trained_task_ids: set[str],
) -> dict[str, Any]:
    """The clean test tasks, the excluded ones with why, and the counts.

    `test_tasks`: (task id, subset) of every task with test pairs; `matches`: the audit's test pairs,
    inputs and outputs found in training; `duplicates`: its duplicate task groups; `trained_task_ids`:
    the task ids the training side trains rows for."""
    why: dict[tuple[str, str], list[str]] = {}
    for name, rows in matches.items():
        for m in rows:
            if m["same_task"]:
                continue
            where = next(w for w in m["found_in"] if (w["task"], w["subset"]) != (m["task"], m["subset"]))
            why.setdefault((m["task"], m["subset"]), []).append(
                f"test {_SINGULAR[name]} {m['pair']}: {m['match']} in {where['task']} ({where['subset']})"
            )
    for group in duplicates:
        members = [(t["task"], t["subset"]) for t in group["tasks"]]
        for t in group["tasks"]:
            if t["side"] != "dataset" or not t["test"]:
                continue
            key = (t["task"], t["subset"])
            other = next(m for m in members if m != key)
            why.setdefault(key, []).append(
                f"whole task: {group['match']} duplicate of {other[0]} ({other[1]})"
            )
    clean = [
        {"task": task, "subset": subset, "trained_rows": task in trained_task_ids}
        for task, subset in test_tasks
        if (task, subset) not in why
    ]
    excluded = [
        {"task": task, "subset": subset, "why": why[(task, subset)]}
        for task, subset in test_tasks
        if (task, subset) in why
    ]
    return {
        "counts": {
            "test_tasks": len(test_tasks),
            "clean": len(clean),
            "clean_without_trained_rows": sum(1 for t in clean if not t["trained_rows"]),
        },
        "tasks": clean,
        "excluded": excluded,
    }


def _source_file(path: Path, inputs: dict[str, Any], dataset: str) -> Path | None:
    """`path` when it is the file the dataset was built from (its sha256 as the manifest records it);
    None when the manifest records no such input; TRMError when the file is missing or differs."""
    expected = inputs.get(path.name)
    if expected is None:
        return None
    fix = (
        "pass --input-file-prefix with the prefix the dataset was built from (build-arc's "
        "--input-file-prefix)"
    )
    if not path.is_file():
        raise TRMError(f"{path}: not found, but {dataset} was built from a file of that name; {fix}")
    if sha256_file(path) != expected:
        raise TRMError(
            f"{path}: its sha256 differs from the one {dataset}/manifest.json records for it: not the file "
            f"the dataset was built from; {fix}"
        )
    return path


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise TRMError(
            f"{path}: unreadable ({err}); restore it (e.g. `git checkout -- trm/data/arc`)"
        ) from None
    if not isinstance(data, dict):
        raise TRMError(f"{path}: not an object {{task_id: ...}}; restore it")
    return data


def clean_pair(
    clean: dict[str, Any], manifest: dict[str, Any], dataset: str, input_prefix: str | Path
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(challenges, solutions or None) of the clean tasks, copied from the dataset's own input files
    under `input_prefix`. Solutions are None when a clean task's subset was built without them."""
    inputs = manifest.get("inputs") or {}
    challenges: dict[str, Any] = {}
    solutions: dict[str, Any] | None = {}
    loaded: dict[Path, dict[str, Any]] = {}
    for entry in clean["tasks"]:
        task_id, subset = entry["task"], entry["subset"]
        challenges_path, solutions_path = (Path(p) for p in subset_paths(input_prefix, subset))
        source = _source_file(challenges_path, inputs, dataset)
        if source is None:
            raise TRMError(
                f"{dataset}/manifest.json records no input {challenges_path.name} for task {task_id!r} "
                f"(subset {subset!r}); pass --input-file-prefix with the prefix the dataset was built from"
            )
        tasks = loaded.setdefault(source, _read(source))
        if task_id not in tasks:
            raise TRMError(
                f"{source}: no task {task_id!r}, which {dataset} holds; {dataset} is damaged or stale"
            )
        challenges[task_id] = tasks[task_id]
        answers_file = _source_file(solutions_path, inputs, dataset)
        if answers_file is None or solutions is None:
            solutions = None  # a subset without solutions (e.g. a hidden test set): no pair to score
            continue
        answers = loaded.setdefault(answers_file, _read(answers_file))
        if task_id not in answers:
            raise TRMError(f"{answers_file}: no solutions of task {task_id!r}; restore the file")
        solutions[task_id] = answers[task_id]
    return challenges, solutions


def write_clean_split(
    folder: Path, report: dict[str, Any], manifest: dict[str, Any], input_prefix: str | Path
) -> tuple[list[Path], str | None]:
    """Write clean_tasks.json, clean_challenges.json and (when the subsets have them) clean_solutions.json
    into `folder`, each atomically; returns the paths written and a note on what could not be written."""
    clean = report["clean_split"]
    dataset = report["dataset"]["path"]
    listing = {
        "dataset": report["dataset"],
        "against": report["against"],
        "rule": "a test task is clean when none of its test pairs, inputs or outputs occurs in another "
        "training task, exactly or up to a dihedral transform and a permutation of colours 1-9, and the "
        "task duplicates no other task; trained_rows: the training side holds its demonstrations",
        **clean,
    }
    atomic_write_json(folder / LIST_NAME, listing)
    inputs = manifest.get("inputs")
    if not isinstance(inputs, dict) or not inputs:  # an imported upstream build records no input files
        return [folder / LIST_NAME], (
            f"{dataset}/manifest.json records no input files (not built by `python -m trm data build-arc`), "
            f"so the clean tasks are listed in {LIST_NAME} but no challenges/solutions pair was written"
        )
    challenges, solutions = clean_pair(clean, manifest, dataset, input_prefix)
    written = [folder / LIST_NAME, folder / CHALLENGES_NAME]
    atomic_write_json(written[1], challenges, indent=None)
    if solutions is None:
        return written, f"the test subsets have no solutions file: {SOLUTIONS_NAME} was not written"
    written.append(folder / SOLUTIONS_NAME)
    atomic_write_json(written[2], solutions, indent=None)
    return written, None
