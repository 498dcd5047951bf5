"""The on-start script for hosts that restart our container themselves (Vast.ai's "on-start script").

A Vast.ai instance is one container; with the SSH launch mode Vast replaces the image's entrypoint and
runs the on-start script after its own setup at **every** start of the instance (create, restart after a
stop, a host reboot, an interruptible instance resuming). A launcher started by hand from an SSH session
(`setsid nohup …`) is not restarted then. This script starts the same launch every time, so the run
resumes from its newest complete checkpoint, and makes the image's environment visible to SSH sessions
(Vast's sshd does not pass the container's environment on: no `/opt/venv/bin` on PATH, no TRM_IMAGE_*).

`python -m trm launch --onstart-script` prints it for the launch settings in the environment. The script
never holds a secret: a key the launch needs at every start (WANDB_API_KEY with WANDB=online, PRIME_API_KEY
for a Prime Intellect release) that is in the environment which renders the script is written to a
root-only file outside the checkout and the run directory (`~/.config/trm-stack/<RUN_NAME>/`, mode 0600),
and the script exports only its path (`WANDB_API_KEY_FILE`, `PRIME_API_KEY_FILE`); a key given to the
instance itself (a Vast env variable) needs nothing. Before starting the launcher the script checks that
each key it needs is there, so a restart never fails after the fact with exit 2.

The launcher it starts keeps its settings until it exits: a later run of the script (the same hook with new
settings, e.g. SYNC_TO or ON_END added) that finds it running names the settings that differ and exits 2
with what to do (stop the launcher, which saves; then run the script again), instead of silently keeping
the old ones.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trm.errors import TRMError
from trm.io import atomic_write_text
from trm.launch.config.settings import LaunchSettings
from trm.launch.config.variables import ENV_VARS
from trm.launch.plan.plan import SCRIPT

# What SSH sessions need from the container's environment (never secrets).
SSH_VISIBLE = ("PATH", "TRM_IMAGE_VARIANT", "TRM_IMAGE_SM_LIST", "TRM_IMAGE_CUDA", "TRM_IMAGE_GIT_SHA",
               "TRM_IMAGE_OPTIMIZER_BACKEND", "TRM_ADAM_ATAN2_SM_LIST", "TRM_IMAGE_DIGEST", "NVIDIA_VISIBLE_DEVICES",
               "NVIDIA_DRIVER_CAPABILITIES")  # fmt: skip
ENV_FILE = ".trm-env"
SETTINGS_FILE = "onstart.settings"  # in launch/: the settings of the launcher the script started last
SECRETS_DIR = Path(".config") / "trm-stack"  # under $HOME: root-only, outside any checkout or run directory


@dataclass(frozen=True)
class RestartSecret:
    """A key the launcher needs at every start, and the variable naming a file that holds it instead."""

    name: str
    file_var: str

    def needed(self, settings: LaunchSettings, environ: Mapping[str, str]) -> bool:
        if self.name == "WANDB_API_KEY":
            return settings.wandb == "online"
        from trm.launch.provider.release import resolve_provider

        return settings.release.releases and resolve_provider(settings.release, environ) == "primeintellect"


RESTART_SECRETS = (RestartSecret("WANDB_API_KEY", "WANDB_API_KEY_FILE"),
                   RestartSecret("PRIME_API_KEY", "PRIME_API_KEY_FILE"))  # fmt: skip


def stash_restart_secrets(settings: LaunchSettings, environ: Mapping[str, str], home: Path) -> dict[str, str]:
    """Write each needed key that is only in `environ` to a root-only file; `{FILE_VAR: path}` for the script.

    The directory is 0700 and the file 0600 from the start (never readable by others, not even briefly); a
    key already given as a file, or not needed by this launch, is left alone."""
    files: dict[str, str] = {}
    for secret in RESTART_SECRETS:
        value = environ.get(secret.name, "").strip()
        if not value or environ.get(secret.file_var, "").strip() or not secret.needed(settings, environ):
            continue
        directory = home / SECRETS_DIR / settings.run_name
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(directory, 0o700)
        path = directory / secret.name
        previous = os.umask(0o077)
        try:
            atomic_write_text(path, value + "\n")
        finally:
            os.umask(previous)
        os.chmod(path, 0o600)
        files[secret.file_var] = str(path)
    return files


def secret_values_in(script: str, environ: Mapping[str, str]) -> list[str]:
    """Names of restart secrets whose value appears in `script` (it must hold paths only)."""
    return [s.name for s in RESTART_SECRETS if (v := environ.get(s.name, "").strip()) and v in script]


def render(
    settings: LaunchSettings,
    environ: Mapping[str, str],
    checkout: str | None = None,
    secret_files: Mapping[str, str] | None = None,
) -> str:
    """The on-start script: export the launch settings, publish the environment to SSH sessions, start
    the launcher detached unless it is already running (its pid in launch/onstart.pid), log to
    launch/onstart.out. With `checkout`, run `scripts/train_prod.sh` there (a bootstrapped host) instead
    of the image's `python -m trm launch`. `secret_files` (from `stash_restart_secrets`) become exports of
    the file variables; a needed key with neither makes the script check for it at each start."""
    secret_files = dict(secret_files or {})
    values = {v.name: environ[v.name] for v in ENV_VARS if environ.get(v.name, "") != ""}
    values.update(secret_files)
    settings_lines = "\n".join(f"{n}={shlex.quote(values[n])}" for n in sorted(values))
    exports = "\n".join(f"export {n}={shlex.quote(values[n])}" for n in values) or "# (all launch defaults)"
    checks = "\n".join(
        f'if [[ -z "${{{s.name}:-}}" && ! -r "${{{s.file_var}:-/nonexistent}}" ]]; then\n'
        f'  echo "trm on-start: this launch needs {s.name} (or {s.file_var} naming a readable file) at every '
        f"start, and neither is here: give it to the instance as an env variable, or run --onstart-script "
        f'again with it in the environment (it is then kept in a root-only file)" >&2\n'
        "  exit 2\n"
        "fi"
        for s in RESTART_SECRETS
        if s.needed(settings, environ)
    )
    launch_dir = shlex.quote(str(settings.launch_dir))
    names_visible = " ".join(SSH_VISIBLE)
    cd = f"cd {shlex.quote(checkout)}\n" if checkout else ""
    start = f"bash {SCRIPT}" if checkout else "python -m trm launch"
    script = f"""#!/bin/bash
# trm-stack on-start script (python -m trm launch --onstart-script): runs at every start of the instance
# and starts the same launch again; the launch resumes {settings.run_name} from its newest checkpoint.
set -euo pipefail
{exports}
{checks}
# SSH sessions do not inherit the container's environment: publish the image's PATH and TRM_* facts.
for name in {names_visible}; do
  if [[ -n "${{!name:-}}" ]]; then printf 'export %s=%q\n' "$name" "${{!name}}"; fi
done > "$HOME/{ENV_FILE}"
# shellcheck disable=SC2016  # written literally: expanded by each login shell
line='source "$HOME/{ENV_FILE}"'
grep -qxF "$line" "$HOME/.bashrc" 2>/dev/null || echo "$line" >> "$HOME/.bashrc"
{cd}mkdir -p {launch_dir}
pid_file={launch_dir}/onstart.pid
settings_file={launch_dir}/{SETTINGS_FILE}
settings=$(cat <<'TRM_SETTINGS'
{settings_lines}
TRM_SETTINGS
)
# A pid from before a restart may belong to another process now: it must still be our launcher.
if [[ -s "$pid_file" ]] && grep -qs 'trm' "/proc/$(cat "$pid_file")/cmdline"; then
  pid=$(cat "$pid_file")
  if [[ -f "$settings_file" ]] && [[ "$settings" != "$(cat "$settings_file")" ]]; then
    changed=$(diff <(echo "$settings") "$settings_file" | grep '^[<>] ' | cut -c3- | cut -d= -f1 | sort -u | paste -sd' ' - || true)
    echo "trm on-start: the launcher (pid $pid) is already running {settings.run_name} with other settings" >&2
    echo "  differ: $changed (they apply only when a launcher starts)" >&2
    echo "  to apply them now: kill -TERM $pid (it saves and exits 75), wait for it to exit, run this script again" >&2
    exit 2
  fi
  echo "trm on-start: the launcher (pid $pid) is already running"
  exit 0
fi
echo "$settings" > "$settings_file"
setsid {start} >> {launch_dir}/onstart.out 2>&1 < /dev/null &
echo $! > "$pid_file"
echo "trm on-start: launcher started (pid $!); log: {settings.launch_dir}/launch.log"
"""
    leaked = secret_values_in(script, environ)
    if leaked:  # a key passed as a launch setting's value: never write it into a file people copy around
        raise TRMError(
            f"the on-start script would hold the value of {', '.join(leaked)}: pass keys only as "
            "WANDB_API_KEY / PRIME_API_KEY or their *_FILE variables, never inside another setting"
        )
    return script
