"""The Vast.ai on-start script (`python -m trm launch --onstart-script`), run for real with bash and a
stand-in `python` that records how it was started."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FAKE_PYTHON = """#!/bin/bash
# stand-in for the image's python: records argv and the launch settings, then runs until killed
echo "$*" > "$RECORD/argv"
echo "RUN_NAME=$RUN_NAME TASK=$TASK MAX_HOURS=$MAX_HOURS" > "$RECORD/env"
exec -a trm-fake-launcher sleep 60
"""


def render(tmp_path: Path, *extra: str) -> str:
    env = {
        **os.environ,
        "RUN_NAME": "vast-run1",
        "TASK": "arc2",
        "MAX_HOURS": "80",
        "WORKSPACE": str(tmp_path / "ws"),
        "TRM_IMAGE_SM_LIST": "80 90",
        "WANDB_API_KEY": "not-a-real-key",  # pragma: allowlist secret
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
