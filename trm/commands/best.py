"""`python -m trm best RUN_DIR [--metric M] [--top-k K] [--json]`: the run's best complete checkpoint."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trm.training.checkpointing.best import Best, FullEvaluation


def run(args: argparse.Namespace) -> int:
    from trm.errors import TRMError
    from trm.evaluation.subset import SUBSET_PREFIX
    from trm.training.checkpointing.best import best_checkpoint, run_ranking, scan_run, select_best
    from trm.training.checkpointing.layout import CheckpointInfo
    from trm.training.full_eval import CANDIDATES_DIR
    from trm.training.standalone_eval import full_metrics

    run_dir = Path(args.run_dir)
    if args.top_k is not None and args.top_k < 0:
        raise TRMError(f"--top-k {args.top_k} must be ≥ 0 (0: the subset score alone decides).")
    complete = scan_run(run_dir)  # read once: each torn checkpoint is warned about once
    ranked_by, run_top_k = (None, None) if args.metric else run_ranking(complete)
    if ranked_by is not None and ranked_by.startswith(SUBSET_PREFIX):

        def evaluate_full(info: CheckpointInfo) -> dict[str, float]:
            print(f"evaluating {info.path} on the full test set", file=sys.stderr)
            return full_metrics(info.path, run_dir / CANDIDATES_DIR / f"step_{info.step}")

        top_k = args.top_k if args.top_k is not None else (run_top_k or 0)
        if top_k > 0:  # evaluates and writes into the run directory: only while nobody else owns it
            asked = "--top-k" if args.top_k is not None else "the run's best.top_k"
            best = _choose_owning(
                run_dir, lambda: _select_top_k(run_dir, ranked_by, top_k, asked, evaluate_full)
            )
        else:
            best = select_best(run_dir, top_k, evaluate_full, complete=complete)
    else:
        best = best_checkpoint(run_dir, args.metric, complete=complete)
    if args.json:
        print(json.dumps(best.as_dict(), indent=2))
    else:
        print(best.info.path)
        print(
            f"step {best.info.step}: {best.metric} = {best.value:.6g} ({best.evaluation} evaluation)",
            file=sys.stderr,
        )
        if best.note:  # the run's recorded choice is gone: say what stands in for it
            print(f"note: {best.note}", file=sys.stderr)
    return 0


def _select_top_k(
    run_dir: Path, ranked_by: str, top_k: int, asked: str, evaluate_full: FullEvaluation
) -> Best:
    """Under the run's lock: its checkpoints as they are now (read again, quietly: the torn ones were
    warned about before the lock), a warning when retention kept fewer than `top_k` candidates (`asked`
    names where top_k came from), then `select_best` on that same list."""
    from trm.training.checkpointing.best import candidates_of, scan_run, select_best

    complete = scan_run(run_dir, warn=False)
    kept = len(candidates_of(complete, ranked_by, top_k))
    if kept < top_k:
        print(
            f"warning: {asked} is {top_k}, but retention kept {kept} checkpoints with {ranked_by}: "
            f"evaluating {kept}",
            file=sys.stderr,
        )
    return select_best(run_dir, top_k, evaluate_full, complete=complete)


def _choose_owning(run_dir: Path, choose: Callable[[], Best]) -> Best:
    """`choose()` under the run directory's lock (trm.runlock), then the choice also in run.json's `best`
    (so the report and the handoff agree). A running trainer or launcher holds the lock: refuse (exit 2)
    before anything is evaluated or written."""
    from trm.runlock import owned
    from trm.training.run_record import record_best

    advice = (
        "The run evaluates its best.top_k candidates itself when it ends; meanwhile `--top-k 0` prints the "
        "best by subset score without evaluating anything"
    )
    with owned(run_dir, "trm best", advice):
        best = choose()
        if (run_dir / "run.json").is_file():
            record_best(run_dir, best.as_dict())
        return best


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Print the path of the run's complete checkpoint with the highest value of an evaluation metric "
        "(its step, value and which evaluation gave it go to stderr; --json prints all). Evaluation "
        "checkpoints record their metrics; retention keeps the best checkpoint.keep_best of them. A run "
        "whose evaluations read a subset (eval_subset.fraction < 1) ranks by the subset score: the best "
        "--top-k of them are evaluated on the full test set (once; best.json records the scores) and the "
        "best full score wins, recorded in best.json and run.json's `best`. That evaluation needs the run "
        "directory's lock: refused (exit 2) while the run's trainer or launcher holds it."
    )
    parser.add_argument("run_dir", help="the run's checkpoint_path (holding step_N/ folders)")
    parser.add_argument(
        "--metric",
        default=None,
        help="metric to rank by, higher is better, read off the manifests only (default: the run's "
        "checkpoint.best_metric: ARC/pass@2 with an ARC evaluator, else eval/all/exact_accuracy; "
        "subset/<metric> for a subset run)",
    )
    parser.add_argument(
        "--top-k",
        type=int,
        default=None,
        help="subset runs: how many of the best checkpoints by subset score to evaluate on the full set "
        "(default: the run's best.top_k; 0: the subset score decides)",
    )
    parser.add_argument("--json", action="store_true", help="print path, step, metric and value as JSON")
    parser.set_defaults(func=run)
