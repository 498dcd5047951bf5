"""The Vast.ai on-start script (`python -m trm launch --onstart-script`), run for real with bash and a
stand-in `python` that records how it was started."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

FAKE_PYTHON = """#!/bin/bash
# stand-in for the image's python: records argv and the launch settings, then runs until killed
echo "$*" > "$RECORD/argv"
echo "RUN_NAME=$RUN_NAME TASK=$TASK MAX_HOURS=$MAX_HOURS" > "$RECORD/env"
exec -a trm-fake-launcher sleep 60
"""


def render(tmp_path: Path, *extra: str, **settings: str) -> str:
    env = {
        **os.environ,
        "RUN_NAME": "vast-run1",
        "TASK": "arc2",
        "MAX_HOURS": "80",
        "WORKSPACE": str(tmp_path / "ws"),
        "TRM_IMAGE_SM_LIST": "80 90",
        "WANDB_API_KEY": "not-a-real-key",  # pragma: allowlist secret
        "HOME": str(tmp_path / "render-home"),
        **settings,
    }
    proc = subprocess.run(
        [sys.executable, "-m", "trm", "launch", "--onstart-script", *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return proc.stdout


def start(tmp_path: Path, script: str) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python").write_text(FAKE_PYTHON)
    (bin_dir / "python").chmod(0o755)
    (tmp_path / "rec").mkdir(exist_ok=True)
    (tmp_path / "home").mkdir(exist_ok=True)
    (tmp_path / "onstart.sh").write_text(script)
    # Vast runs it with the container's environment, not the one that rendered it
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path / "home"), "RECORD": str(tmp_path / "rec"),
           "TRM_IMAGE_VARIANT": "sm90", "TRM_IMAGE_SM_LIST": "80 90"}  # fmt: skip
    return subprocess.run(["bash", str(tmp_path / "onstart.sh")], env=env, capture_output=True, text=True)


def wait_for(path: Path) -> str:
    for _ in range(100):
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} never written")


def test_onstart_starts_the_same_launch_once_and_publishes_the_image_env(tmp_path):
    script = render(tmp_path)
    assert "not-a-real-key" not in script and "WANDB_API_KEY" not in script  # never a secret in the script
    first = start(tmp_path, script)
    assert first.returncode == 0, first.stderr
    launch = tmp_path / "ws" / "checkpoints" / "vast-run1" / "launch"
    pid = int(wait_for(launch / "onstart.pid"))
    try:
        assert wait_for(tmp_path / "rec" / "argv").strip() == "-m trm launch"
        assert wait_for(tmp_path / "rec" / "env").strip() == "RUN_NAME=vast-run1 TASK=arc2 MAX_HOURS=80"
        assert os.getsid(pid) == pid  # its own session: the SSH session ending does not stop it
        # an SSH login shell sources the published environment: image PATH and TRM_* with spaces intact
        home = tmp_path / "home"
        assert (home / ".bashrc").read_text().count('source "$HOME/.trm-env"') == 1
        probe = subprocess.run(
            ["bash", "-c", 'source "$HOME/.trm-env"; echo "$TRM_IMAGE_SM_LIST|$TRM_IMAGE_VARIANT|$PATH"'],
            env={"HOME": str(home), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert probe.stdout.strip() == f"80 90|sm90|{tmp_path / 'bin'}:/usr/bin:/bin"
        # a second start while the launcher runs does not start another one
        second = start(tmp_path, script)
        assert "already running" in second.stdout
        assert int((launch / "onstart.pid").read_text()) == pid
        assert (home / ".bashrc").read_text().count('source "$HOME/.trm-env"') == 1
    finally:
        os.kill(pid, 15)
    # after a restart (launcher gone, stale pid file) it starts again: the launch resumes the run
    for _ in range(100):
        try:
            os.kill(pid, 0)
            time.sleep(0.05)
        except ProcessLookupError:
            break
    (tmp_path / "rec" / "argv").unlink()
    third = start(tmp_path, script)
    assert "launcher started" in third.stdout
    new_pid = int(wait_for(launch / "onstart.pid"))
    wait_for(tmp_path / "rec" / "argv")
    os.kill(new_pid, 15)
    assert new_pid != pid


def test_onstart_for_a_bootstrapped_checkout_runs_the_script_there(tmp_path):
    script = render(tmp_path, "--checkout", "/workspace/trm-stack")
    assert "cd /workspace/trm-stack\n" in script
    assert "setsid bash scripts/train_prod.sh >>" in script
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_a_key_the_restart_needs_reaches_it_through_a_root_only_file_never_the_script(tmp_path):
    script = render(tmp_path, WANDB="online")
    key_file = tmp_path / "render-home" / ".config" / "trm-stack" / "vast-run1" / "WANDB_API_KEY"
    assert "not-a-real-key" not in script
    assert f"export WANDB_API_KEY_FILE={key_file}\n" in script
    assert key_file.read_text().strip() == "not-a-real-key"
    assert key_file.stat().st_mode & 0o777 == 0o600 and key_file.parent.stat().st_mode & 0o777 == 0o700
    # the instance's restart runs the script without the key in its environment: the launcher starts
    first = start(tmp_path, script)
    assert first.returncode == 0, first.stderr
    pid = int(wait_for(tmp_path / "ws" / "checkpoints" / "vast-run1" / "launch" / "onstart.pid"))
    os.kill(pid, 15)


def test_a_restart_without_the_key_stops_before_starting_a_launcher_that_would_exit_2(tmp_path):
    script = render(tmp_path, WANDB="online", WANDB_API_KEY_FILE=str(tmp_path / "mounted-key"))
    (tmp_path / "mounted-key").write_text("k\n")
    assert "not-a-real-key" not in script
    (
        tmp_path / "mounted-key"
    ).unlink()  # the file is gone at the next start, and no key is in the environment
    proc = start(tmp_path, script)
    assert proc.returncode == 2
    assert "this launch needs WANDB_API_KEY (or WANDB_API_KEY_FILE naming a readable file)" in proc.stderr
    assert not (tmp_path / "ws" / "checkpoints" / "vast-run1" / "launch" / "onstart.pid").exists()


def test_a_second_run_with_other_settings_names_them_instead_of_silently_keeping_the_old_ones(tmp_path):
    """Production run §2b, then §3 adds SYNC_TO and ON_END: the running launcher keeps its settings, so the
    hook says which differ and how to apply them (exit 2); the same settings again are still exit 0."""
    first = start(tmp_path, render(tmp_path))
    assert first.returncode == 0, first.stderr
    launch = tmp_path / "ws" / "checkpoints" / "vast-run1" / "launch"
    pid = int(wait_for(launch / "onstart.pid"))
    try:
        again = start(tmp_path, render(tmp_path))
        assert again.returncode == 0 and "already running" in again.stdout
        changed = render(tmp_path, MAX_HOURS="90", SYNC_TO="store:bucket/runs")
        proc = start(tmp_path, changed)
        assert proc.returncode == 2
        assert f"the launcher (pid {pid}) is already running vast-run1 with other settings" in proc.stderr
        assert "differ: MAX_HOURS SYNC_TO (they apply only when a launcher starts)" in proc.stderr
        assert f"kill -TERM {pid}" in proc.stderr
        assert int((launch / "onstart.pid").read_text()) == pid  # the running launcher is left alone
    finally:
        os.kill(pid, 15)
