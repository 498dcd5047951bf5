"""`python -m trm version`: versions of trm-stack and of the libraries a run depends on."""

from __future__ import annotations

import argparse
import json


def run(args: argparse.Namespace) -> int:
    from trm.versions import collect_versions

    versions = collect_versions()
    if args.json:
        print(json.dumps(versions, indent=2))
    else:
        for key, value in versions.items():
            print(f"{key:>15}: {value}")
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print as JSON")
    parser.set_defaults(func=run)
