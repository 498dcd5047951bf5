"""The launch's own steps: the wait of nodes other than 0 for node 0's dataset."""

from __future__ import annotations

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
        f"node 1: waiting for node 0 to build {dataset} (checked every 10 s, at most 60 min, or until node 0 ends its session)"
    ]
    assert looks == [10.0]


def test_a_dataset_that_never_appears_stops_the_node_with_the_fix(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(steps, "DATA_WAIT_S", 0.0)
    with pytest.raises(LaunchFailed) as err:
        steps._wait_for_dataset(_session([], tmp_path / "run"), tmp_path / "data")  # type: ignore[arg-type]
    assert err.value.code == exit_codes.CONFIG_ERROR and "shared by every node" in str(err.value)


def test_a_node_0_that_ends_its_session_ends_the_wait_at_once(tmp_path: Path, monkeypatch) -> None:
    """Node 0's build failed: the other nodes stop at their next look instead of keeping their GPUs for an hour.
    An earlier session's end (node 0's last launch) does not count, nor does another node's end."""
    session = _session([], tmp_path / "run")
    session.events.write("session_end", exit_code=2, node_rank=0)  # yesterday's launch
    looks: list[float] = []

    def meanwhile(seconds: float) -> None:
        looks.append(seconds)
        assert len(looks) <= 2, "node 0's end did not end the wait"
        if len(looks) == 1:
            session.events.write("session_end", exit_code=0, node_rank=2)
        else:
            session.events.write("session_end", exit_code=3, node_rank=0)

    monkeypatch.setattr(steps.time, "sleep", meanwhile)
    with pytest.raises(LaunchFailed) as err:
        steps._wait_for_dataset(session, tmp_path / "data")  # type: ignore[arg-type]
    assert looks == [10.0, 10.0] and err.value.code == exit_codes.CONFIG_ERROR
    assert f"node 0 ended its session (exit 3) without building {tmp_path / 'data'}" in str(err.value)
    assert str(tmp_path / "run" / "launch" / "launch.log") in str(err.value)


def test_node_ranks_declaration_states_the_wait_the_step_makes() -> None:
    from trm.launch.config.variables import ENV_VARS

    (node_rank,) = [var for var in ENV_VARS if var.name == "NODE_RANK"]
    assert (
        f"checked every {steps.DATA_POLL_S:g} s, at most {steps.DATA_WAIT_S / 60:.0f} min" in node_rank.help
    )
