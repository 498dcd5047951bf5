"""`python -m trm.eval CHECKPOINT [key=value …]`: evaluate a checkpoint (ours or upstream's) standalone.

Writes `evaluator_ARC_step_N/submission.json` and `metrics.json` under --output-dir (default: the
checkpoint's run directory). Works in one process and under torchrun.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from trm.errors import TRMError


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = argparse.ArgumentParser(prog="python -m trm.eval", description=__doc__.splitlines()[0])
    parser.add_argument(
        "checkpoint",
        type=Path,
        help="a step_N/ folder of ours, or an upstream step_N file (with --best: a run directory)",
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
    add_budget_flags(group, prefix="adapt-")


def main(argv: list[str] | None = None) -> int:
    """Parse, evaluate, return the exit code (2 with a one-line message on bad input)."""
    from trm.training.standalone_eval import evaluate_checkpoint

    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        checkpoint = args.checkpoint
        if args.best:
            from trm.training.best import best_checkpoint

            best = best_checkpoint(checkpoint, args.metric)
            checkpoint = best.info.path
            logging.info(
                "evaluating %s, the best checkpoint (%s = %.6g)", checkpoint, best.metric, best.value
            )
        if args.adapt_challenges is not None:
            checkpoint = _adapted(checkpoint, args)
        return evaluate_checkpoint(checkpoint, args.overrides, args.output_dir, args.weights == "ema")
    except TRMError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code


def _adapted(checkpoint: Path, args: argparse.Namespace) -> Path:
    """Adapt `checkpoint` to --adapt-challenges (budget from the flags); the adapted checkpoint."""
    from trm.adapt.flags import settings_from
    from trm.adapt.run import adapt
    from trm.adapt.source import source_from_checkpoint

    settings = settings_from(args, args.overrides, prefix="adapt-")
    if args.adapt_steps is None and args.adapt_minutes is None:
        raise TRMError("--adapt-challenges needs a budget: --adapt-steps N and/or --adapt-minutes M")
    out = args.adapt_dir or (args.output_dir or checkpoint.parent) / "adapt"
    source = source_from_checkpoint(checkpoint, args.overrides)
    result = adapt(source, args.adapt_challenges, out, settings, solutions=args.adapt_solutions)  # type: ignore[arg-type]
    logging.info("adapted to %d task(s): evaluating %s", result.tasks, result.checkpoint)
    return result.checkpoint


if __name__ == "__main__":
    sys.exit(main())
