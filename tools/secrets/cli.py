"""`python -m tools.secrets`: fail when a file of the repository holds a secret (detect-secrets)."""

from __future__ import annotations

import argparse
from pathlib import Path


def run(args: argparse.Namespace) -> int:
    from tools.secrets.scan import BASELINE, scan_repo, update_baseline

    if args.update_baseline:
        path = update_baseline(args.root)
        print(f"scan-secrets: wrote {path}; mark each new entry with `detect-secrets audit {BASELINE}`")
        return 0
    findings = scan_repo(args.root)
    for finding in findings:
        print(finding)
    if findings:
        print(
            f"scan-secrets: {len(findings)} secret-like string(s). Remove them (rotate the key if it was real); "
            f"for a deliberate example run `python -m tools.secrets --update-baseline`, then "
            f"`detect-secrets audit {BASELINE}` and commit the baseline."
        )
        return 1
    print("scan-secrets: no secrets")
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", type=Path, default=Path("."), help="repository root (default: .)")
    parser.add_argument(
        "--update-baseline",
        action="store_true",
        help="record the current findings in .secrets.baseline (audit them with `detect-secrets audit`)",
    )
    parser.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    """`python -m tools.secrets ARGS`: parse `argv` (default: sys.argv[1:]) and run (tools.cli.TASKS)."""
    from tools.cli import main as run_task

    return run_task("secrets", argv)
