"""`python -m tools.runbooks check|run|stamp`: the versioned, tested runbooks under runbooks/."""

from __future__ import annotations

import argparse
from pathlib import Path


def _check(args: argparse.Namespace) -> int:
    from tools.cli import task_parsers
    from tools.runbooks.check import check_runbooks
    from trm.commands import build_parser

    problems = check_runbooks(args.root, build_parser(), task_parsers())
    for problem in problems:
        print(problem)
    print(f"runbooks: {len(problems)} problem(s)")
    return 1 if problems else 0


def _run(args: argparse.Namespace) -> int:
    from tools.runbooks.run import run_cpu_blocks

    timings = run_cpu_blocks(args.root, names=args.names, workdir=args.workdir, timeout_s=args.timeout)
    for name, seconds in timings:
        print(f"{name:>20}: {seconds:7.1f} s")
    print(f"runbooks: cpu blocks of {len(timings)} runbook(s) passed")
    return 0


def _stamp(args: argparse.Namespace) -> int:
    from tools.runbooks.check import stamp

    bumped = stamp(args.root, args.message)
    print("\n".join(f"bumped {b}" for b in bumped) or "nothing changed: no version bumped")
    return 0


def _measured(args: argparse.Namespace) -> int:
    from tools.runbooks.measured import stale, write

    if args.write:
        changed = write(args.root)
        print("\n".join(f"rendered {p}" for p in changed) or "every measured figure is up to date")
        return 0
    problems = stale(args.root)
    print("\n".join(problems) or "every measured figure is up to date")
    return 1 if problems else 0


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="runbooks_command", metavar="ACTION", required=True)
    check = sub.add_parser(
        "check",
        help="headers, versions, image pins, bash syntax, commands that exist; links and figures of the docs",
    )
    run = sub.add_parser("run", help="execute every `bash cpu` block, in order, on a copy of the project")
    run.add_argument("names", nargs="*", help="only these runbooks (default: all)")
    run.add_argument("--workdir", type=Path, help="keep the copy and workspace here (default: a temp dir)")
    run.add_argument("--timeout", type=float, default=1800, help="seconds for all blocks (default 1800)")
    stamp = sub.add_parser("stamp", help="bump the version of every runbook whose procedure or image changed")
    stamp.add_argument(
        "--message", "-m", required=True, help="what changed (goes into runbooks/CHANGELOG.md)"
    )
    measured = sub.add_parser(
        "measured", help="check (or --write) the figures rendered from runbooks/measured.toml"
    )
    measured.add_argument("--write", action="store_true", help="render every marker from the table")
    for p, func in ((check, _check), (run, _run), (stamp, _stamp), (measured, _measured)):
        p.add_argument("--root", type=Path, default=Path("."), help="repository root (default: .)")
        p.set_defaults(func=func)


def main(argv: list[str] | None = None) -> int:
    """`python -m tools.runbooks ARGS`: parse `argv` (default: sys.argv[1:]) and run (tools.cli.TASKS)."""
    from tools.cli import main as run_task

    return run_task("runbooks", argv)
