"""`python -m trm.eval CHECKPOINT [key=value …]`: evaluate a checkpoint (ours or upstream's) standalone.

Writes `evaluator_ARC_step_N/submission.json` and `metrics.json` under --output-dir (default: the
checkpoint's run directory; for an hf:// checkpoint hub-evals/ORG--NAME@COMMIT). Works in one process and
under torchrun.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from trm.errors import TRMError


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = argparse.ArgumentParser(prog="python -m trm.eval", description=__doc__.splitlines()[0])
    parser.add_argument(
        "checkpoint",
        help="a step_N/ folder of ours, an upstream step_N file (with --best: a run directory), or "
        "hf://ORG/NAME[/DIR][@REVISION] on the Hugging Face Hub (our published layout or upstream's)",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        help="config overrides, e.g. data_paths='[data/arc1concept-aug-1000]' arch.L_cycles=4",
    )
    parser.add_argument("--output-dir", type=Path, default=None, help="where evaluator_ARC_step_N/ goes")
    parser.add_argument(
        "--weights",
        choices=("ema", "live"),
        default="ema",
        help="ours: EMA weights when the checkpoint has them (default), or the live training weights",
    )
    parser.add_argument(
        "--best",
        action="store_true",
        help="CHECKPOINT is a run directory: evaluate its best checkpoint by --metric (`python -m trm best`)",
    )
    parser.add_argument(
        "--metric", default=None, help="with --best: the eval metric to rank by (default: the run's own)"
    )
    parser.add_argument(
        "--puzzle-ids",
        choices=("trained", "blank", "shuffled"),
        default="trained",
        help="ablation: feed the model the blank puzzle id, or another puzzle's id (a fixed derangement), "
        "to measure how much the checkpoint relies on its puzzle embedding; results go to "
        "OUTPUT/puzzle_ids-MODE/ (default: trained, no ablation)",
    )
    add_adapt_flags(parser)
    return parser


def add_adapt_flags(parser: argparse.ArgumentParser) -> None:
    """--adapt-challenges and the adaptation budget: evaluate on a task file after test-time training."""
    from trm.adapt.flags import add_budget_flags

    group = parser.add_argument_group(
        "unseen tasks",
        "evaluate on a task file whose demonstrations the checkpoint was not trained on, the way a hidden "
        "test set is met: first adapt to them (`python -m trm adapt`), then evaluate the adapted checkpoint "
        "on the file's test pairs (the overrides apply to both)",
    )
    group.add_argument(
        "--adapt-challenges", type=Path, default=None, help="ARC task file to adapt to and score"
    )
    group.add_argument(
        "--adapt-solutions",
        type=Path,
        default=None,
        help="its solutions (default: X_solutions.json next to it)",
    )
    group.add_argument("--adapt-dir", type=Path, default=None, help="adaptation run (default: OUTPUT/adapt)")
    group.add_argument(
        "--adapt-unseen-only",
        action="store_true",
        help="keep only the tasks without trained puzzle-embedding rows in the checkpoint (its training "
        "dataset's identifiers): a score of tasks the model never saw, as on the hidden test set. Without it, "
        "tasks with trained rows are scored too, with a warning",
    )
    add_budget_flags(group, prefix="adapt-")


def _adapt_settings(args: argparse.Namespace, overrides: list[str]) -> Any:
    """The adaptation's settings when --adapt-challenges is given (checked before anything is read), else
    None; --adapt-* flags without --adapt-challenges are refused (they would do nothing)."""
    from trm.adapt.flags import given_flags, settings_from

    if args.adapt_challenges is None:
        given = given_flags(args, "adapt-") + [
            flag
            for flag, value in (
                ("--adapt-solutions", args.adapt_solutions),
                ("--adapt-dir", args.adapt_dir),
                ("--adapt-unseen-only", args.adapt_unseen_only),
            )
            if value
        ]
        if given:
            raise TRMError(
                f"{', '.join(given)} without --adapt-challenges: nothing would be adapted; add "
                "--adapt-challenges FILE (the tasks to adapt to and score) or drop them"
            )
        return None
    return settings_from(args, overrides, prefix="adapt-")


def main(argv: list[str] | None = None) -> int:
    """Parse, evaluate, return the exit code (2 with a one-line message on bad input)."""
    from trm.training.standalone_eval import evaluate_checkpoint

    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        from trm.hub.ref import default_output_dir, refuse_best, resolve

        settings = _adapt_settings(args, args.overrides)
        refuse_best(args.checkpoint, args.best)
        if args.output_dir is not None and args.output_dir.exists() and not args.output_dir.is_dir():
            raise TRMError(f"--output-dir {args.output_dir}: it is a file, not a folder; pass a folder")
        found = resolve(args.checkpoint)  # a path as is; hf://… downloaded through the Hub cache
        checkpoint, overrides, source = found.path, [*found.overrides, *args.overrides], found.source
        output_dir = args.output_dir or (default_output_dir(source) if source else None)
        if args.best:
            from trm.training.checkpointing.best import best_checkpoint

            best = best_checkpoint(checkpoint, args.metric)
            checkpoint = best.info.path
            logging.info(
                "evaluating %s, the best checkpoint (%s = %.6g)", checkpoint, best.metric, best.value
            )
        warnings: list[str] = []
        if settings is not None:
            checkpoint, warnings = _adapted(checkpoint, args, overrides, output_dir, settings)
        return evaluate_checkpoint(
            checkpoint,
            overrides,
            output_dir,
            args.weights == "ema",
            puzzle_ids=args.puzzle_ids,
            source=source,
            warnings=warnings,
        )
    except TRMError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code


def _adapted(
    checkpoint: Path,
    args: argparse.Namespace,
    overrides: list[str],
    output_dir: Path | None,
    settings: Any,
) -> tuple[Path, list[str]]:
    """Adapt `checkpoint` to --adapt-challenges; the adapted checkpoint and the warnings its evaluation
    reports (on stderr after the metrics, and in metrics.json). The run goes to --adapt-dir, else
    OUTPUT/adapt (never inside a Hub cache: an hf:// checkpoint's OUTPUT is its hub-evals folder)."""
    from trm.adapt.rows import trained_warning
    from trm.adapt.run import adapt
    from trm.adapt.source import source_from_checkpoint

    out = args.adapt_dir or (output_dir or checkpoint.parent) / "adapt"
    source = source_from_checkpoint(checkpoint, overrides)
    result = adapt(
        source,
        args.adapt_challenges,
        out,
        settings,
        solutions=args.adapt_solutions,
        unseen_only=args.adapt_unseen_only,
    )
    logging.info("adapted to %d task(s): evaluating %s", result.tasks, result.checkpoint)
    warnings = []
    if result.trained_tasks:
        warnings.append(
            f"{trained_warning(len(result.trained_tasks), result.tasks)}; this score is not a measure of "
            "unseen tasks: add --adapt-unseen-only to score only the tasks without trained rows"
        )
    return result.checkpoint, warnings


if __name__ == "__main__":
    sys.exit(main())
