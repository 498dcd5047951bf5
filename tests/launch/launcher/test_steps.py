"""The launch's own steps: the wait of nodes other than 0 for node 0's dataset."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from trm import exit_codes
from trm.launch.launcher import steps
from trm.launch.plan.plan import LaunchFailed
from trm.launch.supervision.supervisor import EventLog


def _session(logged: list[str], run_dir: Path) -> SimpleNamespace:
    """Node 1's session: its console, its stop flag and the run directory's events, shared with node 0."""
    return SimpleNamespace(
        settings=SimpleNamespace(node_rank=1, launch_dir=run_dir / "launch"),
        console=SimpleNamespace(log=logged.append),
        supervisor=SimpleNamespace(stop_reason=None),
        events=EventLog(run_dir / "launch" / "events.jsonl"),
        session_start=time.time(),
    )


def test_a_node_waiting_for_the_dataset_says_how_long_and_finds_it(tmp_path: Path, monkeypatch) -> None:
    dataset = tmp_path / "data"
    looks: list[float] = []

    def node_zero_builds(seconds: float) -> None:
        looks.append(seconds)
        dataset.mkdir()

    monkeypatch.setattr(steps.time, "sleep", node_zero_builds)
    logged: list[str] = []
    steps._wait_for_dataset(_session(logged, tmp_path / "run"), dataset)  # type: ignore[arg-type]
    assert logged == [
        f"node 1: waiting for node 0 to build {dataset} (checked every 10 s, at most 60 min, or until node 0 gives up)"
    ]
    assert looks == [10.0]


def test_a_dataset_that_never_appears_stops_the_node_with_the_fix(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(steps, "DATA_WAIT_S", 0.0)
    with pytest.raises(LaunchFailed) as err:
        steps._wait_for_dataset(_session([], tmp_path / "run"), tmp_path / "data")  # type: ignore[arg-type]
    assert err.value.code == exit_codes.CONFIG_ERROR and "shared by every node" in str(err.value)


def test_a_node_0_that_gives_up_ends_the_wait_even_when_it_failed_first(tmp_path: Path, monkeypatch) -> None:
    """Node 0's build failed (exit 2) while this node was still starting: its first look stops it, instead of
    keeping its GPUs for an hour. Another node's end does not count."""
    session = _session([], tmp_path / "run")
    session.events.write("session_start", node_rank=0)
    session.events.write("session_end", exit_code=0, node_rank=2)
    session.events.write("session_end", exit_code=exit_codes.CONFIG_ERROR, node_rank=0)
    monkeypatch.setattr(steps.time, "sleep", lambda s: pytest.fail("waited on a node 0 that gave up"))
    with pytest.raises(LaunchFailed) as err:
        steps._wait_for_dataset(session, tmp_path / "data")  # type: ignore[arg-type]
    assert err.value.code == exit_codes.CONFIG_ERROR
    assert f"node 0 ended its session with exit 2 (not retried) without building {tmp_path / 'data'}" in str(
        err.value
    )
    assert str(tmp_path / "run" / "launch" / "launch.log") in str(err.value)


@pytest.mark.parametrize(
    "code", [exit_codes.SAVED_RETRY, exit_codes.NODE_FAULT, exit_codes.HUNG, 128 + 15, 1]
)
def test_a_node_0_its_orchestrator_replaces_is_waited_for(tmp_path: Path, monkeypatch, code: int) -> None:
    """A preempted, faulty or hung node 0 is retried by its Job: the other nodes wait for the new pod's dataset
    (exiting 2 would fail the whole Job)."""
    session = _session([], tmp_path / "run")
    session.events.write("session_end", exit_code=code, node_rank=0)
    dataset = tmp_path / "data"
    monkeypatch.setattr(steps.time, "sleep", lambda s: dataset.mkdir())
    steps._wait_for_dataset(session, dataset)  # type: ignore[arg-type]


def test_node_0s_newest_session_decides_and_an_old_end_does_not_count() -> None:
    now = 1_000_000.0
    end = {"event": "session_end", "exit_code": 2, "node_rank": 0, "time": now - 60}
    assert steps.node_zero_gave_up([end], since=now) == end
    restarted = {"event": "session_start", "node_rank": 0, "time": now - 30}
    assert steps.node_zero_gave_up([end, restarted], since=now) is None  # the user started node 0 again
    yesterday = {**end, "time": now - 86_400}
    assert steps.node_zero_gave_up([yesterday], since=now) is None
    assert steps.node_zero_gave_up([{**end, "time": now - steps.NODE_ZERO_END_SLACK_S + 1}], since=now)
    assert steps.node_zero_gave_up([{**end, "node_rank": 1}], since=now) is None
    assert steps.node_zero_gave_up([{**end, "exit_code": 75}], since=now) is None
    assert steps.node_zero_gave_up([{**end, "time": "garbled"}], since=now) is None
    # the user fixed node 0's configuration and relaunched within minutes: this node's session of the failed
    # launch ended after node 0's end, so that end is not this launch's; node 0's new start has not come yet
    mine_before = {"event": "session_end", "exit_code": 2, "node_rank": 1, "time": now - 50}
    assert steps.node_zero_gave_up([end, mine_before], since=now, node_rank=1) is None
    mine_now = {"event": "session_start", "node_rank": 1, "time": now + 0.01}  # this session's own start
    assert steps.node_zero_gave_up([end, mine_now], since=now, node_rank=1) == end


def test_node_ranks_declaration_states_the_wait_the_step_makes() -> None:
    from trm.launch.config.variables import ENV_VARS

    (node_rank,) = [var for var in ENV_VARS if var.name == "NODE_RANK"]
    assert (
        f"checked every {steps.DATA_POLL_S:g} s, at most {steps.DATA_WAIT_S / 60:.0f} min" in node_rank.help
    )
