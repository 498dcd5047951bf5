"""A restart policy (Docker's `--restart on-failure`, a recreated Kubernetes Job, a Vast.ai on-start hook)
starts the launcher again with the same environment and run directory. The run's ledger
(trm.launch.supervision.ledger) keeps that from training in a loop after a terminal end, and MAX_HOURS bounds the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trm import exit_codes
from trm.launch.supervision.ledger import RunLedger, admit, last_launch_refused

ROOT = Path(__file__).resolve().parents[3]
FAKE_DIR = ROOT / "tests" / "fixtures" / "launch"
RUN_NAME = "trm-restarted"


def launcher_env(tmp_path: Path, **env: str) -> dict[str, str]:
    drop = ("TASK", "RUN_NAME", "MAX_HOURS", "CONTINUE_RUN")
    return {
        **{k: v for k, v in os.environ.items() if k not in drop},
        "PYTHONPATH": os.pathsep.join([str(FAKE_DIR), str(ROOT)]),
        "TASK": "debug-tiny",
        "RUN_NAME": RUN_NAME,
        "NUM_GPUS": "0",
        "CPU_PROCS": "1",
        "WORKSPACE": str(tmp_path / "ws"),
        "PYTHON": sys.executable,
        "SMOKE_STEPS": "0",
        "PREFLIGHT": "0",
        **env,
    }


def docker_on_failure(env: dict[str, str], max_starts: int = 4) -> list[tuple[int, str]]:
    """What `docker run --restart on-failure` does: start again, same environment, while the exit is not 0."""
    starts: list[tuple[int, str]] = []
    while len(starts) < max_starts:
        proc = subprocess.run(
            [sys.executable, str(FAKE_DIR / "launch_fake.py")],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        starts.append((proc.returncode, proc.stdout + proc.stderr))
        if proc.returncode == 0:
            break
    return starts


def launch_dir(tmp_path: Path) -> Path:
    return tmp_path / "ws" / "checkpoints" / RUN_NAME / "launch"


def train_attempts(tmp_path: Path) -> int:
    return (launch_dir(tmp_path) / "train.log").read_text().count("===== train attempt")


@pytest.mark.slow
@pytest.mark.launch
@pytest.mark.dist
def test_a_nonfinite_end_stops_the_restart_loop_until_continued_once(tmp_path):
    env = launcher_env(tmp_path, FAKE_TRAINER_MODE="nonfinite")
    starts = docker_on_failure(env)
    assert [code for code, _ in starts] == [exit_codes.NONFINITE, exit_codes.OK], starts
    refused = starts[1][1]
    assert "ended with exit 78" in refused and "does not train again" in refused
    assert "CONTINUE_RUN=end1-exit78" in refused
    assert train_attempts(tmp_path) == 1  # the restart trained nothing
    assert last_launch_refused(launch_dir(tmp_path))

    # The documented override starts it once more; left in the environment, it does not reopen the loop.
    starts = docker_on_failure({**env, "CONTINUE_RUN": "end1-exit78"})
    assert [code for code, _ in starts] == [exit_codes.NONFINITE, exit_codes.OK], starts
    assert "continuing after end1-exit78" in starts[0][1]
    assert "CONTINUE_RUN=end2-exit78" in starts[1][1]
    assert train_attempts(tmp_path) == 2

    # A changed configuration (the fix: other trainer overrides) trains without the override.
    starts = docker_on_failure({**env, "FAKE_TRAINER_MODE": "finish", "TRAIN_OVERRIDES": "lr=1e-5"})
    assert [code for code, _ in starts] == [exit_codes.OK], starts
    assert "the train command has changed since" in starts[0][1] and "training finished" in starts[0][1]
    assert not last_launch_refused(launch_dir(tmp_path))


@pytest.mark.slow
@pytest.mark.launch
@pytest.mark.dist
def test_the_budget_belongs_to_the_run_across_restarts(tmp_path):
    env = launcher_env(
        tmp_path, FAKE_TRAINER_MODE="wait", MAX_HOURS="0.004", STOP_MARGIN_MINUTES="0", GPU_HOURLY_USD="2",
        FAKE_STEP_SECONDS="0.3",
    )  # fmt: skip
    starts = docker_on_failure(env)
    assert [code for code, _ in starts] == [exit_codes.BUDGET_STOPPED, exit_codes.OK], starts
    assert "stop requested (cost guard: MAX_HOURS reached" in starts[0][1]
    assert "has spent" in starts[1][1] and "raise MAX_HOURS above" in starts[1][1]
    assert train_attempts(tmp_path) == 1
    ledger = json.loads((launch_dir(tmp_path) / "ledger.json").read_text())
    assert ledger["hours"] >= 0.004 and ledger["sessions"] == 1 and ledger["end"]["exit_code"] == 79

    # Raising MAX_HOURS continues the run: the new session gets what is left, not a fresh MAX_HOURS.
    starts = docker_on_failure({**env, "MAX_HOURS": "0.008"})
    assert [code for code, _ in starts] == [exit_codes.BUDGET_STOPPED, exit_codes.OK], starts
    assert "continuing after end1-exit79" in starts[0][1] and "the run has spent 0.004" in starts[0][1]
    ledger = json.loads((launch_dir(tmp_path) / "ledger.json").read_text())
    assert 0.008 <= ledger["hours"] < 0.011, ledger  # about one more 0.004 h, not another 0.008 h
    assert ledger["sessions"] == 2 and ledger["usd"] > 0
    assert train_attempts(tmp_path) == 2


@pytest.mark.dist
@pytest.mark.e2e
def test_out_of_memory_even_at_micro_batch_1_stops_the_restart_loop(tmp_path):
    """Every micro-batch runs out of memory: the launcher steps 2 -> 1, then exits 80 with one clear line and
    records the end; the restart policy's next start exits 0 without training."""
    env = launcher_env(tmp_path, FAKE_OOM_ABOVE="0", MICRO_BATCH_SIZE="2", FAKE_STEP_SECONDS="0.05")
    starts = docker_on_failure(env)
    assert [code for code, _ in starts] == [exit_codes.OUT_OF_MEMORY, exit_codes.OK], starts
    assert "train attempt 2 ran out of GPU memory even at micro-batch 1 (exit 80)" in starts[0][1]
    assert "ended with exit 80" in starts[1][1] and "even at micro-batch 1" in starts[1][1]
    assert train_attempts(tmp_path) == 2
    ledger = json.loads((launch_dir(tmp_path) / "ledger.json").read_text())
    assert ledger["end"]["exit_code"] == exit_codes.OUT_OF_MEMORY


def _ledger(tmp_path: Path, hours: float = 0.0) -> RunLedger:
    return RunLedger(tmp_path / "ledger.json", hours=hours)


def test_admission_rules(tmp_path):
    spent = _ledger(tmp_path, hours=9.9)
    assert admit(spent, max_hours=10, margin_minutes=10, config="a", continue_id="").refusal
    assert admit(spent, max_hours=12, margin_minutes=10, config="a", continue_id="").refusal is None
    assert admit(spent, max_hours=None, margin_minutes=10, config="a", continue_id="").refusal is None
    ended = _ledger(tmp_path)
    ended.record_end(exit_codes.CONFIG_ERROR, "a")
    assert admit(ended, max_hours=None, margin_minutes=10, config="a", continue_id="x").refusal
    assert ended.end is not None  # a refusal keeps the end
    assert admit(ended, max_hours=None, margin_minutes=10, config="b", continue_id="").refusal is None
    assert ended.end is None  # a changed configuration clears it


def test_the_ledger_survives_a_save_and_names_a_broken_file(tmp_path):
    ledger = _ledger(tmp_path, hours=1.5)
    ledger.path = tmp_path / "launch" / "ledger.json"
    ledger.path.parent.mkdir()
    ledger.record_end(exit_codes.NONFINITE, "cfg")
    ledger.save()
    again = RunLedger.load(ledger.path.parent)
    assert again.hours == 1.5 and again.end is not None and again.end["id"] == "end1-exit78"
    ledger.path.write_text("{not json")
    from trm.errors import TRMError

    with pytest.raises(TRMError, match=r"ledger\.json is unreadable.*delete it"):
        RunLedger.load(ledger.path.parent)


def test_a_refused_launch_releases_nothing(tmp_path, monkeypatch):
    """A refusal exits 0, which ON_END would take for a finished run: the launcher keeps the machine (its
    at-exit steps run only for a launch that was admitted)."""
    import signal

    from trm.launch.config.settings import LaunchSettings
    from trm.launch.launcher.runner import Launch
    from trm.launch.plan.plan import build_plan
    from trm.launch.provider import release
    from trm.launch.supervision.supervisor import Console

    env = {"TASK": "debug-tiny", "NUM_GPUS": "0", "WORKSPACE": str(tmp_path), "RUN_NAME": RUN_NAME,
           "ON_END": "stop", "RELEASE_VIA": "host", "MAX_HOURS": "0.5"}  # fmt: skip
    settings = LaunchSettings.from_env(env)
    ledger = RunLedger.load(settings.launch_dir)
    ledger.hours = 1.0  # MAX_HOURS is spent: the launch is refused
    ledger.save()
    calls = []
    monkeypatch.setattr(release, "release", lambda *args, **kwargs: calls.append(args))
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        launch = Launch(build_plan(settings, [], env), env, Console(settings.launch_dir / "launch.log"))
        assert launch.run() == exit_codes.OK
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    assert calls == []
    assert last_launch_refused(settings.launch_dir)
    assert "handoff" not in (settings.launch_dir / "launch.log").read_text()
