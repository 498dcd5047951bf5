"""Trainer benchmark: optimizer steps/s of `python -m trm.train` at the tiny CPU config, optionally vs upstream.

    nox -s bench -- train [--steps 40] [--global-batch-size 32] [--keep DIR]
    TRM_UPSTREAM=/path/to/TinyRecursiveModels [TRM_UPSTREAM_PYTHON=python] nox -s bench -- train

Tiny config (TRM_SPEC §17): hidden 64, 4 heads, 1 layer, H 1, L 1, no puzzle embedding, fp32, batch 32,
seq 900, on the tiny ARC set (16 training + 8 evaluation tasks, 8 augmentations). Steps/s is measured
from the trainer's own metric timestamps after a warm-up, so start-up and evaluation are excluded.
Upstream (goal: ours ≥ 1.5× its steps/s) runs on the same data in upstream's layout; it needs CUDA unless
patched for CPU (TRM_SPEC §17), in which case its failure is reported instead of a ratio.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TINY = [
    "arch=trm",
    "arch.hidden_size=64",
    "arch.num_heads=4",
    "arch.L_layers=1",
    "arch.H_cycles=1",
    "arch.L_cycles=1",
    "arch.puzzle_emb_ndim=0",
    "arch.puzzle_emb_len=0",
    "arch.forward_dtype=float32",
    "lr=1e-3",
    "lr_warmup_steps=10",
]
GOAL_VS_UPSTREAM = 1.5
WARMUP_STEPS = 5


def build_data(out: Path, form: str) -> None:
    """The tiny ARC set of TRM_SPEC §17 in `form` (compact for us, materialized for upstream)."""
    cmd = [sys.executable, "-m", "trm", "data", "build-arc", "--output-dir", str(out), "--subsets", "training",
           "evaluation", "--test-set-name", "evaluation", "--num-aug", "8", "--max-puzzles", "16",
           "--form", form, "--quiet", "--overwrite"]  # fmt: skip
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def step_times(metrics_jsonl: Path) -> list[float]:
    """Seconds between consecutive logged train steps after the warm-up."""
    stamps: dict[int, float] = {}
    for line in metrics_jsonl.read_text().splitlines():
        row = json.loads(line)
        if "train/lr" in row:
            stamps[row["step"]] = row["wall_time"]
    steps = sorted(s for s in stamps if s > WARMUP_STEPS)
    return [stamps[b] - stamps[a] for a, b in itertools.pairwise(steps) if b == a + 1]


def bench_ours(data: Path, work: Path, steps: int, batch: int) -> dict[str, float]:
    """Run our trainer for `steps` steps without evaluation; steps/s from its metric timestamps."""
    run_dir = work / "ours"
    cmd = [sys.executable, "-m", "trm.train", *TINY, f"data_paths=[{data}]", f"global_batch_size={batch}",
           "epochs=1000", "eval_interval=1000", "evaluators=[]", f"max_steps={steps}", "checkpoint_keep=1",
           f"+checkpoint_path={run_dir}"]  # fmt: skip
    env = dict(os.environ, DISABLE_COMPILE="1", WANDB_MODE="disabled")
    started = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    times = step_times(run_dir / "metrics.jsonl")
    median = statistics.median(times)
    return {"steps_per_s": 1.0 / median, "median_s_per_step": median, "wall_s": time.perf_counter() - started}


def bench_upstream(upstream: Path, data: Path, batch: int) -> dict[str, float] | str:
    """Upstream's pretrain.py on the same data; steps/s from its tqdm bar, or why it could not run."""
    python = os.environ.get("TRM_UPSTREAM_PYTHON", sys.executable)
    cmd = [python, "pretrain.py", *[o for o in TINY if not o.startswith("arch=")], f"data_paths=[{data}]",
           f"global_batch_size={batch}", "epochs=1", "eval_interval=1", "evaluators=[]",
           f"+checkpoint_path={data.parent / 'upstream-ckpt'}"]  # fmt: skip
    env = dict(os.environ, DISABLE_COMPILE="1", WANDB_MODE="disabled", WANDB_DISABLED="true")
    try:
        proc = subprocess.run(cmd, cwd=upstream, env=env, capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired:
        return "timed out after 30 min"
    rates = [float(m) for m in re.findall(r"([0-9.]+)it/s", proc.stderr)]
    rates += [1.0 / float(m) for m in re.findall(r"([0-9.]+)s/it", proc.stderr) if float(m) > 0]
    if proc.returncode != 0 or not rates:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"exit {proc.returncode}: {last} (upstream needs the CPU patches of TRM_SPEC §17 off-GPU)"
    return {"steps_per_s": rates[-1], "median_s_per_step": 1.0 / rates[-1]}


def main(argv: list[str] | None = None) -> int:
    """Print a small table of steps/s (ours, upstream when TRM_UPSTREAM is set, ratio vs goal)."""
    parser = argparse.ArgumentParser(prog="nox -s bench -- train", description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--global-batch-size", type=int, default=32)
    parser.add_argument("--keep", type=Path, default=None, help="keep data and runs here")
    args = parser.parse_args(argv)
    work = args.keep or Path(tempfile.mkdtemp(prefix="trm-bench-train-"))
    try:
        build_data(work / "arc-tiny", "compact")
        ours = bench_ours(work / "arc-tiny", work, args.steps, args.global_batch_size)
        print(
            f"tiny CPU config, batch {args.global_batch_size}, torch threads {os.environ.get('OMP_NUM_THREADS', 'default')}"
        )
        print(
            f"  trm-stack: {ours['steps_per_s']:.2f} steps/s ({ours['median_s_per_step']:.3f} s/step median)"
        )
        upstream = os.environ.get("TRM_UPSTREAM")
        if upstream:
            build_data(work / "arc-tiny-upstream", "materialized")
            theirs = bench_upstream(Path(upstream), work / "arc-tiny-upstream", args.global_batch_size)
            if isinstance(theirs, str):
                print(f"  upstream:  could not run: {theirs}")
            else:
                ratio = ours["steps_per_s"] / theirs["steps_per_s"]
                verdict = "meets" if ratio >= GOAL_VS_UPSTREAM else "misses"
                print(f"  upstream:  {theirs['steps_per_s']:.2f} steps/s")
                print(f"  ratio:     {ratio:.2f}x ({verdict} the {GOAL_VS_UPSTREAM}x goal)")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
