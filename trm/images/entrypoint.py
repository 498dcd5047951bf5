"""Image entrypoint: print what the image is, run the preflight, then exec the command.

`TRM_PREFLIGHT` chooses what happens before the command: `auto` (default) runs
`python -m trm preflight $TRM_PREFLIGHT_ARGS` when this trm build has that command and stops on its
failure; `require` does the same but also fails when the command is missing; `skip` runs nothing.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence

MODES = ("auto", "require", "skip")


def banner(env: dict[str, str]) -> str:
    """One line naming the image (from the labels baked into the environment) and its versions."""
    from trm.gitinfo import code_git_sha
    from trm.versions import collect_versions

    versions = collect_versions()
    parts = [
        f"trm image {env.get('TRM_IMAGE_VARIANT', '?')}",
        f"git {code_git_sha(env)[:12]}",
        f"sm [{env.get('TRM_IMAGE_SM_LIST', '') or 'none'}]",
    ] + [f"{key} {value}" for key, value in versions.items()]
    return " | ".join(parts)


def preflight_available() -> bool:
    return importlib.util.find_spec("trm.commands.preflight") is not None


def run_preflight(env: dict[str, str], run: Callable[..., subprocess.CompletedProcess] | None = None) -> int:
    """Run the preflight as `TRM_PREFLIGHT` says; returns 0 to go on, else the exit code to stop with."""
    run = run or subprocess.run
    mode = env.get("TRM_PREFLIGHT", "auto").strip().lower() or "auto"
    if mode not in MODES:
        print(f"entrypoint: TRM_PREFLIGHT={mode!r} is not one of {', '.join(MODES)}", file=sys.stderr)
        return 2
    if mode == "skip":
        print("entrypoint: preflight skipped (TRM_PREFLIGHT=skip)", flush=True)
        return 0
    if not preflight_available():
        if mode == "require":
            print(
                "entrypoint: TRM_PREFLIGHT=require but this trm build has no `preflight` command; "
                "use an image built from a newer trm-stack or set TRM_PREFLIGHT=auto",
                file=sys.stderr,
            )
            return 2
        print("entrypoint: this trm build has no `preflight` command; starting without it", flush=True)
        return 0
    cmd = [sys.executable, "-m", "trm", "preflight", *shlex.split(env.get("TRM_PREFLIGHT_ARGS", ""))]
    code = run(cmd).returncode
    if code != 0:
        print(
            f"entrypoint: preflight failed (exit {code}); fix what it reports above, or set "
            "TRM_PREFLIGHT=skip to start anyway",
            file=sys.stderr,
        )
    return code


def main(
    argv: Sequence[str] | None = None,
    env: dict[str, str] | None = None,
    execvp: Callable[[str, list[str]], object] = os.execvp,
) -> int:
    """Entrypoint body; replaces the process with the command unless the preflight stops it."""
    command = list(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ if env is None else env)
    print(banner(env), flush=True)
    code = run_preflight(env)
    if code != 0:
        return code
    if not command:
        print("entrypoint: no command given (docker run IMAGE COMMAND …)", file=sys.stderr)
        return 2
    try:
        execvp(command[0], command)
    except FileNotFoundError:
        print(f"entrypoint: command not found: {command[0]}", file=sys.stderr)
        return 127
    return 0


if __name__ == "__main__":
    sys.exit(main())
