"""`python -m trm best RUN_DIR [--metric M] [--json]`: the run's best complete checkpoint by an eval metric."""

from __future__ import annotations

import argparse
import json
import sys


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from trm.training.best import best_checkpoint

    best = best_checkpoint(Path(args.run_dir), args.metric)
    if args.json:
        print(json.dumps(best.as_dict(), indent=2))
    else:
        print(best.info.path)
        print(f"step {best.info.step}: {best.metric} = {best.value:.6g}", file=sys.stderr)
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Print the path of the run's complete checkpoint with the highest value of an evaluation metric "
        "(its step and value go to stderr; --json prints all). Evaluation checkpoints record their "
        "metrics; retention keeps the best checkpoint.keep_best of them."
    )
    parser.add_argument("run_dir", help="the run's checkpoint_path (holding step_N/ folders)")
    parser.add_argument(
        "--metric",
        default=None,
        help="metric to rank by, higher is better (default: the run's checkpoint.best_metric: ARC/pass@2 "
        "with an ARC evaluator, else eval/all/exact_accuracy)",
    )
    parser.add_argument("--json", action="store_true", help="print path, step, metric and value as JSON")
    parser.set_defaults(func=run)
