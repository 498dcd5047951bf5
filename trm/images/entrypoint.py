"""Image entrypoint: print what the image is, run the preflight before training, then exec the command.

The preflight (/dev/shm, disk, driver, GPUs, NCCL) guards commands that train; one-off commands (`python
-m trm launch --dry-run`, `python -m trm handoff …`, `python -m trm version`, a shell) run without it, so
they work on Docker's default 64 MiB /dev/shm. `is_training_command` decides from the command line.

`TRM_PREFLIGHT` chooses what happens before a training command: `auto` (default) runs
`python -m trm preflight $TRM_PREFLIGHT_ARGS` when this trm build has that command and stops on its
failure; `require` does the same but also fails when the command is missing; `skip` runs nothing.
Other commands never get the preflight, whatever `TRM_PREFLIGHT` says.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence

MODES = ("auto", "require", "skip")

# `python -m <module>` entry points that train (the launcher runs its own preflight too, but a failure
# here stops before any dataset build or GPU allocation).
TRAINING_MODULES = ("trm.train", "trm.training.smoke", "torch.distributed.run")
# Options that make a training entry point print and exit instead of training.
NON_TRAINING_FLAGS = (
    "--dry-run", "--help", "-h", "--help-env", "--markdown-env", "--handoff", "--onstart-script", "--cfg",
)  # fmt: skip


def _module_argv(command: Sequence[str]) -> tuple[str, list[str]] | None:
    """(`module`, its arguments) for `python[3] [-u…] -m module args…`, else None."""
    if not command or os.path.basename(command[0]).split(".")[0] not in ("python", "python3"):
        return None
    rest = list(command[1:])
    while rest and rest[0].startswith("-") and rest[0] != "-m":
        rest.pop(0)
    if len(rest) < 2 or rest[0] != "-m":
        return None
    return rest[1], rest[2:]


def is_training_command(command: Sequence[str]) -> bool:
    """Whether `command` trains (and so needs the preflight first).

    Training: `python -m trm launch`, `python -m trm.train`, `python -m trm.training.smoke`, torchrun
    (`torchrun …` or `python -m torch.distributed.run`) and `bash scripts/train_prod.sh`, unless one of
    `NON_TRAINING_FLAGS` asks them to print and exit. Everything else (version, handoff, preflight itself,
    eval, package, infer, a shell, `sleep infinity`) is a one-off command.
    """
    args = list(command)
    if not args:
        return False
    module = _module_argv(args)
    program = os.path.basename(args[0])
    if module is not None:
        name, rest = module
        trains = (name == "trm" and rest[:1] == ["launch"]) or name in TRAINING_MODULES
    elif program == "torchrun":
        trains, rest = True, args[1:]
    elif program in ("bash", "sh") and len(args) > 1 and os.path.basename(args[1]) == "train_prod.sh":
        trains, rest = True, args[2:]
    elif program == "train_prod.sh":
        trains, rest = True, args[1:]
    else:
        return False
    return trains and not any(arg in NON_TRAINING_FLAGS for arg in rest)


def banner(env: dict[str, str]) -> str:
    """One line naming the image (from the labels baked into the environment) and its versions."""
    from trm.gitinfo import code_git_sha
    from trm.versions import collect_versions

    versions = collect_versions()
    parts = [
        f"trm image {env.get('TRM_IMAGE_VARIANT', '?')}",
        f"git {code_git_sha(env)[:12]}",
        f"sm [{env.get('TRM_IMAGE_SM_LIST', '') or 'none'}]",
        f"optimizer backend {env.get('TRM_IMAGE_OPTIMIZER_BACKEND') or '?'}",
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
    if is_training_command(command):
        code = run_preflight(env)
        if code != 0:
            return code
    elif command:
        print(f"entrypoint: no preflight for a command that does not train ({command[0]} …)", flush=True)
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
