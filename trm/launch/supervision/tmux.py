"""USE_TMUX=1: run the launch in a detached tmux session on a dedicated server (it survives the SSH session)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess

from trm.errors import TRMError
from trm.launch.config.settings import LaunchSettings


def tmux_command(settings: LaunchSettings, command: list[str]) -> list[str]:
    """Run `command` in a detached tmux session on a dedicated server (it inherits this environment, so
    secrets never appear on the tmux command line)."""
    inner = shlex.join(command) + "; echo; echo '[trm launch] finished: press Enter'; read -r _"
    return [
        "tmux", "-L", f"trm-{settings.run_name}", "new-session", "-d", "-s", settings.run_name, "-c", os.getcwd(), inner,
    ]  # fmt: skip


def start_in_tmux(settings: LaunchSettings, command: list[str], environ: dict[str, str]) -> str:
    """USE_TMUX=1: start `command` (this launch, again) in the session, where $TMUX keeps it from starting
    another; returns how to attach to it and where its log is."""
    if shutil.which("tmux") is None:
        raise TRMError("USE_TMUX=1 but tmux is not installed: `apt-get install -y tmux`, or set USE_TMUX=0")
    cmd = tmux_command(settings, command)
    proc = subprocess.run(cmd, env={**environ, "TRM_IN_TMUX": "1"}, capture_output=True, text=True)
    if proc.returncode != 0:
        raise TRMError(
            f"could not start tmux session {settings.run_name!r}: {proc.stderr.strip()}; if it is already "
            f"running, attach with `tmux -L trm-{settings.run_name} attach -t {settings.run_name}`"
        )
    return (
        f"training runs in tmux session {settings.run_name!r}\n"
        f"  attach:  tmux -L trm-{settings.run_name} attach -t {settings.run_name}   (detach: Ctrl-b d)\n"
        f"  log:     tail -f {settings.launch_dir / 'train.log'}"
    )
