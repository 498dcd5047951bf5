"""The entry point of a repository task, `python -m tools.<task> …`: argv in, tools calls out.

Each task's `cli.configure(parser)` adds its flags and sets `func` (parsed args -> exit code), the same
contract as the commands of `python -m trm` (trm.commands), which keep only what users run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from trm.errors import TRMError


def main(
    prog: str,
    description: str,
    configure: Callable[[argparse.ArgumentParser], None],
    argv: list[str] | None = None,
) -> int:
    """Parse `argv` (default: sys.argv[1:]) with the task's flags and run it; a TRMError is one line."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    configure(parser)
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
        return int(args.func(args) or 0)
    except TRMError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
