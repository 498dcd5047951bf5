"""`python -m trm experiment list|show|validate|run|batch`: named experiment suites (trm/experiments/)."""

from __future__ import annotations

import argparse
import os
import shlex
from collections.abc import Callable
from pathlib import Path

from trm.errors import TRMError


def _catalog(args: argparse.Namespace):
    from trm.experiments.suite import Catalog

    return Catalog.load(args.suite_file)


def _list(args: argparse.Namespace) -> int:
    catalog = _catalog(args)
    chosen = catalog.select(pattern=args.pattern) if args.pattern else list(catalog.experiments.values())
    width = max(len(e.name) for e in chosen)
    suite = None
    for exp in chosen:
        if exp.suite != suite:
            suite = exp.suite
            print(
                f"{'' if suite == chosen[0].suite else chr(10)}{suite}: {exp.title}  [recipe {exp.recipe}; {exp.source}]"
            )
        swept = " ".join(f"{k}={v}" for k, v in exp.swept.items())
        print(f"  {exp.name:<{width}}  {swept or exp.label}  -> {exp.run_name}")
    return 0


def _options(args: argparse.Namespace, extra: tuple[str, ...] = ()):
    from trm.experiments.batch import Options
    from trm.experiments.guards import env_setting

    guards = {}
    if hasattr(args, "max_hours"):  # batch: the launcher's guards, flags first, else its variables
        guards = {
            "max_hours": args.max_hours
            if args.max_hours is not None
            else env_setting("MAX_HOURS", os.environ),
            "stop_margin_minutes": env_setting("STOP_MARGIN_MINUTES", os.environ),
            "sync_to": args.sync_to if args.sync_to is not None else env_setting("SYNC_TO", os.environ),
            "sync_every_minutes": env_setting("SYNC_EVERY_MINUTES", os.environ),
        }
    return Options(
        data_dir=args.data_dir,
        checkpoint_dir=args.checkpoint_dir,
        log_dir=getattr(args, "log_dir", None),
        continue_on_failure=getattr(args, "continue_on_failure", False),
        dry_run=getattr(args, "dry_run", False),
        gpus_per_run=getattr(args, "gpus_per_run", 1),
        num_gpus=args.num_gpus,
        extra=extra,
        **guards,
    )


def _show(args: argparse.Namespace) -> int:
    from trm.experiments.batch import Batch
    from trm.training.config import to_yaml

    (exp,) = _catalog(args).select([args.name])
    batch = Batch([exp], _options(args, tuple(args.overrides)))
    cfg = exp.compose(args.data_dir, args.checkpoint_dir, tuple(args.overrides))
    print(f"# {exp.name}: {exp.title}: {exp.label} (suite {exp.suite}, {exp.source})")
    print(
        f"# dataset: {args.data_dir / exp.dataset.name} ({exp.dataset.builder} {shlex.join(exp.dataset.build_args)})"
    )
    print(to_yaml(cfg), end="")
    print("# commands (python -m trm experiment run " + exp.name + "):")
    for line in batch.run_lines():
        print(f"#{line}")
    return 0


def _validate(args: argparse.Namespace) -> int:
    from trm.experiments.suite import validate

    catalog = _catalog(args)
    chosen = catalog.select(pattern=args.pattern) if args.pattern else list(catalog.experiments.values())
    validate(chosen, args.data_dir, args.checkpoint_dir)
    print(f"{len(chosen)} experiment(s) compose through the trainer's configuration")
    return 0


def _run(args: argparse.Namespace) -> int:
    from trm.experiments.batch import Batch

    (exp,) = _catalog(args).select([args.name])
    batch = Batch([exp], _options(args, tuple(args.overrides)))
    code = batch.run()
    # One run behaves like the trainer: its own exit code (2 configuration, 74 disk full, 75 saved…).
    run = batch.runs[0]
    return run.exit_code if run.exit_code not in (None, 0) else code


def _batch(args: argparse.Namespace) -> int:
    from trm.experiments.batch import Batch

    catalog = _catalog(args)
    if bool(args.pattern) == bool(args.names):
        raise TRMError(
            "give --pattern P or experiment names (a suite id names all of its experiments), not both"
        )
    chosen = catalog.select(args.names, pattern=args.pattern)
    return Batch(chosen, _options(args)).run()


def _launcher_value(name: str, flag: str) -> Callable[[str], object]:
    """Checks a flag's value as the launcher checks its variable `name` (imported when a value is given)."""

    def parse(raw: str) -> object:
        from trm.experiments.guards import parse_setting

        return parse_setting(name, flag, raw)

    return parse


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Experiment suites (trm/experiments/suites/*.toml): a recipe plus a list or grid of overrides, "
        "expanded into named experiments (exp01a, …) that run through the trainer one by one or as a batch."
    )
    sub = parser.add_subparsers(dest="experiment_command", metavar="ACTION", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--suite-file",
            type=Path,
            action="append",
            default=[],
            metavar="FILE",
            help="also read the suites of this TOML file (repeatable)",
        )
        p.add_argument(
            "--data-dir",
            type=Path,
            default=Path(os.environ.get("DATA_DIR") or "data"),
            help="datasets, built there when missing (default $DATA_DIR or data)",
        )
        p.add_argument(
            "--checkpoint-dir",
            type=Path,
            default=Path(os.environ.get("CHECKPOINT_DIR") or "checkpoints"),
            help="run directories <dir>/<run name> (default $CHECKPOINT_DIR or checkpoints)",
        )
        p.add_argument(
            "--num-gpus",
            type=int,
            default=None,
            metavar="N",
            help="GPUs to use (default: every visible one; 0: CPU, one run at a time)",
        )

    ls = sub.add_parser("list", help="list the experiments (by suite) with what each changes")
    ls.add_argument("--pattern", help="a glob (exp0[1-3]*) or a prefix (exp01) of experiment names")
    ls.set_defaults(func=_list)
    show = sub.add_parser("show", help="the resolved trainer config of an experiment and its exact commands")
    show.add_argument("name")
    show.add_argument("overrides", nargs="*", help="extra trainer overrides (key=value)")
    show.set_defaults(func=_show)
    check = sub.add_parser(
        "validate", help="compose every experiment (or --pattern) through the trainer's config"
    )
    check.add_argument("--pattern", help="a glob or a prefix of experiment names")
    check.set_defaults(func=_validate)
    run = sub.add_parser("run", help="run one experiment (resumes it when it has a checkpoint)")
    run.add_argument("name")
    run.add_argument(
        "overrides", nargs="*", help="extra trainer overrides (key=value), after the experiment's"
    )
    run.add_argument("--dry-run", action="store_true", help="print the commands; run nothing")
    run.add_argument(
        "--log-dir", type=Path, help="logs and batch_results.json (default <checkpoint dir>/batches/<id>)"
    )
    run.set_defaults(func=_run)
    batch = sub.add_parser(
        "batch",
        help="run many experiments: skips finished runs, resumes interrupted ones, batch_results.json",
        description="Run the selected experiments (GPU slots side by side, CPU one at a time). Exit 0 all "
        "finished (or the budget was already spent: nothing ran), 2 a configuration error (nothing ran), 3 a "
        "run failed (see batch_results.json), 75 stopped by SIGTERM/SIGINT after the running trainers saved "
        "(the same command resumes), 79 the --max-hours budget stopped it after they saved.",
    )
    batch.add_argument("names", nargs="*", help="experiment names or suite ids")
    batch.add_argument("--pattern", help="a glob (exp0[1-3]*) or a prefix (exp01) of experiment names")
    batch.add_argument(
        "--continue-on-failure", action="store_true", help="keep going after a failed run (default: stop)"
    )
    batch.add_argument(
        "--log-dir",
        type=Path,
        help="logs and batch_results.json (default <checkpoint dir>/batches/<batch id>); a folder holding "
        "another selection's batch_results.json, or one a running batch holds (its lock), is refused",
    )
    batch.add_argument("--dry-run", action="store_true", help="print what would run, with the exact commands")
    batch.add_argument(
        "--gpus-per-run",
        type=int,
        default=1,
        metavar="K",
        help="GPUs per run (torchrun when above 1); N GPUs run N // K experiments side by side",
    )
    batch.add_argument(
        "--max-hours",
        type=_launcher_value("MAX_HOURS", "--max-hours"),
        default=None,
        metavar="H",
        help="budget of the whole batch, every session of it together (default $MAX_HOURS; kept in LOG_DIR/"
        "ledger.json): at H less $STOP_MARGIN_MINUTES (10) every running trainer saves and the batch exits 79; "
        "started again it exits 0 without training until H is raised",
    )
    batch.add_argument(
        "--sync-to",
        type=_launcher_value("SYNC_TO", "--sync-to"),
        default=None,
        metavar="REMOTE",
        help="rclone remote:path (default $SYNC_TO): each run is copied to REMOTE/<run name> every "
        "$SYNC_EVERY_MINUTES (15) while it trains and when it ends, the batch's logs and results to "
        "REMOTE/batches/<batch id>",
    )
    batch.set_defaults(func=_batch)
    for p in (ls, show, check, run, batch):
        common(p)
