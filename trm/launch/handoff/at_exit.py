"""The handoff of a launch: the bundle its at-exit step writes (and `python -m trm launch --handoff` by
hand), and the at-exit work of a launch that failed before its plan existed."""

from __future__ import annotations

from pathlib import Path

from trm.errors import TRMError
from trm.launch.config.settings import LaunchSettings
from trm.launch.supervision.supervisor import Console


def hand_off(settings: LaunchSettings) -> Path | None:
    """Bundle the run these settings name into ARTIFACTS_DIR/RUN_NAME; None when it has no directory yet.

    The handoff step of a launch and `python -m trm launch --handoff` (by hand) both call this."""
    from trm.launch.handoff.handoff import build_bundle  # reads the run only when there is one to bundle

    if not settings.run_dir.is_dir():
        return None
    return build_bundle(settings.run_dir, settings.artifacts_run_dir)


def finish_unplanned(settings: LaunchSettings, exit_code: int) -> None:
    """The at-exit steps of a launch that failed before its plan existed (a bad setting found while resolving
    the hardware): the handoff bundle of the run, if it has a directory, and its final sync. Nothing is
    released: ON_END / ON_BUDGET act on exits 0 and 79 only."""
    if not settings.run_dir.is_dir():
        return
    log = Console(settings.launch_dir / "launch.log").log
    try:
        bundle = hand_off(settings)
    except (OSError, TRMError) as err:
        log(f"handoff failed ({err}); rerun: python -m trm launch --handoff")
        return
    log(f"exit {exit_code} before the launch started; handoff bundle: {bundle}")
    if settings.sync_to and settings.node_rank == 0:
        settings.syncer(log).final()
