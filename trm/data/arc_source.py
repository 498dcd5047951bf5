"""Read and validate ARC task JSON (Kaggle "combined" layout) and check input checksums."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trm.errors import TRMError
from trm.io import sha256_file

from .encoding import GRID_SIZE

SHIPPED_DIR = Path(__file__).resolve().parent / "arc"
DEFAULT_PREFIX = SHIPPED_DIR / "arc-agi"
CHECKSUM_FILE = "SHA256SUMS"
DUMMY_OUTPUT: list[list[int]] = [[0]]


@dataclass
class ArcTask:
    """One ARC task: demonstration pairs, test pairs (outputs from the solutions file or dummy) and raw JSON."""

    task_id: str
    subset: str
    train: list[tuple[np.ndarray, np.ndarray]]
    test: list[tuple[np.ndarray, np.ndarray]]
    raw: dict[str, Any] = field(repr=False)
    test_first: bool = False  # "test" precedes "train" in the task's JSON (upstream keeps that pair order)


def subset_paths(prefix: str | Path, subset: str) -> tuple[Path, Path]:
    """(challenges, solutions) paths for a subset under an input prefix."""
    prefix = Path(prefix)
    return (
        prefix.with_name(f"{prefix.name}_{subset}_challenges.json"),
        prefix.with_name(f"{prefix.name}_{subset}_solutions.json"),
    )


def _load_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise TRMError(
            f"{path}: file not found; check --input-file-prefix and --subsets "
            f"(expected <prefix>_<subset>_challenges.json)"
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise TRMError(f"{path}: cannot read ({err}); fix the file's permissions or restore it") from None
    except json.JSONDecodeError as err:
        raise TRMError(
            f"{path}: malformed JSON at line {err.lineno} column {err.colno} ({err.msg}); "
            "restore the file from a clean copy"
        ) from None


def to_grid(value: Any, where: str) -> np.ndarray:
    """Validate one grid (rectangular list of rows, 1..30 per side, ints 0..9) and return it as uint8."""
    if not isinstance(value, list) or not value or not all(isinstance(row, list) for row in value):
        raise TRMError(f"{where}: a grid must be a non-empty list of rows; fix or remove this task")
    try:
        grid = np.array(value)
    except ValueError:
        grid = None
    if grid is None or grid.ndim != 2 or grid.shape[1] == 0:
        lengths = sorted({len(r) for r in value})
        raise TRMError(f"{where}: grid is not rectangular (row lengths {lengths}); fix or remove this task")
    if grid.shape[0] > GRID_SIZE or grid.shape[1] > GRID_SIZE:
        raise TRMError(
            f"{where}: grid is {grid.shape[0]}x{grid.shape[1]}, larger than {GRID_SIZE}x{GRID_SIZE}; "
            "fix or remove this task"
        )
    if grid.dtype.kind not in "iu":
        raise TRMError(f"{where}: grid cells must be integers 0..9; fix or remove this task")
    low, high = int(grid.min()), int(grid.max())
    if low < 0 or high > 9:
        raise TRMError(f"{where}: colour {high if high > 9 else low} outside 0..9; fix or remove this task")
    return grid.astype(np.uint8)


def _pair(example: Any, where: str, *, need_output: bool) -> tuple[Any, Any]:
    if not isinstance(example, dict) or "input" not in example or (need_output and "output" not in example):
        keys = "'input' and 'output'" if need_output else "'input'"
        raise TRMError(f"{where}: each example must be an object with {keys}; fix or remove this task")
    return example["input"], example.get("output")


def load_subset(prefix: str | Path, subset: str, max_puzzles: int | None = None) -> list[ArcTask]:
    """Load and validate one subset; missing solutions file -> dummy [[0]] test outputs."""
    challenges_path, solutions_path = subset_paths(prefix, subset)
    challenges = _load_json(challenges_path)
    if not isinstance(challenges, dict):
        raise TRMError(f"{challenges_path}: expected an object {{task_id: task}}; restore the file")
    solutions = _load_json(solutions_path) if solutions_path.is_file() else None
    if solutions is not None and not isinstance(solutions, dict):
        raise TRMError(f"{solutions_path}: expected an object {{task_id: [grid, ...]}}; restore the file")
    items = list(challenges.items())
    if max_puzzles is not None:
        items = items[:max_puzzles]
    tasks = []
    for task_id, task in items:
        where = f"{challenges_path} task {task_id!r}"
        if (
            not isinstance(task, dict)
            or not isinstance(task.get("train"), list)
            or not isinstance(task.get("test"), list)
        ):
            raise TRMError(f"{where}: a task must have 'train' and 'test' lists; fix or remove this task")
        if solutions is not None:
            outputs = solutions.get(task_id)
            if not isinstance(outputs, list) or len(outputs) != len(task["test"]):
                raise TRMError(
                    f"{solutions_path} task {task_id!r}: expected a list of {len(task['test'])} output "
                    "grids (one per test input); fix the solutions file or remove it to use dummy outputs"
                )
        else:  # hidden test set: an output already in the challenge is kept, others become the dummy
            outputs = [
                example.get("output", DUMMY_OUTPUT) if isinstance(example, dict) else DUMMY_OUTPUT
                for example in task["test"]
            ]
        train = []
        for i, example in enumerate(task["train"]):
            inp, out = _pair(example, f"{where} train[{i}]", need_output=True)
            train.append(
                (to_grid(inp, f"{where} train[{i}].input"), to_grid(out, f"{where} train[{i}].output"))
            )
        test = []
        raw_test = []
        for i, example in enumerate(task["test"]):
            inp, _ = _pair(example, f"{where} test[{i}]", need_output=False)
            out_where = f"{solutions_path} task {task_id!r} [{i}]" if solutions is not None else where
            test.append((to_grid(inp, f"{where} test[{i}].input"), to_grid(outputs[i], out_where)))
            raw_test.append({**example, "output": outputs[i]})
        if not train and not test:
            raise TRMError(f"{where}: task has no examples; fix or remove this task")
        raw = {**task, "test": raw_test}  # upstream's test_puzzles.json: the task with outputs filled in
        keys = list(task)
        test_first = keys.index("test") < keys.index("train")
        tasks.append(ArcTask(task_id, subset, train, test, raw, test_first))
    return tasks


def load_subsets(
    prefix: str | Path, subsets: list[str], max_puzzles: int | None = None
) -> list[list[ArcTask]]:
    """Load several subsets; a task id present in two subsets is an error."""
    seen: dict[str, str] = {}
    loaded = []
    for subset in subsets:
        tasks = load_subset(prefix, subset, max_puzzles)
        for task in tasks:
            if task.task_id in seen:
                raise TRMError(
                    f"{subset_paths(prefix, subset)[0]} task {task.task_id!r}: the same task id is also in "
                    f"subset {seen[task.task_id]!r}; drop one of the two subsets from --subsets"
                )
            seen[task.task_id] = subset
        loaded.append(tasks)
    return loaded


def read_checksums(directory: Path) -> dict[str, str]:
    """Parse a `sha256sum`-format SHA256SUMS file in `directory` (empty dict if absent)."""
    path = directory / CHECKSUM_FILE
    if not path.is_file():
        return {}
    sums = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        digest, _, name = line.partition("  ")
        if len(digest) != 64 or not name:
            raise TRMError(f"{path}:{n}: not a `sha256sum` line; regenerate it with `sha256sum *.json`")
        sums[name.lstrip("*")] = digest
    return sums


def input_checksums(prefix: str | Path, subsets: list[str]) -> dict[str, str]:
    """sha256 of every input file used; checked against SHA256SUMS next to them when it lists the file."""
    result = {}
    for subset in subsets:
        for path in subset_paths(prefix, subset):
            if not path.is_file():
                continue
            digest = sha256_file(path)
            expected = read_checksums(path.parent).get(path.name)
            if expected is not None and expected != digest:
                raise TRMError(
                    f"{path}: sha256 {digest} does not match {path.parent / CHECKSUM_FILE} ({expected}); "
                    "the file was modified or is damaged: restore it (e.g. `git checkout -- trm/data/arc`)"
                )
            result[path.name] = digest
    return result
