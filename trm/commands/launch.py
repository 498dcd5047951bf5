"""`python -m trm launch`: the logic behind `scripts/train_prod.sh` (configured by environment variables).

The launcher owns the whole launch: it starts itself in tmux (USE_TMUX=1), forwards SIGTERM/SIGINT/SIGHUP to
torchrun, and writes the handoff bundle at exit whatever the outcome."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from typing import IO

from trm.errors import TRMError

NO_TORCH = (
    "{python} has no torch; set PYTHON to the project's venv (make venv: .venv/bin/python; "
    "bash scripts/bootstrap_host.sh on a GPU host) or activate it"
)


def require_torch() -> None:
    """A Python that cannot train stops with one line instead of an import traceback."""
    if importlib.util.find_spec("torch") is None:
        raise TRMError(NO_TORCH.format(python=sys.executable))


def relaunch_args(args: argparse.Namespace) -> list[str]:
    """The `python -m trm launch …` command line of this launch (run again inside tmux)."""
    experiments = ["--experiments", args.experiments] if args.experiments else []
    return [sys.executable, "-m", "trm", "launch", *experiments, *args.overrides]


def run(args: argparse.Namespace) -> int:
    from trm.launch.config.settings import LaunchSettings
    from trm.launch.config.variables import help_text, markdown_table

    if args.help_env:
        print(help_text())
        return 0
    if args.markdown_env:
        print(markdown_table())
        return 0
    if args.markdown_cost:
        from trm.launch.plan.paper_runs import markdown_table as cost_table

        print(cost_table())
        return 0
    if not (args.handoff or args.onstart_script):
        require_torch()
    environ = dict(os.environ)
    recipe = None
    if args.experiments:
        from trm.experiments import indexed

        names = indexed.parse_names(args.experiments)
        experiment = indexed.selected(names, environ)
        environ = indexed.launch_environment(experiment, names, environ)
        recipe = indexed.recipe_of(experiment)
        print(
            f"experiment {experiment.name} ({environ[indexed.INDEX_VAR]} of {len(names)}): {experiment.run_name}"
        )
    try:
        settings = LaunchSettings.from_env(environ, tuple(args.overrides))
    except TRMError:
        if args.handoff:  # there is no run these settings name: nothing to hand off
            print("handoff skipped: the launch settings are invalid (see the error above)")
            return 0
        raise
    if args.onstart_script:
        from trm.launch.supervision.onstart import render, stash_restart_secrets

        secret_files = stash_restart_secrets(settings, environ, Path.home())
        print(render(settings, environ, args.checkout, secret_files), end="")
        return 0
    if args.handoff:
        from trm.launch.handoff.at_exit import hand_off

        bundle = hand_off(settings)
        print(
            f"handoff bundle: {bundle}"
            if bundle
            else f"no run directory {settings.run_dir} yet: nothing to hand off"
        )
        return 0
    if settings.use_tmux and not args.dry_run and not environ.get("TMUX"):
        from trm.launch.supervision.tmux import start_in_tmux

        print(start_in_tmux(settings, relaunch_args(args), environ))
        return 0
    from trm.launch.config.workspace import ensure_writable
    from trm.launch.handoff.at_exit import finish_unplanned
    from trm.launch.launcher.runner import Launch
    from trm.launch.plan.resolve import resolve
    from trm.launch.supervision.supervisor import Console

    try:
        plan = resolve(settings, environ, recipe=recipe)
    except TRMError as err:
        if not args.dry_run:
            print(f"error: {err}", file=sys.stderr)
            finish_unplanned(settings, err.exit_code)
            return err.exit_code
        raise
    # Before any GPU time: the handoff at exit would refuse another run's bundle (node 0; the others share it).
    if settings.node_rank == 0:
        from trm.launch.handoff.handoff import check_same_run

        try:
            check_same_run(settings.run_dir, settings.artifacts_run_dir)
        except TRMError as err:
            print(f"error: {err}", file=sys.stderr)
            return err.exit_code
    if args.dry_run:
        print(plan.render(environ))
        return 0
    ensure_writable(settings)
    return Launch(plan, environ, Console(settings.launch_dir / "launch.log")).run()


def script_help(parser: argparse.ArgumentParser) -> None:
    """-h/--help under scripts/train_prod.sh (TRM_LAUNCHER): the script's help, with the environment
    variables; else this command's flags."""
    from trm.launch.plan.plan import LAUNCHER_ENV, SCRIPT

    def print_help(file: IO[str] | None = None) -> None:
        if os.environ.get(LAUNCHER_ENV) == SCRIPT:
            from trm.launch.config.variables import help_text

            print(help_text(SCRIPT), file=file)
        else:
            argparse.ArgumentParser.print_help(parser, file)

    parser.print_help = print_help  # type: ignore[method-assign]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Preflight, dataset build + verify, hardware tier, smoke gate, supervised torchrun, and the handoff "
        "bundle at exit. Every setting is an environment variable: see --help-env."
    )
    script_help(parser)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print every step and command; run nothing")
    mode.add_argument("--help-env", action="store_true", help="list the environment variables and defaults")
    mode.add_argument("--markdown-env", action="store_true", help="the same list as a Markdown table")
    mode.add_argument(
        "--markdown-cost",
        action="store_true",
        help="the expected hours and $ of the paper runs per GPU shape, as a Markdown table (docs/cost.md)",
    )
    mode.add_argument(
        "--handoff", action="store_true", help="write the handoff bundle of the configured run (by hand)"
    )
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
    parser.add_argument(
        "--experiments",
        metavar="NAMES",
        help="a Kubernetes Indexed Job's pod: run experiment NAMES[JOB_COMPLETION_INDEX] of this comma-separated "
        "list (trm/experiments/suites): its recipe as TASK, its run name as RUN_NAME, its overrides and dataset",
    )
    parser.add_argument("overrides", nargs="*", help="extra trainer overrides (key=value)")
    parser.set_defaults(func=run)
