"""Tasks split into groups, and groups dealt to ranks: the unit of `infer --ranks N` (trm.kaggle.sharded).

A group is adapted and inferred on its own (its own adaptation run, its own votes), so a submission depends
on the groups only, never on how many ranks ran them: `--ranks 1 --groups 4` writes the same file as
`--ranks 4`. The split is deterministic: tasks in the order (most test inputs first, then task id) go one
by one to the group with the fewest test inputs so far (the lowest index on a tie), which balances
inference, the part whose time grows with the tasks. Group g runs on rank g mod ranks.
"""

from __future__ import annotations

from typing import Any

from trm.errors import TRMError


def split_tasks(challenges: dict[str, Any], groups: int) -> list[list[str]]:
    """`groups` lists of task ids (each in file order), balanced by test inputs; empty groups are dropped
    (fewer tasks than groups)."""
    if groups < 1:
        raise TRMError(f"--groups {groups}: must be at least 1")
    inputs = {task_id: len(task.get("test") or []) for task_id, task in challenges.items()}
    order = sorted(inputs, key=lambda t: (-inputs[t], t))
    load = [0] * groups
    members: list[set[str]] = [set() for _ in range(groups)]
    for task_id in order:
        g = min(range(groups), key=lambda i: (load[i], i))
        load[g] += max(inputs[task_id], 1)
        members[g].add(task_id)
    position = {task_id: i for i, task_id in enumerate(challenges)}
    return [sorted(m, key=position.__getitem__) for m in members if m]


def groups_of_rank(groups: int, ranks: int, rank: int) -> list[int]:
    """The group indices rank `rank` of `ranks` runs, in order."""
    return list(range(rank, groups, ranks))


def largest_rank_share(challenges: dict[str, Any], groups: int, ranks: int) -> tuple[int, int, int]:
    """(tasks, test inputs, groups) of the rank with the most test inputs: the one that sets the wall time."""
    split = split_tasks(challenges, groups)
    best = (0, 0, 0)
    for rank in range(min(ranks, len(split))):
        mine = [split[g] for g in groups_of_rank(len(split), ranks, rank)]
        tasks = [t for group in mine for t in group]
        share = (len(tasks), sum(len(challenges[t].get("test") or []) for t in tasks), len(mine))
        best = max(best, share, key=lambda s: (s[1], s[0]))
    return best
