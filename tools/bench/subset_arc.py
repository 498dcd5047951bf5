"""The subset bench's ARC mode: does an augmentation subset rank checkpoints like the full ARC evaluation?

    nox -s bench -- subset --task arc [--out docs/figures] [--steps 800] [--every 50] [--work DIR]

Generates small ARC tasks with learnable rules (tools.bench.arc_synthetic), builds them with the project's
ARC builder (`build_arc_dataset`: 30x30 canvas, 900 tokens, dihedral + colour augmentations), trains a
tiny TRM on the CPU with a checkpoint every `--every` steps and no in-run evaluation, and evaluates every
checkpoint once on the whole test split with the ARC evaluator, keeping each test example's vote
(tools.bench.subset_votes). Then, for each fraction and seed, it keeps the votes of the examples that
`trm.evaluation.subset.choose` picks in `augmentations` mode (the in-run choice: a share of each task's
augmented puzzles, every test input still voted on), rescores pass@2 and pass@1 per checkpoint
(per-checkpoint voting, what a subset run ranks by: `ARC/this_eval/pass@2`) and compares the rankings
with the full evaluation's (tools.bench.subset_stats), over all checkpoints and the near-best ones.

Writes `subset-ranking-arc.json` (every figure, measured, with wall and CPU seconds) and
`subset-ranking-arc.png` into `--out`. With `--work DIR` the dataset, the run and the votes are kept there
and a second call with the same setup reuses them.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tools.bench import arc_synthetic, subset_stats
from tools.bench.subset_run import load_for_evaluation, shown, train
from tools.bench.subset_votes import PASS_KS, ExampleVotes, by_example, rescore
from trm.errors import TRMError
from trm.io import atomic_write_json

FRACTIONS = (0.05, 0.1, 0.2, 0.3, 0.5)
METRICS = tuple(f"pass@{k}" for k in sorted(PASS_KS, reverse=True))  # pass@2 first: what runs rank by
RANKED_BY = "pass@2"
TRAIN_SUBSET, TEST_SUBSET = "train", "eval"
VOTES = "votes.json"  # in --work: the setup, the steps and every checkpoint's votes


def recipe(args: argparse.Namespace) -> Any:
    """The arc1 recipe shrunk to CPU size: one block applied twice per step (H 1, L 1), one ACT step,
    EMA; softmax cross-entropy, which learns these tasks within the CPU budget (stablemax did not). No
    in-run evaluation and no end-of-run choice (the recipe's subset and top-k off): the bench evaluates
    every checkpoint itself."""
    from trm.model.schema import LossConfig
    from trm.training.config import BestConfig, EvalSubsetConfig
    from trm.training.recipes import get_recipe

    return get_recipe("arc1").with_changes(
        arch={"hidden_size": args.hidden, "num_heads": 2, "L_layers": 1, "H_cycles": 1, "L_cycles": 1,
              "halt_max_steps": 1, "puzzle_emb_ndim": args.hidden, "puzzle_emb_len": 1, "expansion": 2.0,
              "forward_dtype": "float32", "loss": LossConfig(loss_type="softmax_cross_entropy")},
        global_batch_size=args.batch, epochs=100000, eval_interval=100000, lr=args.lr, lr_warmup_steps=20,
        puzzle_emb_lr=args.puzzle_emb_lr, weight_decay=0.1, puzzle_emb_weight_decay=0.1, ema=True, ema_rate=0.99,
        eval_subset=EvalSubsetConfig(fraction=1.0), best=BestConfig(top_k=0),
    )  # fmt: skip


def build(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Generate the tasks and build the ARC dataset `work/data`; the tasks per subset and family."""
    from trm.data.build_arc import build_arc_dataset

    prefix = work / "source" / "synthetic"
    made = arc_synthetic.write_subsets(
        prefix, {TRAIN_SUBSET: args.train_tasks, TEST_SUBSET: args.tasks}, seed=0
    )
    manifest = build_arc_dataset(
        work / "data", input_file_prefix=prefix, subsets=[TRAIN_SUBSET, TEST_SUBSET],
        test_set_name=TEST_SUBSET, num_aug=args.num_aug, overwrite=True,
    )  # fmt: skip
    return {"tasks": made, "dataset": {k: manifest["counts"][k] for k in ("train", "test")}}


def checkpoint_votes(checkpoint: Path) -> tuple[int, dict[str, float], list[Any]]:
    """(step, the ARC evaluator's full metrics, every test example's vote) of a checkpoint's EMA weights."""
    from trm.distributed import DistInfo
    from trm.evaluation.runner import evaluate

    step, head, test = load_for_evaluation(checkpoint)
    recorder = ExampleVotes(test)
    metrics = evaluate(head, test, [recorder], DistInfo(), chunk_size=512, save_dir=None, step=step,
                       show_progress=False)  # fmt: skip
    return step, metrics, recorder.votes()


def measure(work: Path, args: argparse.Namespace, setup: dict[str, Any]) -> dict[str, Any]:
    """Build, train, evaluate (or read `work/VOTES` of an earlier call with the same setup)."""
    from trm.training.checkpointing.layout import find_complete

    saved = work / VOTES
    if saved.is_file():
        kept = json.loads(saved.read_text())
        if kept["setup"] != setup:
            raise TRMError(
                f"--work {work}: its {VOTES} was measured with another setup ({kept['setup']}); "
                "pass the same flags, or another --work directory"
            )
        return kept
    wall, cpu = time.perf_counter(), time.process_time()
    made = build(work, args)
    run_dir = train(work / "data", work / "run", recipe(args), args.steps, args.every)
    trained_wall, trained_cpu = time.perf_counter(), time.process_time()
    checkpoints = [c for c in find_complete(run_dir) if c.step > 0]
    evaluated = [checkpoint_votes(c.path) for c in checkpoints]
    kept = {
        "setup": setup,
        **made,
        "steps": [step for step, _m, _v in evaluated],
        "metrics": [metrics for _s, metrics, _v in evaluated],
        "votes": [votes for _s, _m, votes in evaluated],
        "seconds": {"train": trained_wall - wall, "evaluate": time.perf_counter() - trained_wall},
        "cpu_seconds": {"train": trained_cpu - cpu, "evaluate": time.process_time() - trained_cpu},
    }
    atomic_write_json(saved, kept, indent=None)
    return kept


def subset_scores(
    test_puzzles: dict[str, Any], votes: list[dict[int, Any]], layout: list[Any]
) -> dict[tuple[float, int], tuple[np.ndarray, int]]:
    """Per (fraction, seed): every checkpoint's (pass@2, pass@1) on the kept examples [checkpoints, 2],
    and how many test examples are kept."""
    from trm.evaluation.subset import AUGMENTATIONS, choose

    out = {}
    for fraction in FRACTIONS:
        for seed in subset_stats.SEEDS:
            examples = choose(layout, fraction, seed, AUGMENTATIONS).examples[layout[0][0]]
            scores = [rescore(test_puzzles, v, examples) for v in votes]
            out[fraction, seed] = (np.array([[s[k] for k in sorted(PASS_KS, reverse=True)] for s in scores]),
                                   len(examples))  # fmt: skip
    return out


def puzzles_kept(layout: list[Any]) -> dict[str, list[int]]:
    """Per fraction: the fewest and most augmented puzzles (votes per test input) a task keeps (seed 0)."""
    from trm.evaluation.subset import AUGMENTATIONS, choose

    _name, groups, puzzles = layout[0]
    out = {}
    for fraction in FRACTIONS:
        examples = choose(layout, fraction, 0, AUGMENTATIONS).examples[layout[0][0]]
        kept = np.unique(np.searchsorted(puzzles, examples, side="right") - 1)
        per_group = np.bincount(np.searchsorted(groups, kept, side="right") - 1, minlength=len(groups) - 1)
        out[str(fraction)] = [int(per_group.min()), int(per_group.max())]
    return out


def _column(
    scores: dict[tuple[float, int], tuple[np.ndarray, int]], rows: np.ndarray, column: int
) -> subset_stats.SubsetScores:
    """`subset_stats.compare`'s view of `scores`: one metric (column), the checkpoints in `rows`."""

    def pick(fraction: float, seed: int) -> tuple[np.ndarray, int]:
        values, kept = scores[fraction, seed]
        return values[rows, column], kept

    return pick


def tables(
    steps: list[int], full: np.ndarray, scores: dict[tuple[float, int], tuple[np.ndarray, int]]
) -> dict[str, Any]:
    """The comparison over all checkpoints and the near-best ones, per metric (columns of `full`)."""
    result: dict[str, Any] = {"comparison": {}, "comparison_near_best": {}, "near_best_steps": {}}
    for column, metric in enumerate(METRICS):
        near = subset_stats.near_best(full[:, column])
        for key, rows in (("comparison", np.arange(len(steps))), ("comparison_near_best", near)):
            result[key][metric] = subset_stats.compare(
                full[rows, column], _column(scores, rows, column), size_key="examples", fractions=FRACTIONS
            )
        result["near_best_steps"][metric] = [steps[i] for i in near]
    return result


def score_gap(full: np.ndarray, scores: dict[tuple[float, int], tuple[np.ndarray, int]]) -> dict[str, Any]:
    """Per fraction: subset pass@2 - full pass@2 over checkpoints and seeds (mean; mean and max of its size).
    Fewer votes per test input give a lower pass@2: the subset's score is for ranking, not for reporting."""
    out = {}
    for fraction in FRACTIONS:
        gaps = np.concatenate([scores[fraction, s][0][:, 0] - full[:, 0] for s in subset_stats.SEEDS])
        out[str(fraction)] = {
            "mean": float(gaps.mean()),
            "mean_abs": float(np.abs(gaps).mean()),
            "max_abs": float(np.abs(gaps).max()),
        }
    return out


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="nox -s bench -- subset --task arc", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", default="docs/figures", help="where the JSON and the PNG go")
    parser.add_argument("--steps", type=int, default=800, help="optimizer steps")
    parser.add_argument("--every", type=int, default=50, help="a checkpoint every this many steps")
    parser.add_argument(
        "--tasks", type=int, default=32, help="generated test tasks (their test inputs are scored)"
    )
    parser.add_argument("--train-tasks", type=int, default=32, help="generated training-only tasks")
    parser.add_argument(
        "--num-aug", type=int, default=8, help="augmentations per task (the builder's --num-aug)"
    )
    parser.add_argument("--hidden", type=int, default=64, help="model width")
    parser.add_argument("--batch", type=int, default=32, help="global batch size")
    parser.add_argument("--lr", type=float, default=2e-3, help="learning rate")
    parser.add_argument("--puzzle-emb-lr", type=float, default=0.1, help="puzzle-embedding learning rate")
    parser.add_argument(
        "--work", default=None, help="keep the dataset, run and votes here (default: a temp dir)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    try:
        if (
            min(args.steps, args.every, args.tasks, args.train_tasks, args.hidden, args.batch) < 1
            or args.num_aug < 0
        ):
            raise TRMError(
                "--steps, --every, --tasks, --train-tasks, --hidden and --batch must be >= 1, --num-aug >= 0"
            )
        record = run(args, argv)
    except TRMError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    for table in ("comparison", "comparison_near_best"):
        for fraction, row in record[table][RANKED_BY].items():
            print(table, RANKED_BY, fraction, json.dumps(subset_stats.rounded(row)))
    return 0


def run(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    """Measure (or reuse --work), compare, write the JSON and the PNG; the record."""
    logging.basicConfig(level=logging.WARNING)
    import torch

    from trm.data.loader import PuzzleLoader

    setup = {k: v for k, v in vars(args).items() if k not in ("out", "work")}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the figures' CPU time is one thread's
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(args.work or tmp)
            work.mkdir(parents=True, exist_ok=True)
            kept = measure(work, args, setup)
            test = PuzzleLoader([work / "data"], "test", global_batch_size=64)
            layout, test_puzzles = test.test_layout(), test.test_puzzles
    finally:
        torch.set_num_threads(threads)
    started = time.perf_counter()
    votes = [by_example(v) for v in kept["votes"]]
    full = np.array(
        [[s[k] for k in sorted(PASS_KS, reverse=True)] for s in (rescore(test_puzzles, v) for v in votes)]
    )
    for step, metrics, row in zip(kept["steps"], kept["metrics"], full, strict=True):
        evaluator = [metrics[f"ARC/{m}"] for m in METRICS]
        if not np.array_equal(row, evaluator):  # the votes must give the evaluator's own full score
            raise TRMError(f"step {step}: rescored {row.tolist()} != the ARC evaluator's {evaluator}")
    scores = subset_scores(test_puzzles, votes, layout)
    steps = kept["steps"]
    record = {
        "measured": True,
        "command": "nox -s bench -- subset --task arc " + " ".join(shown(argv)),
        "setup": {
            **setup,
            "threads": 1,
            "fractions": FRACTIONS,
            "seeds": len(subset_stats.SEEDS),
            "seq_len": 900,
            "tasks_per_family": kept["tasks"],
            "dataset": kept["dataset"],
        },
        "seconds": {k: round(v, 1) for k, v in kept["seconds"].items()},
        "cpu_seconds": {k: round(v, 1) for k, v in kept["cpu_seconds"].items()},
        "steps": steps,
        **{f"full_{m}": full[:, c].tolist() for c, m in enumerate(METRICS)},
        "full_best_step": steps[subset_stats.best_index(full[:, 0])],
        "puzzles_kept_per_task": puzzles_kept(layout),
        "example_subset_scores": {str(f): scores[f, 0][0][:, 0].tolist() for f in FRACTIONS},
        **tables(steps, full, scores),
        "subset_minus_full_pass@2": score_gap(full, scores),
    }
    record["seconds"]["rescore"] = round(time.perf_counter() - started, 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "subset-ranking-arc.json", record)
    subset_stats.plot(
        out / "subset-ranking-arc.png", steps, record[f"full_{RANKED_BY}"], record["example_subset_scores"],
        record["comparison_near_best"][RANKED_BY], len(record["near_best_steps"][RANKED_BY]), metric="ARC pass@2",
    )  # fmt: skip
    return record
