"""`python -m trm version`: versions of trm-stack and of the libraries a run depends on."""

from __future__ import annotations

import argparse
import json
import platform


def collect_versions() -> dict[str, str | None]:
    """Versions that matter for reproducing a run (no GPU access needed)."""
    import torch

    import trm

    return {
        "trm": trm.__version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": str(torch.cuda.is_available()),
    }


def run(args: argparse.Namespace) -> int:
    versions = collect_versions()
    if args.json:
        print(json.dumps(versions, indent=2))
    else:
        for key, value in versions.items():
            print(f"{key:>15}: {value}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("version", help="print versions of trm-stack, Python and torch")
    parser.add_argument("--json", action="store_true", help="print as JSON")
    parser.set_defaults(func=run)
