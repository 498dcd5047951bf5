"""Puzzle-embedding rows for the identifiers of an adaptation dataset.

Rule: an identifier the source was trained on keeps its trained row; every other one starts from the
mean of the trained rows (blank row excluded), the row the Kaggle bundle gives unseen tasks. So a run
with no adaptation steps is exactly the bundle's unseen-task behaviour, and each step moves away from
it; the mean is the centre of what the model was trained to read, where any new row is least foreign.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trm.data.encoding import BLANK_IDENTIFIER, parse_identifier


def mean_trained_row(table: torch.Tensor, blank_id: int = 0) -> torch.Tensor:
    """[1, dim]: the mean of the table's rows without the blank row (summed in float64, no copy)."""
    total = table.sum(dim=0, keepdim=True, dtype=torch.float64)
    if len(table) > 1:
        total = total - table[blank_id : blank_id + 1].double()
    return (total / max(len(table) - 1, 1)).to(table.dtype)


@dataclass(frozen=True)
class InitialRows:
    """The new table, how many of its rows came from trained rows, and the tasks those rows belong to."""

    table: torch.Tensor
    copied: int
    from_mean: int
    trained_tasks: tuple[str, ...] = ()


def initial_rows(
    names: list[str],
    trained: torch.Tensor,
    trained_names: list[str] | None,
    mean: torch.Tensor,
    blank_id: int = 0,
) -> InitialRows:
    """One row per name (the dataset's identifiers.json): blank -> the trained blank row, a name among
    `trained_names` -> its trained row, else `mean`."""
    index = {n: i for i, n in enumerate(trained_names or []) if n != BLANK_IDENTIFIER}
    table = mean.reshape(1, -1).expand(len(names), -1).clone()
    copied, tasks = 0, {}
    for row, name in enumerate(names):
        if name == BLANK_IDENTIFIER:
            table[row] = trained[blank_id]
        elif name in index:
            table[row] = trained[index[name]]
            copied += 1
            tasks[parse_identifier(name)[0]] = None
    blanks = names.count(BLANK_IDENTIFIER)
    return InitialRows(table, copied, len(names) - blanks - copied, tuple(tasks))


def trained_tasks(task_ids: list[str], trained_names: list[str] | None) -> list[str]:
    """The tasks of `task_ids` that have a trained row among `trained_names` (in `task_ids` order)."""
    seen = {parse_identifier(n)[0] for n in trained_names or [] if n != BLANK_IDENTIFIER}
    return [t for t in task_ids if t in seen]


def trained_warning(trained: int, total: int) -> str:
    """The line inference and evaluation print when tasks have trained rows: their results are no measure
    of tasks the model never saw."""
    return (
        f"{trained} of {total} task(s) have trained puzzle-embedding rows (the model trained on their "
        "demonstrations): their results do not show how it does on tasks it never saw, such as a hidden "
        "test set"
    )
