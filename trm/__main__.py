"""`python -m trm <command> …`: the project's command line.

Each module in `trm/commands/` contributes one top-level command through a `register(subparsers)`
function that adds a parser and sets `func` (a callable taking the parsed args, returning an exit code).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from trm import __version__, commands
from trm.errors import TRMError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m trm", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"trm-stack {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except TRMError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
