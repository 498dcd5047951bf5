"""The repository tasks, `python -m tools.<task> …`: argv in, tools calls out.

`TASKS` names every task with its one-line help (as `trm.commands.COMMANDS` does for the user commands of
`python -m trm`). A task's module `tools.<task>.cli` defines `configure(parser)`, which adds the flags and
sets `func` (parsed args -> exit code); it is imported only when the task runs or a checker asks for its
parser (the runbook and job checks verify `python -m tools.<task> …` lines against it).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import dataclass

from trm.errors import TRMError


@dataclass(frozen=True)
class Task:
    """One repository task, run as `python -m tools.<name>`."""

    name: str
    help: str

    @property
    def module(self) -> str:
        """The module that configures and runs the task."""
        return f"tools.{self.name}.cli"

    @property
    def prog(self) -> str:
        return f"python -m tools.{self.name}"


TASKS: tuple[Task, ...] = (
    Task("images", "container images: lock, wheelhouse, build, push, ref, docs"),
    Task("jobs", "render, validate or image-pin the Kubernetes jobs"),
    Task(
        "release",
        "release images: build, push, pin the lock by registry digest, re-stamp runbooks and jobs (make release)",
    ),
    Task("runbooks", "check, run (cpu tier) or version-stamp the runbooks"),
    Task("secrets", "scan the repository for API keys, tokens, private keys (detect-secrets)"),
)


def task_parser(name: str) -> argparse.ArgumentParser:
    """The parser of `python -m tools.<name>` with every flag configured."""
    task = next((t for t in TASKS if t.name == name), None)
    if task is None:
        raise TRMError(f"no repository task {name!r}; the tasks are {', '.join(t.name for t in TASKS)}")
    parser = argparse.ArgumentParser(prog=task.prog, description=task.help)
    importlib.import_module(task.module).configure(parser)
    return parser


def task_parsers() -> dict[str, argparse.ArgumentParser]:
    """`tools.<name>` -> its parser, for every task (what the shell-reference checks verify against)."""
    return {f"tools.{t.name}": task_parser(t.name) for t in TASKS}


def main(name: str, argv: list[str] | None = None) -> int:
    """Run task `name` on `argv` (default: sys.argv[1:]); a TRMError is one line and its exit code."""
    try:
        args = task_parser(name).parse_args(sys.argv[1:] if argv is None else argv)
        return int(args.func(args) or 0)
    except TRMError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
