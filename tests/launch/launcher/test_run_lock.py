"""The launcher owns its run directory for its whole session (trm.runlock): a second launcher on the same
run exits 2 naming the first and touches nothing; the first one's trainer is never refused; a launcher
killed with SIGKILL leaves no stale lock. And a launcher that fails itself after admission is recorded in
the ledger, so that a restart policy does not repeat it forever."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.launch.supervision.test_ledger import FAKE_DIR, launch_dir, launcher_env
from trm import exit_codes
from trm.launch.config.settings import LaunchSettings
from trm.launch.launcher.runner import Launch
from trm.launch.plan.plan import build_plan
from trm.launch.supervision.ledger import RunLedger, admit
from trm.launch.supervision.supervisor import Console
from trm.runlock import RunLock


@pytest.fixture
def restore_signals():
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def in_process_launch(tmp_path: Path, **env: str) -> Launch:
    environ = {"TASK": "debug-tiny", "NUM_GPUS": "0", "WORKSPACE": str(tmp_path / "ws"), "RUN_NAME": "locked",
               "PREFLIGHT": "0", "SMOKE_STEPS": "0", "PYTHON": sys.executable, **env}  # fmt: skip
    settings = LaunchSettings.from_env(environ)
    plan = build_plan(settings, [], environ)
    plan.dataset_dir.mkdir(parents=True, exist_ok=True)
    plan.verify_command = lambda: [sys.executable, "-c", "print('verified')"]  # type: ignore[method-assign]
    return Launch(plan, environ, Console(settings.launch_dir / "launch.log"))


def snapshot(run_dir: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(run_dir)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(run_dir.rglob("*"))
        if p.is_file()
    }


def test_a_second_launcher_exits_2_and_touches_nothing(tmp_path, restore_signals, capsys):
    launch = in_process_launch(tmp_path)
    run_dir = launch.settings.run_dir
    ledger = RunLedger.load(launch.settings.launch_dir)
    ledger.hours, ledger.sessions = 1.25, 1
    ledger.save()
    (run_dir / "step_3").mkdir(parents=True)
    (run_dir / "step_3" / "COMPLETE").write_text("3\n")
    first = RunLock(run_dir, "launch").acquire("python -m trm launch (the first)")
    before = snapshot(run_dir)
    try:
        # Before: the second launcher was admitted, counted a session in the ledger and trained beside the first.
        assert launch.run() == exit_codes.CONFIG_ERROR
    finally:
        first.release()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"pid {os.getpid()}" in err and "(the first)" in err
    assert snapshot(run_dir) == before  # ledger, step_N, logs: all as the first one left them


@pytest.mark.e2e
@pytest.mark.launch
@pytest.mark.dist
def test_two_launchers_on_one_run_then_sigkill_of_the_first(tmp_path):
    env = launcher_env(tmp_path, FAKE_TRAINER_MODE="wait", FAKE_STEP_SECONDS="0.3")
    run_dir = launch_dir(tmp_path).parent
    first = subprocess.Popen(
        [sys.executable, str(FAKE_DIR / "launch_fake.py")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 120
        while not list(run_dir.glob("step_*/COMPLETE")):  # its trainer runs under its lock
            assert first.poll() is None and time.time() < deadline, "the first launcher did not train"
            time.sleep(0.2)
        ledger = (launch_dir(tmp_path) / "ledger.json").read_bytes()
        second = subprocess.run(
            [sys.executable, str(FAKE_DIR / "launch_fake.py")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode == exit_codes.CONFIG_ERROR, second.stdout + second.stderr
        assert f"pid {first.pid}" in second.stderr and "launch_fake.py" in second.stderr
        assert (launch_dir(tmp_path) / "ledger.json").read_bytes() == ledger
        assert "===== train attempt 2" not in (launch_dir(tmp_path) / "train.log").read_text()
        # SIGKILL of the launcher: its torchrun keeps the lock (it inherited it) while it still trains, so
        # a new launcher is still refused; once that is gone too the kernel has released the lock.
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        again = subprocess.run(
            [sys.executable, str(FAKE_DIR / "launch_fake.py")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert again.returncode == exit_codes.CONFIG_ERROR and "has exited" in again.stderr, again.stderr
    finally:
        for pid in [*orphans(tmp_path), first.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(os.getpgid(pid), signal.SIGKILL)
        first.wait(timeout=30)
    deadline = time.time() + 60
    while orphans(tmp_path) and time.time() < deadline:
        time.sleep(0.2)
    finished = subprocess.run(
        [sys.executable, str(FAKE_DIR / "launch_fake.py")],
        env={**env, "FAKE_TRAINER_MODE": "finish"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert finished.returncode == exit_codes.OK, finished.stdout + finished.stderr


def orphans(tmp_path: Path) -> list[int]:
    """Processes this test started that outlived their launcher (they name its workspace on their command line)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if str(tmp_path) in cmdline and int(proc.name) != os.getpid():
            found.append(int(proc.name))
    return found


def test_a_launcher_failure_after_admission_is_recorded_and_not_repeated(tmp_path, restore_signals):
    launch = in_process_launch(tmp_path)

    def broken(step):
        raise ValueError("cannot convert float NaN to integer")

    launch.actions = dataclasses.replace(launch.actions, hardware=broken)
    # Before: exit 1 and nothing recorded, so Docker's on-failure policy started it again forever.
    assert launch.run() == 1
    log = (launch.settings.launch_dir / "launch.log").read_text()
    assert "the launcher failed after admission (ValueError: cannot convert float NaN to integer)" in log
    ledger = RunLedger.load(launch.settings.launch_dir)
    assert ledger.end is not None and ledger.end["id"] == "end1-exit1"

    restarted = in_process_launch(tmp_path)  # a new launcher: its hardware step is the real one
    assert restarted.run() == exit_codes.OK  # the restart policy stops here
    log = (restarted.settings.launch_dir / "launch.log").read_text()
    assert (
        "ended with exit 1" in log
        and "launcher failed after admission" in log
        and "CONTINUE_RUN=end1-exit1" in log
    )
    assert not (restarted.settings.launch_dir / "train.log").exists()
    ledger = RunLedger.load(restarted.settings.launch_dir)
    assert ledger.sessions == 1 and ledger.refused_at is not None
    same = dict(max_hours=None, margin_minutes=10, config=ledger.end["config"])  # type: ignore[index]
    assert admit(ledger, **same, continue_id="end1-exit1").refusal is None  # CONTINUE_RUN still overrides
