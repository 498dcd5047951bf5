"""The command line `python -m trm <command> …`: argv in, library calls out; nothing in trm imports it.

`COMMANDS` names every top-level command with its one-line help, so `python -m trm --help` imports no
command module. The module of a command (`trm.commands.<name>`, dashes as underscores) is imported only
when that command runs (or when a checker asks for the full parser); it defines `configure(parser)`,
which adds the flags and sets `func` (a callable taking the parsed args, returning an exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Collection
from dataclasses import dataclass

from trm import __version__
from trm.errors import TRMError


@dataclass(frozen=True)
class Command:
    """One top-level command."""

    name: str
    help: str

    @property
    def module(self) -> str:
        """The module that configures and runs the command."""
        return f"{__name__}.{self.name.replace('-', '_')}"


COMMANDS: tuple[Command, ...] = (
    Command(
        "adapt",
        "test-time training: fine-tune a checkpoint on a task file's demonstrations (rows for unseen tasks)",
    ),
    Command("best", "print a run's best complete checkpoint by an evaluation metric"),
    Command("data", "build, verify and import ARC datasets"),
    Command(
        "experiment",
        "experiment suites (paper ablations, scaling studies): list, show, run one, or run a batch",
    ),
    Command(
        "handoff",
        "write the handoff bundle (handoff.json, run.info, logs, metrics, plot, submission) of a run",
    ),
    Command("infer", "offline ARC inference with a Kaggle bundle"),
    Command(
        "kaggle",
        "publish a Kaggle bundle: weights and wheelhouse datasets and an offline notebook (the kaggle client)",
    ),
    Command(
        "launch", "run the production launch (what scripts/train_prod.sh calls); configured by environment"
    ),
    Command("package", "package a checkpoint for offline use"),
    Command(
        "publish-checkpoint",
        "upload one checkpoint of a run to the Hugging Face Hub with its provenance and a model card",
    ),
    Command("preflight", "check GPUs, driver, SM coverage, /dev/shm, disk, NCCL before a run"),
    Command("report", "compare runs: report.md with tables and plots from run directories or a batch"),
    Command(
        "select-config", "pick micro-batch / accumulation / compile for this host from the hardware table"
    ),
    Command(
        "sync",
        "copy a run directory to an rclone remote (incremental, complete checkpoints only) or restore it (--from)",
    ),
    Command("tensorboard", "serve a run's TensorBoard events on this host, with the port-forward hint"),
    Command("version", "print versions of trm-stack, Python and torch"),
)
NAMES = tuple(c.name for c in COMMANDS)


def _configure(command: Command, parser: argparse.ArgumentParser) -> None:
    importlib.import_module(command.module).configure(parser)


def build_parser(configure: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The parser with every command listed; the flags of the commands in `configure` (None: all)."""
    parser = argparse.ArgumentParser(
        prog="python -m trm",
        description="The trm-stack command line; `python -m trm COMMAND --help` for its flags.",
    )
    parser.add_argument("--version", action="version", version=f"trm-stack {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        sub = subparsers.add_parser(command.name, help=command.help, description=command.help)
        if configure is None or command.name in configure:
            _configure(command, sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse `argv` (default: sys.argv[1:]), importing only the command it names, and run it."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser(configure=argv[:1])
        args = parser.parse_args(argv)
        return int(args.func(args) or 0)
    except TRMError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
