"""`python -m trm scan-secrets`: fail when a file of the repository holds a secret-like string."""

from __future__ import annotations

import argparse
from pathlib import Path


def run(args: argparse.Namespace) -> int:
    from trm.ops.secrets import ALLOWLIST, scan_repo

    findings = scan_repo(args.root)
    if args.print_allowlist:
        for finding in findings:
            print(finding.allow_line)
        return 0
    for finding in findings:
        print(finding)
    if findings:
        print(
            f"scan-secrets: {len(findings)} secret-like string(s). Remove them (rotate the key if it was real); "
            f"for a deliberate example add the line from `--print-allowlist` to {ALLOWLIST}."
        )
        return 1
    print("scan-secrets: no secret-like strings")
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", type=Path, default=Path("."), help="repository root (default: .)")
    parser.add_argument(
        "--print-allowlist", action="store_true", help="print allowlist lines for the findings"
    )
    parser.set_defaults(func=run)
