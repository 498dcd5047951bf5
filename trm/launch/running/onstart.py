"""The on-start script for hosts that restart our container themselves (Vast.ai's "on-start script").

A Vast.ai instance is one container; with the SSH launch mode Vast replaces the image's entrypoint and
runs the on-start script after its own setup at **every** start of the instance (create, restart after a
stop, a host reboot, an interruptible instance resuming). A launcher started by hand from an SSH session
(`setsid nohup …`) is not restarted then. This script starts the same launch every time, so the run
resumes from its newest complete checkpoint, and makes the image's environment visible to SSH sessions
(Vast's sshd does not pass the container's environment on: no `/opt/venv/bin` on PATH, no TRM_IMAGE_*).

`python -m trm launch --onstart-script` prints it for the launch settings in the environment; the
script holds only names of settings that were set (never W&B keys: pass those as Vast env variables).
"""

from __future__ import annotations

import shlex

from trm.launch.planning.plan import SCRIPT
from trm.launch.planning.settings import LaunchSettings
from trm.launch.planning.variables import ENV_VARS

# What SSH sessions need from the container's environment (never secrets).
SSH_VISIBLE = ("PATH", "TRM_IMAGE_VARIANT", "TRM_IMAGE_SM_LIST", "TRM_IMAGE_CUDA", "TRM_IMAGE_GIT_SHA",
               "TRM_IMAGE_OPTIMIZER_BACKEND", "TRM_ADAM_ATAN2_SM_LIST", "TRM_IMAGE_DIGEST", "NVIDIA_VISIBLE_DEVICES",
               "NVIDIA_DRIVER_CAPABILITIES")  # fmt: skip
ENV_FILE = ".trm-env"


def render(settings: LaunchSettings, environ: dict[str, str], checkout: str | None = None) -> str:
    """The on-start script: export the launch settings, publish the environment to SSH sessions, start
    the launcher detached unless it is already running (its pid in launch/onstart.pid), log to
    launch/onstart.out. With `checkout`, run `scripts/train_prod.sh` there (a bootstrapped host) instead
    of the image's `python -m trm launch`."""
    names = [v.name for v in ENV_VARS if environ.get(v.name, "") != ""]
    exports = "\n".join(f"export {n}={shlex.quote(environ[n])}" for n in names) or "# (all launch defaults)"
    launch_dir = shlex.quote(str(settings.launch_dir))
    names_visible = " ".join(SSH_VISIBLE)
    cd = f"cd {shlex.quote(checkout)}\n" if checkout else ""
    start = f"bash {SCRIPT}" if checkout else "python -m trm launch"
    return f"""#!/bin/bash
# trm-stack on-start script (python -m trm launch --onstart-script): runs at every start of the instance
# and starts the same launch again; the launch resumes {settings.run_name} from its newest checkpoint.
set -euo pipefail
{exports}
# SSH sessions do not inherit the container's environment: publish the image's PATH and TRM_* facts.
for name in {names_visible}; do
  if [[ -n "${{!name:-}}" ]]; then printf 'export %s=%q\n' "$name" "${{!name}}"; fi
done > "$HOME/{ENV_FILE}"
# shellcheck disable=SC2016  # written literally: expanded by each login shell
line='source "$HOME/{ENV_FILE}"'
grep -qxF "$line" "$HOME/.bashrc" 2>/dev/null || echo "$line" >> "$HOME/.bashrc"
{cd}mkdir -p {launch_dir}
pid_file={launch_dir}/onstart.pid
# A pid from before a restart may belong to another process now: it must still be our launcher.
if [[ -s "$pid_file" ]] && grep -qs 'trm' "/proc/$(cat "$pid_file")/cmdline"; then
  echo "trm on-start: the launcher (pid $(cat "$pid_file")) is already running"
  exit 0
fi
setsid {start} >> {launch_dir}/onstart.out 2>&1 < /dev/null &
echo $! > "$pid_file"
echo "trm on-start: launcher started (pid $!); log: {settings.launch_dir}/launch.log"
"""
