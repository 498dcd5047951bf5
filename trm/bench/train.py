"""Trainer benchmark: optimizer steps/s of `python -m trm.train` at the tiny CPU config, optionally vs upstream.

    nox -s bench -- train [--steps 40] [--global-batch-size 32] [--keep DIR]
    TRM_UPSTREAM=/path/to/TinyRecursiveModels [TRM_UPSTREAM_PYTHON=python] nox -s bench -- train

Tiny config (TRM_SPEC §17): hidden 64, 4 heads, 1 layer, H 1, L 1, no puzzle embedding, fp32, batch 32,
seq 900, on the tiny ARC set (16 training + 8 evaluation tasks, 8 augmentations). Steps/s is measured
from the trainer's own metric timestamps after a warm-up, so start-up and evaluation are excluded.
Upstream (goal: ours ≥ 1.5× its steps/s) runs on the same data in upstream's layout, through
`trm.bench.upstream_trainer` (its CPU changes applied in memory), in one process, with about the same
number of steps; its steps/s comes from its tqdm bar after the same warm-up. Upstream's own imports
(pydantic, einops, argdantic, wandb, coolname) must be importable by TRM_UPSTREAM_PYTHON (default: this
interpreter; PYTHONPATH works too). If it cannot run, why is printed instead of a ratio.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
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


def bench_ours(data: Path, run_dir: Path, steps: int, batch: int) -> list[float]:
    """Run our trainer for `steps` steps without evaluation; seconds per step from its metric timestamps."""
    cmd = [sys.executable, "-m", "trm.train", *TINY, f"data_paths=[{data}]", f"global_batch_size={batch}",
           "epochs=1000", "eval_interval=1000", "evaluators=[]", f"max_steps={steps}", "checkpoint_keep=1",
           f"+checkpoint_path={run_dir}"]  # fmt: skip
    env = dict(os.environ, DISABLE_COMPILE="1", WANDB_MODE="disabled")
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return step_times(run_dir / "metrics.jsonl")


TQDM_PROGRESS = re.compile(r"(\d+)/\d+ \[[^,\]]*, *([0-9.]+)(it/s|s/it)\]")


def tqdm_step_seconds(stderr: str, warmup: int = WARMUP_STEPS) -> list[float]:
    """Seconds per step from tqdm's progress records, one per step reached after the warm-up.

    A record that does not advance the count (tqdm's refresh when the bar closes, after evaluation)
    is dropped, so time spent outside training steps never enters.
    """
    seconds, last = [], -1
    for count, rate, unit in TQDM_PROGRESS.findall(stderr):
        n, value = int(count), float(rate)
        if n <= last or value <= 0:
            continue
        last = n
        if n > warmup:
            seconds.append(value if unit == "s/it" else 1.0 / value)
    return seconds


def upstream_epochs_for(data: Path, steps: int, batch: int) -> int:
    """Epochs that give upstream about `steps` optimizer steps: it runs epochs·groups·mean_examples/batch."""
    meta = json.loads((data / "train" / "dataset.json").read_text(encoding="utf-8"))
    per_epoch = meta["total_groups"] * meta["mean_puzzle_examples"] / batch
    return max(1, round(steps / per_epoch))


def bench_upstream(upstream: Path, data: Path, batch: int, steps: int) -> dict[str, float] | str:
    """Upstream's pretrain.py on CPU (trm.bench.upstream_trainer) on the same data; steps/s from its bar."""
    python = os.environ.get("TRM_UPSTREAM_PYTHON", sys.executable)
    epochs = upstream_epochs_for(data, steps, batch)
    cmd = [python, "-m", "trm.bench.upstream_trainer", str(upstream),
           *[o for o in TINY if not o.startswith("arch=")], f"data_paths=[{data}]",
           f"global_batch_size={batch}", f"epochs={epochs}", f"eval_interval={epochs}", "evaluators=[]",
           f"+checkpoint_path={data.parent / 'upstream-ckpt'}"]  # fmt: skip
    env = dict(os.environ, DISABLE_COMPILE="1", WANDB_MODE="disabled")
    try:
        proc = subprocess.run(cmd, cwd=upstream, env=env, capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired:
        return "timed out after 30 min"
    seconds = tqdm_step_seconds(proc.stderr)
    if proc.returncode != 0 or not seconds:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"exit {proc.returncode}: {last[-300:]}"
    median = statistics.median(seconds)
    return {"steps_per_s": 1.0 / median, "median_s_per_step": median}


def attention_seconds(batch: int) -> float:
    """SDPA's share of one tiny-config step at this batch, timed alone (see trm.bench.model)."""
    import torch

    from trm.bench.model import time_attention, tiny_config

    return time_attention(dataclasses.replace(tiny_config(), batch_size=batch), torch.device("cpu"))


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
        upstream = os.environ.get("TRM_UPSTREAM")
        ours_times = bench_ours(work / "arc-tiny", work / "ours-1", args.steps, args.global_batch_size)
        theirs: dict[str, float] | str | None = None
        if upstream:
            build_data(work / "arc-tiny-upstream", "materialized")
            theirs = bench_upstream(
                Path(upstream), work / "arc-tiny-upstream", args.global_batch_size, args.steps
            )
            # Ours runs again after upstream and both runs' steps are pooled, so drift hits both alike.
            ours_times += bench_ours(work / "arc-tiny", work / "ours-2", args.steps, args.global_batch_size)
        ours_s = statistics.median(ours_times)
        threads = os.environ.get("OMP_NUM_THREADS", "default")
        print(f"tiny CPU config, batch {args.global_batch_size}, torch threads {threads}")
        print(f"  trm-stack: {1 / ours_s:.2f} steps/s ({ours_s:.3f} s/step median of {len(ours_times)})")
        if isinstance(theirs, str):
            print(f"  upstream:  could not run: {theirs}")
        elif theirs is not None:
            ratio = theirs["median_s_per_step"] / ours_s
            verdict = "meets" if ratio >= GOAL_VS_UPSTREAM else "misses"
            print(
                f"  upstream:  {theirs['steps_per_s']:.2f} steps/s ({theirs['median_s_per_step']:.3f} s/step)"
            )
            print(f"  ratio:     {ratio:.2f}x ({verdict} the {GOAL_VS_UPSTREAM}x goal)")
            attention = attention_seconds(args.global_batch_size)
            print(
                f"  attention: {attention:.3f} s of every step is SDPA, the same PyTorch kernel in both; "
                f"no trainer can beat upstream by more than {theirs['median_s_per_step'] / attention:.2f}x here"
            )
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
