"""`python -m trm launch`: the logic behind `scripts/train_prod.sh` (configured by environment variables)."""

from __future__ import annotations

import argparse
import os

from trm.errors import TRMError


def run(args: argparse.Namespace) -> int:
    from trm.launch.planning.settings import LaunchSettings, help_text, markdown_table

    if args.help_env:
        print(help_text())
        return 0
    if args.markdown_env:
        print(markdown_table())
        return 0
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
        if args.handoff:  # the launcher already reported the bad setting; there is no run to hand off
            print("handoff skipped: the launch settings are invalid (see the error above)")
            return 0
        raise
    if args.onstart_script:
        from trm.launch.running.onstart import render

        print(render(settings, environ, args.checkout), end="")
        return 0
    if args.handoff:
        from trm.launch.running.runner import hand_off

        bundle = hand_off(settings)
        print(
            f"handoff bundle: {bundle}"
            if bundle
            else f"no run directory {settings.run_dir} yet: nothing to hand off"
        )
        if args.exit_code is not None:
            from trm.launch.running.runner import finish_outside

            finish_outside(settings, environ, args.exit_code)
        return 0
    if args.tmux:
        from trm.launch.running.tmux import start_in_tmux

        print(start_in_tmux(settings, args.tmux, args.overrides, environ))
        return 0
    from trm.launch.running.runner import Launch, resolve
    from trm.launch.running.supervisor import Console
    from trm.launch.running.workspace import ensure_writable

    plan = resolve(settings, environ, recipe=recipe)
    if args.dry_run:
        print(plan.render(environ))
        return 0
    ensure_writable(settings)
    return Launch(plan, environ, Console(settings.launch_dir / "launch.log")).run()


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Preflight, dataset build + verify, hardware tier, smoke gate, supervised torchrun. "
        "Every setting is an environment variable: see --help-env."
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
        "--exit-code",
        type=int,
        metavar="RC",
        help="with --handoff (train_prod.sh's exit trap): the launch ended with RC; after the bundle, copy "
        "the run to SYNC_TO and apply ON_END / ON_BUDGET",
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
