"""SYNC_TO against a real rclone remote on this machine (a local-path remote configured by environment)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import needs_rclone
from trm.errors import TRMError
from trm.launch.storage.sync import (
    Syncer,
    SyncError,
    check_remote,
    prunable,
    remote_complete_steps,
    sync_down,
    sync_up,
)

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def store(tmp_path, monkeypatch) -> str:
    """`store:` is an rclone remote (local backend) defined only by environment, as a user would for S3."""
    monkeypatch.setenv("RCLONE_CONFIG_STORE_TYPE", "local")
    monkeypatch.setenv("RCLONE_CONFIG", str(tmp_path / "no-rclone.conf"))
    (tmp_path / "bucket").mkdir()
    return f"store:{tmp_path / 'bucket'}/runs/r1"


def remote_path(remote: str) -> Path:
    return Path(remote.split(":", 1)[1])


def checkpoint(run_dir: Path, step: int, *, complete: bool = True, size: int = 1000) -> Path:
    folder = run_dir / f"step_{step}"
    folder.mkdir(parents=True)
    (folder / "model.pt").write_bytes(os.urandom(size))
    if complete:
        (folder / "COMPLETE").write_text(f"{step}\n")
    return folder


def make_run(root: Path) -> Path:
    run_dir = root / "checkpoints" / "r1"
    checkpoint(run_dir, 2)
    checkpoint(run_dir, 4, complete=False)  # torn (legacy): never uploaded
    partial = run_dir / ".step_6.partial"
    partial.mkdir()
    (partial / "model.pt").write_bytes(b"half")
    (run_dir / "metrics.csv").write_text("step,wall_time,name,value\n2,1.0,loss,0.5\n")
    (run_dir / "launch").mkdir()
    (run_dir / "launch" / "launch.log").write_text("hello\n")
    checkpoint(run_dir / "launch" / "smoke", 2)  # the smoke gate's scratch run: never uploaded
    (run_dir / ".metrics.csv.abc.tmp").write_text("temp")
    return run_dir


def test_remotes_with_credentials_are_refused():
    assert check_remote("s3:bucket/runs") == "s3:bucket/runs"
    assert check_remote("/mnt/backup") == "/mnt/backup"
    with pytest.raises(TRMError, match="not an rclone remote"):
        check_remote("bucket/runs")
    with pytest.raises(TRMError, match="RCLONE_CONFIG_"):
        check_remote(":s3,access_key_id=AKIA,secret_access_key=x:bucket")


# Credential-shaped values built at run time (literal ones would trip the repository's secret scan).
FAKE = "".join(chr(ord("a") + (7 * i) % 26) for i in range(34))


@pytest.mark.parametrize(
    "remote",
    [
        f"s3remote,secret_access_key={FAKE[:20]}:bucket/runs",  # a named remote's parameters
        f"b2remote,account=acct,key={FAKE[:12]}:bucket",
        f":webdav,url='https://user:{FAKE[:12]}@dav.example.org':runs",  # a URL with a password
        f":azureblob,sas_url='https://a.blob.core.windows.net/c?sv=2022&sig={FAKE[:12]}':runs",
        f"remote:bucket/hf_{FAKE}",  # a vendor token
    ],
)
def test_credentials_anywhere_in_the_remote_are_refused_without_showing_them(remote):
    with pytest.raises(TRMError, match="SYNC_TO holds credentials") as err:
        check_remote(remote)
    assert FAKE[:10] not in str(err.value)
    # a remote named after a key word, or with harmless parameters, is not a credential
    assert check_remote("mykeys:bucket/runs") == "mykeys:bucket/runs"
    assert check_remote("s3remote,provider=AWS:bucket") == "s3remote,provider=AWS:bucket"


def test_rclone_errors_reach_the_log_without_the_remotes_credentials(tmp_path, monkeypatch):
    """rclone's last stderr lines go into the SyncError (launch.log, synced and bundled): the values of
    the RCLONE_CONFIG_*_ credential variables and vendor tokens in them are masked."""
    secret, session = f"{FAKE[:20].upper()}/{FAKE[20:]}", f"Fwo{FAKE[::-1]}"
    fake = tmp_path / "bin" / "rclone"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho 'auth failed: secret {secret} token {session}' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("RCLONE_CONFIG_STORE_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("RCLONE_CONFIG_STORE_SESSION_TOKEN", session)
    with pytest.raises(SyncError, match=r"rclone \w+ failed \(exit 1\): auth failed: secret \*\*\*") as err:
        sync_up(make_run(tmp_path), "store:bucket", print)
    assert secret not in str(err.value) and session not in str(err.value)


@needs_rclone
def test_upload_skips_partial_and_torn_checkpoints_and_is_incremental(tmp_path, store):
    run_dir = make_run(tmp_path)
    handoff = tmp_path / "artifacts" / "r1"
    handoff.mkdir(parents=True)
    (handoff / "handoff.json").write_text("{}")
    sync_up(run_dir, store, print, handoff_dir=handoff)
    dest = remote_path(store)
    assert (dest / "step_2" / "COMPLETE").is_file() and (dest / "step_2" / "model.pt").is_file()
    assert not (dest / "step_4").exists() and not (dest / ".step_6.partial").exists()
    assert not (dest / ".metrics.csv.abc.tmp").exists()
    assert (dest / "metrics.csv").is_file() and (dest / "launch" / "launch.log").is_file()
    assert not (dest / "launch" / "smoke").exists()
    assert (dest / "handoff" / "handoff.json").is_file()
    # incremental: an unchanged file is not copied again; a new checkpoint is; nothing is deleted remotely
    copied = dest / "metrics.csv"
    stamp = copied.stat().st_mtime_ns
    copied.write_text("X" * len((run_dir / "metrics.csv").read_text()))  # same size and time: "unchanged"
    os.utime(copied, ns=(stamp, stamp))
    shutil.rmtree(run_dir / "step_2")
    checkpoint(run_dir, 8)
    sync_up(run_dir, store, print)
    assert (dest / "step_8" / "COMPLETE").is_file() and (dest / "step_2" / "COMPLETE").is_file()
    assert copied.read_text().startswith("XXX")  # not copied again
    assert remote_complete_steps(store, print) == ["step_2", "step_8"]


@needs_rclone
@pytest.mark.e2e
def test_an_interrupted_upload_is_never_restored_and_the_next_upload_finishes_it(tmp_path, store):
    run_dir = make_run(tmp_path)
    sync_up(run_dir, store, print)
    big = checkpoint(run_dir, 10, size=8 * 1024 * 1024)
    (big / "optimizer.pt").write_bytes(os.urandom(4 * 1024 * 1024))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RCLONE_BWLIMIT": "1M"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "trm", "sync", str(run_dir), store],
        env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    dest = remote_path(store) / "step_10"
    deadline = time.time() + 60
    while not any(dest.glob("*")) and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)  # the machine vanished mid-upload
    proc.wait()
    assert dest.is_dir() and not (dest / "COMPLETE").exists()
    assert remote_complete_steps(store, print) == ["step_2"]
    # A new machine restores the newest checkpoint that is complete on the remote: step_2, not step_10.
    new = tmp_path / "new-machine" / "r1"
    assert sync_down(store, new, print) == "step_2"
    assert not (new / "step_10").exists() and (new / "metrics.csv").is_file()
    # The next upload finishes step_10, COMPLETE last; a restore then brings it back byte for byte.
    sync_up(run_dir, store, print)
    assert (dest / "COMPLETE").is_file()
    again = tmp_path / "third-machine" / "r1"
    subprocess.run([sys.executable, "-m", "trm", "sync", "--from", store, str(again)], env=env, check=True)
    for name in ("model.pt", "optimizer.pt", "COMPLETE"):
        assert (again / "step_10" / name).read_bytes() == (big / name).read_bytes()
    assert not (again / "step_2").exists()  # only the newest checkpoint comes back
    assert not (again / "handoff").exists()


@needs_rclone
def test_background_syncer_uploads_while_training_and_retries_with_backoff(tmp_path, store):
    run_dir = make_run(tmp_path)
    lines: list[str] = []
    syncer = Syncer(run_dir, store, lines.append, every_s=0.2, backoff_s=0.01)
    syncer.start()
    checkpoint(run_dir, 12)
    deadline = time.time() + 30
    while not (remote_path(store) / "step_12" / "COMPLETE").exists() and time.time() < deadline:
        time.sleep(0.1)
    assert (remote_path(store) / "step_12" / "COMPLETE").exists(), lines
    assert syncer.final()
    broken = Syncer(run_dir, "nosuchremote:bucket", lines.append, backoff_s=0.01, retries=2)
    assert not broken.final()
    text = "\n".join(lines)
    assert (
        text.count("retry in") == 2
        and "giving up" in text
        and "final sync to nosuchremote:bucket: FAILED" in text
    )


def fake_rclone(tmp_path: Path, monkeypatch, exit_code: int) -> Path:
    """An rclone on PATH that appends a line to the returned file at each call and exits `exit_code`."""
    calls = tmp_path / "rclone-calls"
    fake = tmp_path / "bin" / "rclone"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho \"$1\" >> '{calls}'\necho 'rclone says no' >&2\nexit {exit_code}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    return calls


@pytest.mark.parametrize("exit_code", [6, 7])
def test_an_error_rclone_says_no_retry_fixes_is_not_retried(tmp_path, monkeypatch, exit_code):
    """rclone's exit 6 (no retry) and 7 (fatal) end the upload at once, where a retryable one waits out the
    backoff: a final sync must not keep a billed machine for minutes on an error that cannot pass."""
    run_dir = make_run(tmp_path)
    calls = fake_rclone(tmp_path, monkeypatch, exit_code)
    lines: list[str] = []
    sleeps: list[float] = []
    monkeypatch.setattr(time, "sleep", sleeps.append)
    assert not Syncer(run_dir, "store:bucket", lines.append).final()
    assert len(calls.read_text().splitlines()) == 1 and sleeps == []
    assert "giving up: no retry can fix this" in lines[0] and "retry in" not in "\n".join(lines)
    assert f"FAILED (rclone copy failed (exit {exit_code}): rclone says no)" in lines[-1]


def test_a_retryable_rclone_error_is_retried_with_doubling_waits(tmp_path, monkeypatch):
    run_dir = make_run(tmp_path)
    calls = fake_rclone(tmp_path, monkeypatch, 5)  # rclone's "temporary error"
    sleeps: list[float] = []
    monkeypatch.setattr(time, "sleep", sleeps.append)
    assert not Syncer(run_dir, "store:bucket", print, retries=3, backoff_s=15).final()
    assert len(calls.read_text().splitlines()) == 4 and sleeps == [15, 30, 60]


def test_without_rclone_the_final_sync_gives_up_at_once(tmp_path, monkeypatch):
    """The launch stops at its sync step when rclone is missing; its at-exit final sync then fails at once
    (it used to wait 15+30+60+120 s before giving up)."""
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "rclone" else "/bin/true")
    sleeps: list[float] = []
    monkeypatch.setattr(time, "sleep", sleeps.append)
    lines: list[str] = []
    assert not Syncer(make_run(tmp_path), "store:bucket", lines.append).final()
    assert sleeps == [] and "rclone is not installed" in lines[-1] and "no retry can fix this" in lines[0]


def test_a_launch_without_rclone_stops_before_training_with_the_fix(tmp_path, monkeypatch):
    import io

    from trm import exit_codes
    from trm.launch.config.settings import LaunchSettings
    from trm.launch.launcher.runner import Launch
    from trm.launch.plan.plan import LaunchFailed, build_plan
    from trm.launch.supervision.supervisor import Console

    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "rclone" else "/bin/true")
    env = {"TASK": "debug-tiny", "NUM_GPUS": "0", "WORKSPACE": str(tmp_path), "SYNC_TO": "s3:bucket/runs"}
    settings = LaunchSettings.from_env(env)
    plan = build_plan(settings, [], env)
    launch = Launch(plan, env, Console(None, io.StringIO()))
    with pytest.raises(LaunchFailed, match="apt-get install -y rclone") as err:
        launch.actions.sync(plan.sync_step())
    assert err.value.code == exit_codes.CONFIG_ERROR


@needs_rclone
def test_restoring_a_run_that_was_never_copied(tmp_path, store):
    from trm.launch.storage.sync import SyncError

    with pytest.raises(SyncError):
        sync_down(store, tmp_path / "run", print)  # a typo in the remote is an error...
    assert sync_down(store, tmp_path / "run", print, missing_ok=True) is None  # ...unless asked for


def test_prunable_keeps_the_newest_and_everything_still_local():
    remote = ["step_2", "step_4", "step_6", "step_8"]
    assert prunable(remote, {"step_6", "step_8"}) == ["step_2", "step_4"]
    assert prunable(remote, set()) == ["step_2", "step_4", "step_6"]  # the newest stays, even gone locally
    assert prunable(remote, {"step_2", "step_4", "step_6", "step_8"}) == []
    assert prunable(["step_8"], set()) == [] and prunable([], {"step_2"}) == []


@needs_rclone
def test_the_remote_follows_local_pruning_but_keeps_its_newest_checkpoint(tmp_path, store):
    run_dir = tmp_path / "checkpoints" / "r1"
    for step in (2, 4, 6):
        checkpoint(run_dir, step)
    assert sync_up(run_dir, store, print, prune=True) == []
    dest = remote_path(store)
    torn = dest / "step_3"  # an upload of step_3 cut off before the trainer pruned it: not complete there
    torn.mkdir()
    (torn / "model.pt").write_bytes(b"half")

    # the trainer saved step_8 and pruned step_2 and step_4 (CHECKPOINT_KEEP=2); step_10 is being saved
    shutil.rmtree(run_dir / "step_2")
    shutil.rmtree(run_dir / "step_4")
    checkpoint(run_dir, 8)
    checkpoint(run_dir, 10, complete=False)
    lines: list[str] = []
    assert sync_up(run_dir, store, lines.append, prune=True) == ["step_2", "step_4"]
    assert sorted(p.name for p in dest.iterdir() if p.name.startswith("step_")) == [
        "step_3",
        "step_6",
        "step_8",
    ]
    assert remote_complete_steps(store, print) == ["step_6", "step_8"]
    assert any("pruned step_2" in line for line in lines)

    # every local checkpoint gone (a new machine before its restore, a wiped disk): the newest copy stays
    for step in (6, 8, 10):
        shutil.rmtree(run_dir / f"step_{step}")
    assert sync_up(run_dir, store, print, prune=True) == ["step_6"]
    assert remote_complete_steps(store, print) == ["step_8"]
    restored = tmp_path / "new-machine" / "r1"
    assert sync_down(store, restored, print) == "step_8"
    assert (restored / "step_8" / "COMPLETE").is_file()


@needs_rclone
def test_without_prune_the_remote_keeps_every_checkpoint(tmp_path, store):
    run_dir = tmp_path / "checkpoints" / "r1"
    checkpoint(run_dir, 2)
    checkpoint(run_dir, 4)
    sync_up(run_dir, store, print)
    shutil.rmtree(run_dir / "step_2")
    checkpoint(run_dir, 6)
    syncer = Syncer(run_dir, store, print, prune=False)
    assert syncer.sync_with_retries()
    assert remote_complete_steps(store, print) == ["step_2", "step_4", "step_6"]
    syncer.prune = True
    assert syncer.sync_with_retries()
    assert remote_complete_steps(store, print) == ["step_4", "step_6"]


def test_sync_prune_is_on_by_default_and_reaches_the_syncer(tmp_path):
    from trm.launch.config.settings import LaunchSettings

    env = {"WORKSPACE": str(tmp_path), "SYNC_TO": "store:bucket"}
    assert LaunchSettings.from_env(env).syncer(print).prune is True
    assert LaunchSettings.from_env({**env, "SYNC_PRUNE": "off"}).syncer(print).prune is False


@needs_rclone
def test_the_sync_command_prunes_only_when_asked(tmp_path, store, capsys):
    from trm.commands import main

    run_dir = tmp_path / "checkpoints" / "r1"
    checkpoint(run_dir, 2)
    checkpoint(run_dir, 4)
    assert main(["sync", str(run_dir), store]) == 0
    shutil.rmtree(run_dir / "step_2")
    checkpoint(run_dir, 6)
    assert main(["sync", str(run_dir), store]) == 0
    assert remote_complete_steps(store, print) == ["step_2", "step_4", "step_6"]
    assert main(["sync", str(run_dir), store, "--prune"]) == 0
    assert remote_complete_steps(store, print) == ["step_4", "step_6"]
    assert "pruned step_2" in capsys.readouterr().out


@needs_rclone
def test_a_restore_replaces_only_older_files_and_refuses_a_folder_that_is_no_run(tmp_path, store):
    run_dir = make_run(tmp_path)
    (run_dir / "launch" / "ledger.json").write_text('{"hours": 1.0}\n')
    (run_dir / "run.json").write_text("{}\n")
    sync_up(run_dir, store, print)
    # The same disk after a restart: its own records went on past the last upload; a user's note beside.
    kept = tmp_path / "kept" / "r1"
    kept.mkdir(parents=True)
    (kept / "launch").mkdir()
    (kept / "launch" / "ledger.json").write_text('{"hours": 7.25, "sessions": 3}\n')
    (kept / "metrics.csv").write_text("mine\n")
    (kept / "notes.txt").write_text("my notes\n")
    before = {p: p.read_bytes() for p in kept.rglob("*") if p.is_file()}
    lines: list[str] = []
    assert sync_down(store, kept, lines.append) == "step_2"
    assert {p: p.read_bytes() for p in before} == before  # newer than the remote's: every byte as it was
    assert (kept / "run.json").is_file() and (kept / "launch" / "launch.log").is_file()  # what was missing
    assert (kept / "step_2" / "model.pt").read_bytes() == (run_dir / "step_2" / "model.pt").read_bytes()
    assert any("replaced only by a newer copy" in line for line in lines)
    # A copy older than what another machine uploaded since is brought up to date.
    stale = kept / "launch" / "ledger.json"
    os.utime(stale, (1_000_000_000, 1_000_000_000))
    assert sync_down(store, kept, print) == "step_2"
    assert stale.read_text() == '{"hours": 1.0}\n'
    # A checkpoint complete there already is left alone; a restore cut off before COMPLETE is finished.
    (kept / "step_2" / "model.pt").write_bytes(b"local")
    assert sync_down(store, kept, print) == "step_2"
    assert (kept / "step_2" / "model.pt").read_bytes() == b"local"
    (kept / "step_2" / "COMPLETE").unlink()
    (kept / "step_2" / "model.pt").write_bytes(b"half")
    assert sync_down(store, kept, print) == "step_2"
    assert (kept / "step_2" / "model.pt").read_bytes() == (run_dir / "step_2" / "model.pt").read_bytes()
    assert (kept / "step_2" / "COMPLETE").is_file()
    # A folder of the user's named by mistake (no run.json, launch/ or step_N/): refused, nothing copied.
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "metrics.csv").write_text("a user's table\n")
    os.utime(mine / "metrics.csv", (1_000_000_000, 1_000_000_000))
    with pytest.raises(
        TRMError, match=r"no run directory .* refusing to restore into it; nothing was copied"
    ):
        sync_down(store, mine, print)
    assert [p.name for p in mine.iterdir()] == ["metrics.csv"]
    assert (mine / "metrics.csv").read_text() == "a user's table\n"


@needs_rclone
def test_the_run_lock_file_is_never_uploaded_nor_restored_and_a_running_run_is_not_restored_into(
    tmp_path, store
):
    from trm.runlock import LOCK_FILE, RunLock, RunLocked

    run_dir = make_run(tmp_path)
    (run_dir / "run.json").write_text("{}\n")
    lock = RunLock(run_dir, "launch")
    assert lock.try_acquire("python -m trm launch (the run's launcher)") is None
    sync_up(run_dir, store, print)  # the launcher's own periodic upload, while it holds the lock
    assert not (remote_path(store) / LOCK_FILE).exists()
    # While the launcher runs, a restore into its run directory is refused before anything is copied.
    (remote_path(store) / "metrics.csv").write_text("another machine's newer table\n")
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    with pytest.raises(
        RunLocked, match=r"is in use by another process .*\(the run's launcher\).* stop it first"
    ):
        sync_down(store, run_dir, print)
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before
    lock.release()
    # A remote that holds a lock file (uploaded by an older version): an old holder's record stays there.
    (remote_path(store) / LOCK_FILE).write_text('{"pid": 1, "host": "elsewhere", "command": "old"}\n')
    os.utime(remote_path(store) / LOCK_FILE, (2_000_000_000, 2_000_000_000))
    restored = tmp_path / "restored"
    assert sync_down(store, restored, print) == "step_2"
    assert "elsewhere" not in (restored / LOCK_FILE).read_text()  # this restore's own record
    assert (restored / "metrics.csv").read_text() == "another machine's newer table\n"
    assert sync_down(store, run_dir, print) == "step_2"  # nothing runs it now: restored
    assert "elsewhere" not in (run_dir / LOCK_FILE).read_text()
