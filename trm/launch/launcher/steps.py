"""What each step of a launch does (`StepActions`): the host and data steps here, the others from the
component that owns them (the smoke gate, training and the probe: trm.launch.supervision; the bundle:
trm.launch.handoff; the release: trm.launch.provider; the uploads: trm.launch.storage)."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

from trm import exit_codes
from trm.errors import TRMError
from trm.io import atomic_write_json
from trm.launch.cost.estimate import ESTIMATE_FILE, RunEstimate
from trm.launch.handoff.at_exit import hand_off
from trm.launch.plan.plan import LaunchFailed, Step, StepActions
from trm.launch.provider.release import readiness_problem, release
from trm.launch.storage.sync import SyncError
from trm.launch.supervision.ledger import RunLedger
from trm.launch.supervision.probe import probe
from trm.launch.supervision.session import Session
from trm.launch.supervision.smoke import smoke_gate
from trm.launch.supervision.supervisor import CostGuard, read_events
from trm.launch.supervision.training import train

DATA_WAIT_S = 3600.0  # how long nodes other than 0 wait for node 0's dataset
DATA_POLL_S = 10.0  # how often they look for it
# How long before a node's own start node 0's giving up still counts: node 0 fails fast (a bad source) while the
# others' pods are still pulling their image; the clocks of the nodes may also differ by this much.
NODE_ZERO_END_SLACK_S = 600.0


def preflight_step(session: Session, step: Step) -> None:
    """The host checks; any failure stops the launch."""
    if not session.settings.preflight:
        session.console.log("PREFLIGHT=0: preflight checks SKIPPED")
        return
    (command,) = step.commands
    session.check(
        command,
        "preflight",
        "preflight failed (exit {code}); the fix for each failed check is printed above",
        # A fault of this node (bad GPU, NCCL) keeps its own code: orchestrators retry it elsewhere.
        passed_on=(exit_codes.NODE_FAULT,),
    )


def data_step(session: Session, step: Step) -> None:
    """Build the dataset if missing (node 0), then verify it."""
    build, verify = step.commands
    d = session.plan.dataset_dir
    if not d.exists():
        if session.settings.node_rank == 0:
            session.console.log(f"dataset {d} is missing: building it")
            session.check(
                build,
                "data build",
                f"building {d} failed (exit {{code}}); see launch/launch.log, fix the cause and rerun",
            )
        else:
            _wait_for_dataset(session, d)
    session.check(
        verify,
        "data verify",
        f"dataset {d} failed verification (exit {{code}}); never train on it: remove it (rm -rf {d}) "
        "and rerun to rebuild",
    )
    session.console.log(f"dataset {d} verified")


def _wait_for_dataset(session: Session, d: Path) -> None:
    """Wait (node > 0) until node 0 has built `d`, at most DATA_WAIT_S; node 0 ending its session with a code no
    orchestrator retries (exit_codes.NOT_RETRIED: its build failed, a configuration error) ends the wait at once,
    so the other nodes do not keep their GPUs for an hour waiting on a dataset that is not coming. A node 0 that
    ends with a retried code (75, 76, 77, a preemption) is replaced by its orchestrator: the wait goes on."""
    deadline = time.monotonic() + DATA_WAIT_S
    session.console.log(
        f"node {session.settings.node_rank}: waiting for node 0 to build {d} (checked every {DATA_POLL_S:g} s, "
        f"at most {DATA_WAIT_S / 60:.0f} min, or until node 0 gives up)"
    )
    while not d.exists():
        if session.supervisor.stop_reason:
            raise LaunchFailed(128 + 15, "stopped while waiting for the dataset")
        end = node_zero_gave_up(
            read_events(session.events.path), session.session_start, session.settings.node_rank
        )
        if end is not None:
            raise LaunchFailed(
                exit_codes.CONFIG_ERROR,
                f"node 0 ended its session with exit {end.get('exit_code')} (not retried) without building {d}; "
                f"its cause is in {session.settings.launch_dir / 'launch.log'}: fix it and start every node again",
            )
        if time.monotonic() >= deadline:
            raise LaunchFailed(
                exit_codes.CONFIG_ERROR,
                f"{d} did not appear within {DATA_WAIT_S / 60:.0f} min; DATA_DIR must be a volume shared by "
                "every node (ReadWriteMany), and node 0 must be running",
            )
        time.sleep(DATA_POLL_S)


def node_zero_gave_up(
    events: list[dict[str, object]], since: float, node_rank: int | None = None
) -> dict[str, object] | None:
    """Node 0's session end when node 0 gave up for good: its newest session event (in the run directory's
    events, shared by the nodes) is a session_end with a code no orchestrator retries, at most
    NODE_ZERO_END_SLACK_S before `since` (this node's session start: node 0 may fail before this node starts;
    an older end, yesterday's launch, does not count; a newer session_start of node 0 supersedes it). An end
    after which this node (`node_rank`) already began or ended a session belongs to an earlier launch: a
    relaunch whose node 0 has not written its new start yet is waited for."""
    newest = None
    for index, ev in enumerate(events):
        if ev.get("node_rank") == 0 and ev.get("event") in ("session_start", "session_end"):
            newest = index
    if newest is None or events[newest].get("event") != "session_end":
        return None
    end = events[newest]
    if end.get("exit_code") not in exit_codes.NOT_RETRIED:
        return None
    when = end.get("time")
    if not isinstance(when, int | float) or when < since - NODE_ZERO_END_SLACK_S:
        return None
    for ev in events[newest + 1 :]:
        stamp = ev.get("time")
        earlier_session = isinstance(stamp, int | float) and stamp < since
        if (
            ev.get("node_rank") == node_rank
            and ev.get("event") in ("session_start", "session_end")
            and earlier_session
        ):
            return None
    return end


def hardware_step(session: Session, step: Step) -> None:
    """Log the tier, the batch layout and the expected time and cost (now that the dataset is built);
    the estimate is recorded in launch/estimate.json for the handoff's planned-against-actual, and
    plan.json's MAX_HOURS warning follows the built dataset's figures."""
    estimate = session.plan.estimate()
    session.console.log(session.plan.hardware_text(estimate))
    if isinstance(estimate, RunEstimate):
        atomic_write_json(session.settings.launch_dir / ESTIMATE_FILE, estimate.to_dict())
        session.write_plan()


def cost_guard_step(session: Session, step: Step) -> None:
    """Start the watcher: cost log, heartbeats for the handoff, and the MAX_HOURS stop."""
    s = session.settings
    ledger = session.ledger or RunLedger.load(s.launch_dir)
    deadline = None
    left = ledger.budget_left_hours(s.max_hours, s.stop_margin_minutes)
    if left is not None:
        deadline = time.time() + left * 3600
        session.console.log(
            f"cost guard armed: the run has spent {ledger.hours:.4g} h of MAX_HOURS={s.max_hours:g}; the "
            f"trainer is asked to stop at {time.strftime('%H:%M:%S', time.gmtime(deadline))} UTC"
        )
    hardware = session.plan.hardware
    session.guard = CostGuard(
        session.supervisor,
        session_start=session.session_start,
        deadline=deadline,
        num_gpus=hardware.gpus_per_node if hardware.device == "cuda" else 0,
        hourly_usd=s.gpu_hourly_usd,
        log_every_s=s.cost_log_minutes * 60,
        ledger=session.ledger,
        run_gpus=hardware.world_size if hardware.device == "cuda" else 0,
    )
    session.guard.start()


def sync_step(session: Session, step: Step) -> None:
    """SYNC_TO: start the background uploads (node 0; the other nodes hold no run directory of their own)."""
    s = session.settings
    if s.node_rank != 0:
        session.console.log(step.what)
        return
    session.syncer = s.syncer(session.console.log)
    try:
        session.syncer.start()
    except SyncError as err:
        raise LaunchFailed(exit_codes.CONFIG_ERROR, f"SYNC_TO={s.sync_to}: {err}") from None
    session.console.log(f"sync: the run is copied to {s.sync_remote} in the background")


def handoff_step(session: Session, step: Step) -> None:
    """Write the handoff bundle (at exit, whatever the outcome)."""
    from trm.launch.handoff.handoff import OtherRunsBundle

    try:
        bundle = hand_off(session.settings)
    except OtherRunsBundle as err:  # another run of this name wrote it while this one ran: never upload it
        session.handoff_foreign = True
        if session.syncer is not None:
            session.syncer.handoff_dir = None
        session.console.log(
            f"handoff failed ({err}); this run's bundle: python -m trm handoff {session.settings.run_dir} --out DIR"
        )
        return
    except (OSError, TRMError) as err:
        session.console.log(f"handoff failed ({err}); rerun: {' '.join(session.plan.handoff_command())}")
        return
    session.console.log(f"handoff bundle: {bundle}" if bundle else "handoff: no run directory yet")


def final_sync_step(session: Session, step: Step) -> None:
    """The last upload, after the handoff bundle (node 0)."""
    if session.settings.node_rank != 0:
        return
    syncer = session.syncer or session.settings.syncer(session.console.log)
    if session.handoff_foreign:
        syncer.handoff_dir = None
    session.synced = syncer.final()


def release_step(session: Session, step: Step) -> None:
    """ON_END / ON_BUDGET, once the bundle is written and synced."""
    release(
        session.settings.release,
        session.exit_code,
        session.environ,
        session.console.log,
        synced=session.synced,
    )


def check_release_ready(session: Session) -> None:
    """ON_END / ON_BUDGET must be able to act at the end: find out now, before any training."""
    problem = readiness_problem(session.settings.release, session.environ)
    if problem:
        raise LaunchFailed(exit_codes.CONFIG_ERROR, f"release not possible: {problem}")


def step_actions(session: Session) -> StepActions:
    """Each step's action, bound to `session`."""
    return StepActions(
        preflight=partial(preflight_step, session),
        data=partial(data_step, session),
        hardware=partial(hardware_step, session),
        cost_guard=partial(cost_guard_step, session),
        sync=partial(sync_step, session),
        probe=partial(probe, session),
        smoke_gate=partial(smoke_gate, session),
        train=partial(train, session),
        handoff=partial(handoff_step, session),
        final_sync=partial(final_sync_step, session),
        release=partial(release_step, session),
    )
