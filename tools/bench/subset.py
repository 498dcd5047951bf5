"""Does a subset evaluation rank checkpoints like the full one? Evidence for `eval_subset.*` and `best.top_k`.

    nox -s bench -- subset [--out docs/figures] [--steps 1200] [--every 100] [--test 1000]
    nox -s bench -- subset --task arc [...]   (ARC's augmentation subsets: tools/bench/subset_arc.py)

Trains a small Sudoku model (generated puzzles with 2-12 blank cells, the sudoku-mlp recipe shrunk to CPU
size) with a checkpoint every `--every` steps and no in-run evaluation, evaluates every checkpoint once on
the full test set, keeping each row's exact-match outcome, then, for each subset fraction and seed, scores
every checkpoint on the rows that `trm.evaluation.subset.choose` picks (the in-run choice) and compares:

- the Spearman rank correlation of the subset scores with the full scores over the checkpoints;
- whether the subset's best checkpoint is the full set's best (ties: the later step, as `trm best`);
- whether the full set's best is among the subset's top k (what `best.top_k` re-evaluates), k = 1..3,
  and the full-score regret of choosing by subset + top-k re-evaluation;

over all checkpoints, and again over the near-best ones only (full score >= NEAR_BEST x the best), where
the choice is hard. With `--work DIR` the trained run and the outcomes are kept there and reused.

Writes `subset-ranking.json` (every figure, measured) and `subset-ranking.png` into `--out`.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tools.bench import subset_stats
from tools.bench.subset_run import load_for_evaluation, shown
from tools.bench.subset_run import train as run_training
from tools.bench.subset_stats import FRACTIONS, NEAR_BEST, SEEDS, best_index
from trm.io import atomic_write_json

TASKS = ("sudoku", "arc")


def sudoku_grid(rng: np.random.Generator) -> np.ndarray:
    """A random solved grid: a valid pattern under random band, row, stack, column and digit shuffles."""
    r, c = np.meshgrid(np.arange(9), np.arange(9), indexing="ij")
    base = (3 * (r % 3) + r // 3 + c) % 9
    rows = np.concatenate([b * 3 + rng.permutation(3) for b in rng.permutation(3)])
    cols = np.concatenate([s * 3 + rng.permutation(3) for s in rng.permutation(3)])
    return (rng.permutation(9) + 1)[base[rows][:, cols]]


def write_sudoku_csv(path: Path, n: int, seed: int, blanks: tuple[int, int]) -> None:
    """`n` puzzles in the Sudoku-Extreme CSV layout (source, question, answer, rating)."""
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["source", "question", "answer", "rating"])
        for i in range(n):
            grid = sudoku_grid(rng).ravel()
            hidden = rng.choice(81, size=int(rng.integers(*blanks)), replace=False)
            question = grid.astype(str).astype(object)
            question[hidden] = "."
            out.writerow([f"gen{i}", "".join(question), "".join(grid.astype(str)), str(len(hidden))])


def train(work: Path, args: argparse.Namespace) -> Path:
    """Build the dataset, train with a checkpoint every `args.every` steps (all kept); the run dir."""
    from trm.data.sudoku import build_sudoku_dataset
    from trm.training.recipes import get_recipe

    source = work / "source"
    blanks = (args.min_blanks, args.max_blanks + 1)
    write_sudoku_csv(source / "train.csv", args.train, 1, blanks)
    write_sudoku_csv(source / "test.csv", args.test, 2, blanks)
    build_sudoku_dataset(work / "data", source_dir=source, num_aug=args.num_aug)
    recipe = get_recipe("sudoku-mlp").with_changes(
        arch={"hidden_size": 64, "num_heads": 2, "L_layers": 1, "H_cycles": 2, "L_cycles": 2,
              "halt_max_steps": 4, "puzzle_emb_ndim": 16, "puzzle_emb_len": 1, "expansion": 2.0,
              "forward_dtype": "float32"},
        global_batch_size=64, epochs=1000, eval_interval=1000, lr=1e-3, lr_warmup_steps=50,
        weight_decay=0.1, puzzle_emb_weight_decay=0.1, ema=True, ema_rate=0.99,
    )  # fmt: skip
    return run_training(work / "data", work / "run", recipe, args.steps, args.every)


def row_outcomes(checkpoint: Path) -> np.ndarray:
    """Each test row's exact match (bool, in the test set's order) for a checkpoint's EMA weights."""
    import torch

    from trm.distributed import DistInfo
    from trm.evaluation.runner import evaluate

    step, head, test = load_for_evaluation(checkpoint)
    with tempfile.TemporaryDirectory() as out:
        evaluate(head, test, [], DistInfo(), chunk_size=512, save_dir=Path(out), step=step,
                 save_outputs=("preds",), show_progress=False)  # fmt: skip
        preds = torch.load(Path(out) / f"step_{step}_all_preds.0")["preds"].numpy()
    labels = np.concatenate([b["labels"].numpy() for _s, b, _n in test.iter_test()])[: len(preds)]
    mask = labels != -100
    return ((preds == labels) | ~mask).all(axis=1)


def compare(outcomes: np.ndarray, layout: list[Any]) -> dict[str, Any]:
    """Subset rankings against the full ranking for every fraction and seed (rows subsets)."""
    from trm.evaluation.subset import ROWS, choose

    def scores(fraction: float, seed: int) -> tuple[np.ndarray, int]:
        rows = choose(layout, fraction, seed, ROWS).examples[layout[0][0]]
        return outcomes[:, rows].mean(axis=1), len(rows)

    return subset_stats.compare(outcomes.mean(axis=1), scores)


def main(argv: list[str] | None = None) -> int:
    """`--task sudoku` (the default: row subsets, this module) or `--task arc` (tools.bench.subset_arc)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    picker = argparse.ArgumentParser(add_help=False)
    picker.add_argument("--task", choices=TASKS, default="sudoku")
    picked, rest = picker.parse_known_args(argv)
    if picked.task == "arc":
        from tools.bench import subset_arc

        return subset_arc.main(rest)
    return sudoku(rest)


def sudoku(argv: list[str]) -> int:
    """The Sudoku mode (row subsets); see the module doc."""
    parser = argparse.ArgumentParser(prog="nox -s bench -- subset", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--task", choices=TASKS, default="sudoku", help="sudoku (this mode) or arc (subset_arc)"
    )
    parser.add_argument("--out", default="docs/figures", help="where the JSON and the PNG go")
    parser.add_argument("--steps", type=int, default=1200, help="optimizer steps (batch 64)")
    parser.add_argument("--every", type=int, default=100, help="a checkpoint every this many steps")
    parser.add_argument("--train", type=int, default=400, help="generated training puzzles")
    parser.add_argument("--num-aug", type=int, default=8, help="shuffles per training puzzle")
    parser.add_argument("--min-blanks", type=int, default=2, help="fewest blank cells of a puzzle")
    parser.add_argument("--max-blanks", type=int, default=12, help="most blank cells of a puzzle")
    parser.add_argument("--test", type=int, default=1000, help="generated test puzzles")
    parser.add_argument("--work", default=None, help="keep the dataset and run here (default: a temp dir)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    import torch

    from trm.data.loader import PuzzleLoader
    from trm.evaluation.subset import ROWS, choose
    from trm.training.checkpointing.layout import find_complete

    torch.set_num_threads(1)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        saved = work / "outcomes.npz"  # --work: a second call reuses the trained run's outcomes
        if saved.is_file():
            kept = np.load(saved)
            steps, outcomes, seconds = kept["steps"].tolist(), kept["outcomes"], kept["seconds"].tolist()
        else:
            run_dir = train(work, args)
            trained = time.perf_counter()
            checkpoints = [c for c in find_complete(run_dir) if c.step > 0]
            steps = [c.step for c in checkpoints]
            outcomes = np.stack([row_outcomes(c.path) for c in checkpoints])
            seconds = [trained - started, time.perf_counter() - trained]
            np.savez(saved, steps=steps, outcomes=outcomes, seconds=seconds)
        layout = PuzzleLoader([work / "data"], "test", global_batch_size=64).test_layout()
    full = outcomes.mean(axis=1)
    near = np.nonzero(full >= NEAR_BEST * full.max())[0]
    record = {
        "measured": True,
        "command": "nox -s bench -- subset " + " ".join(shown(argv)),
        "setup": {
            **{k: v for k, v in vars(args).items() if k not in ("out", "work", "task")},
            "threads": 1,
            "fractions": FRACTIONS,
            "seeds": len(SEEDS),
        },
        "seconds": {"train": round(seconds[0], 1), "evaluate": round(seconds[1], 1)},
        "steps": steps,
        "full_exact_accuracy": [float(v) for v in full],
        "full_best_step": steps[best_index(full)],
        "example_subset_scores": {
            str(f): [float(v) for v in outcomes[:, choose(layout, f, 0, ROWS).examples["all"]].mean(axis=1)]
            for f in FRACTIONS
        },
        "comparison": compare(outcomes, layout),
        # Only the checkpoints within NEAR_BEST of the best: where choosing is hard.
        "near_best_steps": [steps[i] for i in near],
        "comparison_near_best": compare(outcomes[near], layout),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "subset-ranking.json", record)
    subset_stats.plot(out / "subset-ranking.png", steps, record["full_exact_accuracy"],
                      record["example_subset_scores"], record["comparison_near_best"], len(near))  # fmt: skip
    print(json.dumps({k: record[k] for k in ("seconds", "steps", "full_exact_accuracy")}))
    for table in ("comparison", "comparison_near_best"):
        for fraction, row in record[table].items():
            print(table, fraction, json.dumps(subset_stats.rounded(row)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
