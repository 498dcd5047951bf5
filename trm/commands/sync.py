"""`python -m trm sync`: copy a run directory to an rclone remote, or bring it back (`--from`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from trm.errors import TRMError


def run(args: argparse.Namespace) -> int:
    from trm.launch.storage.sync import SyncError, check_remote, sync_down, sync_up

    if args.from_remote:
        if args.remote is not None:
            raise TRMError(
                "with --from REMOTE give only the run directory: python -m trm sync --from REMOTE RUN_DIR"
            )
        remote = check_remote(args.from_remote, "--from")
        try:
            step = sync_down(remote, Path(args.run_dir), print, missing_ok=args.missing_ok)
        except SyncError as err:
            raise TRMError(
                f"restore from {remote} failed: {err}; rerun the same command (it continues)"
            ) from None
        print(
            f"{args.run_dir} restored from {remote}"
            + (f" (newest complete checkpoint {step})" if step else " (no checkpoint: the run starts fresh)")
            + "; start the same launch command with CHECKPOINT_DIR/RUN_NAME naming this directory to resume"
        )
        return 0
    if args.remote is None:
        raise TRMError(
            "give the remote: python -m trm sync RUN_DIR REMOTE (or --from REMOTE RUN_DIR to restore)"
        )
    remote = check_remote(args.remote, "REMOTE")
    run_dir = Path(args.run_dir)
    handoff = Path(args.handoff) if args.handoff else None
    try:
        sync_up(run_dir, remote, print, handoff_dir=handoff, prune=args.prune)
    except SyncError as err:
        raise TRMError(
            f"copy to {remote} failed: {err}; rerun the same command (it is incremental)"
        ) from None
    print(f"{run_dir} copied to {remote}; restore with: python -m trm sync --from {remote} {run_dir}")
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Copy a run directory (complete checkpoints, metrics, logs; never .partial folders) to an rclone "
        "remote, incrementally; or bring the run back with --from so the same launch command resumes it."
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run directory ($CHECKPOINT_DIR/$RUN_NAME)")
    parser.add_argument("remote", metavar="REMOTE", nargs="?", help="rclone remote:path for the run")
    parser.add_argument(
        "--from",
        dest="from_remote",
        metavar="REMOTE",
        help="restore RUN_DIR from REMOTE: the run's records and its newest complete checkpoint; a file RUN_DIR "
        "already holds is replaced only by a newer copy; a non-empty folder that is no run directory, or a run a "
        "launcher or trainer is running (its run lock), is refused (exit 2) before anything is copied",
    )
    parser.add_argument(
        "--missing-ok",
        action="store_true",
        help="with --from: a REMOTE that does not exist yet restores nothing (the first session of a run)",
    )
    parser.add_argument(
        "--handoff",
        metavar="DIR",
        help="also copy this handoff bundle ($ARTIFACTS_DIR/$RUN_NAME) into REMOTE/handoff/",
    )
    parser.add_argument(
        "--prune",
        action="store_true",
        help="after the copy, delete from REMOTE the checkpoints RUN_DIR no longer has, except the newest "
        "complete one there (what the launcher does with SYNC_PRUNE=on; off here: check REMOTE first)",
    )
    parser.set_defaults(func=run)
