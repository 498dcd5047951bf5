"""The launch's own steps: the wait of nodes other than 0 for node 0's dataset."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from trm import exit_codes
from trm.launch.launcher import steps
from trm.launch.plan.plan import LaunchFailed


def _session(logged: list[str]) -> SimpleNamespace:
    return SimpleNamespace(
        settings=SimpleNamespace(node_rank=1),
        console=SimpleNamespace(log=logged.append),
        supervisor=SimpleNamespace(stop_reason=None),
    )


def test_a_node_waiting_for_the_dataset_says_how_long_and_finds_it(tmp_path: Path, monkeypatch) -> None:
    dataset = tmp_path / "data"
    looks: list[float] = []

    def node_zero_builds(seconds: float) -> None:
        looks.append(seconds)
        dataset.mkdir()

    monkeypatch.setattr(steps.time, "sleep", node_zero_builds)
    logged: list[str] = []
    steps._wait_for_dataset(_session(logged), dataset)  # type: ignore[arg-type]
    assert logged == [f"node 1: waiting for node 0 to build {dataset} (checked every 10 s, at most 60 min)"]
    assert looks == [10.0]


def test_a_dataset_that_never_appears_stops_the_node_with_the_fix(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(steps, "DATA_WAIT_S", 0.0)
    with pytest.raises(LaunchFailed) as err:
        steps._wait_for_dataset(_session([]), tmp_path / "data")  # type: ignore[arg-type]
    assert err.value.code == exit_codes.CONFIG_ERROR and "shared by every node" in str(err.value)


def test_node_ranks_declaration_states_the_wait_the_step_makes() -> None:
    from trm.launch.config.variables import ENV_VARS

    (node_rank,) = [var for var in ENV_VARS if var.name == "NODE_RANK"]
    assert (
        f"checked every {steps.DATA_POLL_S:g} s, at most {steps.DATA_WAIT_S / 60:.0f} min" in node_rank.help
    )
