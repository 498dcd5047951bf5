"""`python -m trm launch`: the logic behind `scripts/train_prod.sh` (configured by environment variables)."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess

from trm.errors import TRMError
from trm.launch.settings import LaunchSettings, help_text, markdown_table


def tmux_command(settings: LaunchSettings, script: str, args: list[str]) -> list[str]:
    """Start the script in a detached tmux session on a dedicated server (it inherits this environment)."""
    inner = (
        shlex.join(["bash", script, *args]) + "; echo; echo '[trm launch] finished: press Enter'; read -r _"
    )
    return [
        "tmux", "-L", f"trm-{settings.run_name}", "new-session", "-d", "-s", settings.run_name, "-c", os.getcwd(), inner,
    ]  # fmt: skip


def run(args: argparse.Namespace) -> int:
    if args.help_env:
        print(help_text())
        return 0
    if args.markdown_env:
        print(markdown_table())
        return 0
    environ = dict(os.environ)
    try:
        settings = LaunchSettings.from_env(environ, tuple(args.overrides))
    except TRMError:
        if args.handoff:  # the launcher already reported the bad setting; there is no run to hand off
            print("handoff skipped: the launch settings are invalid (see the error above)")
            return 0
        raise
    if args.onstart_script:
        from trm.launch.onstart import render

        print(render(settings, environ, args.checkout), end="")
        return 0
    if args.handoff:
        from trm.launch.handoff import build_bundle

        if not settings.run_dir.is_dir():
            print(f"no run directory {settings.run_dir} yet: nothing to hand off")
            return 0
        bundle = build_bundle(settings.run_dir, settings.artifacts_run_dir)
        print(f"handoff bundle: {bundle}")
        return 0
    if args.tmux:
        if shutil.which("tmux") is None:
            raise TRMError(
                "USE_TMUX=1 but tmux is not installed: `apt-get install -y tmux`, or set USE_TMUX=0"
            )
        cmd = tmux_command(settings, args.tmux, args.overrides)
        proc = subprocess.run(cmd, env={**environ, "TRM_IN_TMUX": "1"}, capture_output=True, text=True)
        if proc.returncode != 0:
            raise TRMError(
                f"could not start tmux session {settings.run_name!r}: {proc.stderr.strip()}; if it is already "
                f"running, attach with `tmux -L trm-{settings.run_name} attach -t {settings.run_name}`"
            )
        print(
            f"training runs in tmux session {settings.run_name!r}\n"
            f"  attach:  tmux -L trm-{settings.run_name} attach -t {settings.run_name}   (detach: Ctrl-b d)\n"
            f"  log:     tail -f {settings.launch_dir / 'train.log'}"
        )
        return 0
    from trm.launch.runner import Launch, resolve
    from trm.launch.supervisor import Console

    plan = resolve(settings, environ)
    if args.dry_run:
        print(plan.render(environ))
        return 0
    ensure_writable(settings)
    return Launch(plan, environ, Console(settings.launch_dir / "launch.log")).run()


def ensure_writable(settings: LaunchSettings) -> None:
    """Create the run, data and artifacts directories up front; a permission problem is a clean error."""
    for name, path in (
        ("CHECKPOINT_DIR", settings.launch_dir),
        ("DATA_DIR", settings.data_dir),
        ("ARTIFACTS_DIR", settings.artifacts_dir),
    ):
        try:
            path.mkdir(parents=True, exist_ok=True)
            probe = path / f".trm-write-test-{os.getpid()}"
            probe.write_text("")
            probe.unlink()
        except OSError as err:
            raise TRMError(
                f"cannot write to {path} ({err.strerror or err}); set {name} (or WORKSPACE) to a writable "
                "directory on a persistent volume, or fix its owner (`sudo chown -R $(id -u) …`)"
            ) from None


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "launch",
        help="run the production launch (what scripts/train_prod.sh calls); configured by environment",
        description="Preflight, dataset build + verify, hardware tier, smoke gate, supervised torchrun. "
        "Every setting is an environment variable: see --help-env.",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print every step and command; run nothing")
    mode.add_argument("--help-env", action="store_true", help="list the environment variables and defaults")
    mode.add_argument("--markdown-env", action="store_true", help="the same list as a Markdown table")
    mode.add_argument("--handoff", action="store_true", help="write the handoff bundle of the configured run")
    mode.add_argument("--tmux", metavar="SCRIPT", help="start SCRIPT in a detached tmux session")
    mode.add_argument(
        "--onstart-script",
        action="store_true",
        help="print an on-start script (Vast.ai) that starts this launch at every instance start; it resumes",
    )
    parser.add_argument(
        "--checkout",
        metavar="DIR",
        help="with --onstart-script: run scripts/train_prod.sh in this trm-stack checkout (bootstrapped host) "
        "instead of the image's python -m trm launch",
    )
    parser.add_argument("overrides", nargs="*", help="extra trainer overrides (key=value)")
    parser.set_defaults(func=run)
