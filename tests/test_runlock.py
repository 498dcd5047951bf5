"""One owner per run directory (trm.runlock): a second launcher or trainer exits 2 naming the holder, and a
holder killed with SIGKILL leaves no stale lock."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from trm import exit_codes
from trm.runlock import HOLDER_ENV, LOCK_FILE, RunLock, RunLocked, read_holder, trainer_lock

ROOT = Path(__file__).resolve().parents[1]
HOLD = """
import sys, time
from trm.runlock import RunLock
RunLock(sys.argv[1], "launch").acquire("holder-for-test " + sys.argv[1])
print("held", flush=True)
time.sleep(600)
"""


def hold_in_another_process(run_dir: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run_dir)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_owner_is_refused_with_the_holder_named(tmp_path):
    first = RunLock(tmp_path / "run", "launch").acquire("python -m trm launch")
    try:
        with pytest.raises(RunLocked) as refused:
            RunLock(tmp_path / "run", "trainer").acquire("python -m trm.train")
        message = str(refused.value)
        assert refused.value.exit_code == exit_codes.CONFIG_ERROR and "\n" not in message
        assert f"pid {os.getpid()} on host {socket.gethostname()}" in message
        assert "command: python -m trm launch" in message and "this trainer does not start" in message
    finally:
        first.release()
    RunLock(tmp_path / "run", "trainer").acquire("again").release()  # released: free again
    # The record stays in place (never renamed or deleted: the lock belongs to the file's inode).
    assert read_holder(tmp_path / "run" / LOCK_FILE) is not None


def test_sigkill_of_the_holder_leaves_no_stale_lock(tmp_path):
    run_dir = tmp_path / "run"
    holder = hold_in_another_process(run_dir)
    try:
        with pytest.raises(RunLocked, match=rf"pid {holder.pid} on host .*command: holder-for-test"):
            RunLock(run_dir, "launch").acquire("second")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    lock = RunLock(run_dir, "launch").acquire("after the kill")
    try:
        assert json.loads((run_dir / LOCK_FILE).read_text())["command"] == "after the kill"
    finally:
        lock.release()


def test_a_trainer_runs_under_its_launchers_lock_and_nobody_elses(tmp_path):
    run_dir = tmp_path / "run"
    launcher = RunLock(run_dir, "launch").acquire("python -m trm launch")
    try:
        with trainer_lock(run_dir, {HOLDER_ENV: str(os.getpid()), "RANK": "0"}):
            pass  # the launcher's own trainer
        with trainer_lock(run_dir, {"RANK": "1"}):
            pass  # ranks other than 0 never take it
        for env in ({}, {HOLDER_ENV: str(os.getpid() + 1)}, {HOLDER_ENV: "not-a-pid"}):
            with pytest.raises(RunLocked, match="this trainer does not start"), trainer_lock(run_dir, env):
                pytest.fail("a trainer ran beside another owner")
    finally:
        launcher.release()
    # a bare trainer owns the run while it runs
    with trainer_lock(run_dir, {}), pytest.raises(RunLocked, match=r"command: .*"):
        RunLock(run_dir, "launch").acquire("python -m trm launch")
    RunLock(run_dir, "launch").acquire("after the trainer").release()


def test_the_bare_trainer_refuses_a_run_another_process_owns(tmp_path, capsys):
    """`python -m trm.train` on a run directory a launcher (here: another process) owns exits 2 at once,
    naming it, and writes nothing into the run."""
    from trm.train import main

    run_dir = tmp_path / "run"
    holder = hold_in_another_process(run_dir)
    try:
        before = sorted(p.name for p in run_dir.iterdir())
        assert main(["data_paths=[" + str(tmp_path / "data") + "]", f"checkpoint_path={run_dir}"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"pid {holder.pid}" in err and "holder-for-test" in err
        assert sorted(p.name for p in run_dir.iterdir()) == before
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)


def test_the_bare_trainer_holds_the_lock_while_it_trains(tmp_path, monkeypatch):
    from trm.train import main
    from trm.training import loop

    run_dir = tmp_path / "run"
    seen = []

    class Trainer:
        @classmethod
        def create(cls, cfg, info):
            return cls()

        def train(self):
            seen.append(RunLock(run_dir, "launch").try_acquire("probe"))
            return 0

        def close(self):
            pass

    monkeypatch.setattr(loop, "Trainer", Trainer)
    monkeypatch.delenv(HOLDER_ENV, raising=False)
    monkeypatch.delenv("RANK", raising=False)
    assert main(["data_paths=[x]", f"checkpoint_path={run_dir}", "device=cpu"]) == 0
    (holder,) = seen
    assert holder is not None and holder.pid == os.getpid()  # held by the trainer during train()
    RunLock(run_dir, "launch").acquire("after").release()  # and released at its end


def test_a_holder_on_another_host_is_waited_for_a_while(tmp_path):
    """On NFS a dead node's lock lasts until its lease expires: the launcher replacing it waits that long
    when the holder is on another host, then refuses as usual."""
    import threading

    run_dir = tmp_path / "run"
    first = RunLock(run_dir, "launch").acquire("on node a")
    os.ftruncate(first.fd, 0)  # its record, as a launcher on another node wrote it
    os.pwrite(
        first.fd, json.dumps({"pid": 4242, "host": "node-a", "started": "t", "command": "c"}).encode(), 0
    )
    told = []
    with pytest.raises(RunLocked, match="pid 4242 on host node-a"):
        RunLock(run_dir, "launch").acquire("b", wait_other_host_s=0.3, log=told.append, poll_s=0.05)
    assert len(told) == 1 and "waiting up to" in told[0]
    threading.Timer(0.2, first.release).start()  # the lease expires while it waits
    RunLock(run_dir, "launch").acquire("b", wait_other_host_s=30, log=told.append, poll_s=0.05).release()


def test_the_lock_file_never_holds_a_credential_from_the_command_line(tmp_path):
    """The run directory is synced, handed off and published: a key given as an override stays out of it."""
    lock = RunLock(tmp_path, "trainer").acquire(
        "python -m trm.train +wandb_api_key=abc123def lr=1e-4 HF_TOKEN=hf_x"
    )
    try:
        text = (tmp_path / LOCK_FILE).read_text()
        assert "abc123def" not in text and "hf_x" not in text
        assert "+wandb_api_key=*** lr=1e-4 HF_TOKEN=***" in text
    finally:
        lock.release()
