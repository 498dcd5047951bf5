"""`python -m trm handoff RUN_DIR`: (re)build a run's handoff bundle."""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def run(args: argparse.Namespace) -> int:
    from trm.errors import TRMError
    from trm.launch.handoff.handoff import build_bundle
    from trm.launch.storage.sync import is_run_directory

    run_dir = Path(args.run_dir)
    if run_dir.is_dir() and not is_run_directory(run_dir):
        raise TRMError(
            f"{run_dir} is no run directory (no run.json, launch/ or step_N/ in it): nothing to hand off; pass the "
            "trainer's checkpoint_path (CHECKPOINT_DIR/RUN_NAME)"
        )
    out = args.out or Path(os.environ.get("ARTIFACTS_DIR") or "artifacts") / run_dir.resolve().name
    bundle = build_bundle(run_dir, out)
    print(f"handoff bundle: {bundle}")
    for name in sorted(p.name for p in bundle.iterdir()):
        print(f"  {name}")
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Build the handoff bundle of RUN_DIR (the trainer's checkpoint_path). Idempotent; the bundle of another "
        "run at --out (a run of the same name elsewhere) is never replaced, and a folder that is no run (no run.json, "
        "launch/ or step_N/) is refused: exit 2, naming it."
    )
    parser.add_argument("run_dir", help="the run directory (CHECKPOINT_DIR/RUN_NAME)")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="bundle directory (default: $ARTIFACTS_DIR or artifacts/, + run name)",
    )
    parser.set_defaults(func=run)
