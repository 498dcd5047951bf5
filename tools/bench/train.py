"""Trainer benchmark: optimizer steps/s of `python -m trm.train`, optionally against upstream's trainer.

    nox -s bench -- train [--setup tiny|paper] [--steps 40] [--keep DIR] [--json]
    nox -s bench -- train --setup paper --set loader_prefetch=2   # ours against ours with these overrides
    TRM_UPSTREAM=/path/to/TinyRecursiveModels [TRM_UPSTREAM_PYTHON=python] nox -s bench -- train

Setups:
- `tiny` (CPU): the bench-tiny recipe (trm/training/recipes.py: hidden 64, 4 heads, 1 layer, H 1, L 1, no puzzle
  embedding, fp32, batch 32), seq 900, eager, on its ARC set (16 tasks per subset, 8 augmentations). Goal:
  ours ≥ 1.5× upstream.
- `paper` (one CUDA GPU): the arc2 recipe (hidden 512, 2 layers, H 3, L 4, puzzle embedding, EMA),
  bf16, compiled (both trainers' default), batch 192 = one rank of the paper's 4 × 192, on ARC-AGI-2 +
  ConceptARC at 16 augmentations. Goal: ours ≥ 1.3× upstream; MFU is printed.

Steps/s comes from the trainer's own metric timestamps after a warm-up (start-up, compilation and
evaluation excluded). Upstream runs on the same data in its layout, through `tools.bench.upstream_trainer`
(on CPU its device changes are applied in memory), for about the same number of steps; its s/step comes
from its tqdm records after the same warm-up. Ours runs before and after it and both runs' steps are
pooled; each run times at least MIN_TIMED_STEPS step intervals, and each side reports its median and minimum
s/step (`--json` prints them as a JSON object too). Upstream's imports (pydantic, einops, argdantic, wandb, coolname) must be importable by
TRM_UPSTREAM_PYTHON (default: this interpreter; PYTHONPATH works too). If it cannot run, why is printed
instead of a ratio.

`--set KEY=VALUE` (repeatable) compares ours against ours with those trainer overrides instead (a step lever
such as `loader_prefetch=2`): ours, then the variant, each timing the same steps; upstream is not run.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tools import checkout_env
from trm.safe_remove import remove_own_temp
from trm.training.recipes import Recipe, get_recipe

WARMUP_STEPS = 5
MIN_TIMED_STEPS = 20  # per trainer run: fewer cannot tell a 2 % difference from the steps' spread


@dataclasses.dataclass(frozen=True)
class Setup:
    """One benchmark configuration: a recipe (trainer overrides shared by both trainers), data, device, goal."""

    name: str
    recipe: Recipe
    device: str
    compiled: bool
    goal: float
    data: str  # `trm data build-arc` selection flags

    @property
    def overrides(self) -> tuple[str, ...]:
        """The recipe as trainer overrides (upstream's keys: both trainers take them)."""
        return self.recipe.overrides

    @property
    def batch(self) -> int:
        return self.recipe.global_batch_size


_BENCH_TINY = get_recipe("bench-tiny")
# The arc2 model at one rank's share of the paper's 4-GPU batch.
_PAPER = get_recipe("arc2").with_changes(global_batch_size=192, arch={"forward_dtype": "bfloat16"})
SETUPS = {
    "tiny": Setup(
        name="tiny",
        recipe=_BENCH_TINY,
        device="cpu",
        compiled=False,
        goal=1.5,
        data=" ".join(_BENCH_TINY.build_args),
    ),
    "paper": Setup(
        name="paper",
        recipe=_PAPER,
        device="cuda",
        compiled=True,
        goal=1.3,
        data=" ".join((*_PAPER.build_args, "--num-aug", "16")),
    ),
}


def build_data(out: Path, setup: Setup, form: str) -> None:
    """The setup's ARC set in `form` (compact for us, materialized for upstream)."""
    cmd = [sys.executable, "-m", "trm", "data", "build-arc", "--output-dir", str(out), *setup.data.split(),
           "--form", form, "--quiet", "--overwrite"]  # fmt: skip
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def trainer_env(setup: Setup) -> dict[str, str]:
    """Environment for both trainers: no tracking; DISABLE_COMPILE (both honour it) for eager setups."""
    env = checkout_env({**os.environ, "WANDB_MODE": "disabled"})  # upstream's runs through tools.bench
    if setup.compiled:
        env.pop("DISABLE_COMPILE", None)
    else:
        env["DISABLE_COMPILE"] = "1"
    return env


def step_times(metrics_jsonl: Path) -> list[float]:
    """Seconds between consecutive logged train steps after the warm-up."""
    stamps: dict[int, float] = {}
    for line in metrics_jsonl.read_text().splitlines():
        row = json.loads(line)
        if "train/lr" in row:
            stamps[row["step"]] = row["wall_time"]
    steps = sorted(s for s in stamps if s > WARMUP_STEPS)
    return [stamps[b] - stamps[a] for a, b in itertools.pairwise(steps) if b == a + 1]


def bench_ours(
    setup: Setup, data: Path, run_dir: Path, steps: int, extra: tuple[str, ...] = ()
) -> list[float]:
    """Run our trainer for `steps` steps without evaluation (plus `extra` overrides); seconds per step from
    its metric timestamps."""
    cmd = [sys.executable, "-m", "trm.train", "arch=trm", *setup.overrides, f"data_paths=[{data}]",
           "epochs=100000", "eval_interval=100000", "evaluators=[]",
           f"max_steps={steps}", "checkpoint.keep=1", f"device={setup.device}",
           f"+checkpoint_path={run_dir}", *extra]  # fmt: skip
    proc = subprocess.run(
        cmd, env=trainer_env(setup), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise SystemExit(f"our trainer failed (exit {proc.returncode}):\n{tail}")
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


def bench_upstream(setup: Setup, upstream: Path, data: Path, steps: int) -> dict[str, float] | str:
    """Upstream's pretrain.py (through tools.bench.upstream_trainer) on the same data; s/step from its bar."""
    python = os.environ.get("TRM_UPSTREAM_PYTHON", sys.executable)
    epochs = upstream_epochs_for(data, steps, setup.batch)
    cmd = [python, "-m", "tools.bench.upstream_trainer", "--device", setup.device, str(upstream),
           *setup.overrides, f"data_paths=[{data}]", f"epochs={epochs}",
           f"eval_interval={epochs}", "evaluators=[]", f"+checkpoint_path={data.parent / 'upstream-ckpt'}"]  # fmt: skip
    try:
        proc = subprocess.run(
            cmd, cwd=upstream, env=trainer_env(setup), capture_output=True, text=True, timeout=3600
        )
    except subprocess.TimeoutExpired:
        return "timed out after 60 min"
    seconds = tqdm_step_seconds(proc.stderr)
    if proc.returncode != 0 or not seconds:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"exit {proc.returncode}: {last[-300:]}"
    return summary(seconds)


def model_config(setup: Setup):  # -> TRMConfig (torch is imported lazily: the driver stays light)
    """The setup's model as the model benchmark describes it (same names), at the setup's batch."""
    from tools.bench.model import CONFIGS

    return dataclasses.replace(CONFIGS[setup.name](), batch_size=setup.batch)


def attention_seconds(setup: Setup) -> float:
    """SDPA's share of one step of the setup, timed alone (see tools.bench.model)."""
    import torch

    from tools.bench.model import time_attention

    return time_attention(model_config(setup), torch.device(setup.device))


def mfu(setup: Setup, seconds_per_step: float) -> float | None:
    """Model FLOPs utilization of a step on this GPU (None on CPU or an unknown GPU)."""
    import torch

    from tools.bench.model import peak_flops, step_flops

    if setup.device != "cuda":
        return None
    peak = peak_flops(torch.device("cuda"))
    return step_flops(model_config(setup)) / seconds_per_step / peak if peak else None


def summary(seconds: list[float]) -> dict[str, float]:
    """Median and minimum seconds per step of the timed steps, and how many there were."""
    median = statistics.median(seconds)
    return {"steps_per_s": 1.0 / median, "median_s_per_step": median, "min_s_per_step": min(seconds),
            "steps": len(seconds)}  # fmt: skip


def results(setup: Setup, ours_times: list[float], theirs: dict[str, float] | str | None) -> dict:
    """What the table says, as one JSON-able record (`--json`): measured figures only."""
    ours = summary(ours_times)
    record: dict = {"setup": setup.name, "device": setup.device, "batch": setup.batch, "goal": setup.goal,
                    "warmup_steps": WARMUP_STEPS, "ours": {**ours, "mfu": mfu(setup, ours["median_s_per_step"])},
                    "upstream": None, "ratio_vs_upstream": None, "measured": True}  # fmt: skip
    if isinstance(theirs, str):
        record["upstream"] = {"failed": theirs}
    elif theirs is not None:
        record["upstream"] = {**theirs, "mfu": mfu(setup, theirs["median_s_per_step"])}
        record["ratio_vs_upstream"] = theirs["median_s_per_step"] / ours["median_s_per_step"]
    return record


def with_variant(setup: Setup, record: dict, overrides: list[str], variant_times: list[float]) -> dict:
    """`record` with the variant's figures and ours / variant s per step (> 1: the variant is faster)."""
    variant = summary(variant_times)
    ratio = record["ours"]["median_s_per_step"] / variant["median_s_per_step"]
    mfu_variant = mfu(setup, variant["median_s_per_step"])
    return {
        **record,
        "variant": {**variant, "mfu": mfu_variant, "overrides": overrides},
        "ratio_variant_vs_ours": ratio,
    }


def _side_line(label: str, side: dict) -> str:
    counted = f" median of {side['steps']}" if "steps" in side else ""
    extra = f", MFU {side['mfu']:.1%}" if side.get("mfu") is not None else ""
    fastest = f"; min {side['min_s_per_step']:.3f} s" if "min_s_per_step" in side else ""
    s = side["median_s_per_step"]
    return f"  {label:<10} {1 / s:.2f} steps/s ({s:.3f} s/step{counted}{extra}{fastest})"


def report(setup: Setup, record: dict) -> None:
    """The results table: ours, upstream (or why not), ratio against the goal, attention bound / MFU."""
    threads = os.environ.get("OMP_NUM_THREADS", "default")
    print(f"{setup.name} setup on {setup.device}, batch {setup.batch}, torch threads {threads}")
    print(_side_line("trm-stack:", record["ours"]))
    if "variant" in record:
        print(_side_line("variant:", record["variant"]) + f" with {' '.join(record['variant']['overrides'])}")
        print(f"  ratio:     {record['ratio_variant_vs_ours']:.3f}x (ours / variant s per step; > 1: faster)")
    theirs = record["upstream"]
    if theirs is None:
        return
    if "failed" in theirs:
        print(f"  upstream:  could not run: {theirs['failed']}")
        return
    print(_side_line("upstream:", theirs))
    ratio = record["ratio_vs_upstream"]
    verdict = "meets" if ratio >= setup.goal else "misses"
    print(f"  ratio:     {ratio:.2f}x ({verdict} the {setup.goal}x goal)")
    theirs_s = theirs["median_s_per_step"]
    if setup.device == "cpu":
        attention = attention_seconds(setup)
        print(
            f"  attention: {attention:.3f} s of every step is SDPA, the same PyTorch kernel in both; "
            f"no trainer can beat upstream by more than {theirs_s / attention:.2f}x here"
        )


def main(argv: list[str] | None = None) -> int:
    """Run the setup for ours (and upstream when TRM_UPSTREAM is set) and print the comparison."""
    parser = argparse.ArgumentParser(prog="nox -s bench -- train", description=__doc__.splitlines()[0])
    parser.add_argument("--setup", choices=sorted(SETUPS), default="tiny", help="tiny (CPU) or paper (GPU)")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--keep", type=Path, default=None, help="keep data and runs here")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object, last line")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="compare ours against ours with this trainer override (repeatable); upstream is not run")  # fmt: skip
    args = parser.parse_args(argv)
    bad = [o for o in args.set if "=" not in o or o.startswith("=")]
    if bad:
        parser.error(f"--set {bad[0]}: give KEY=VALUE, a trainer override such as loader_prefetch=2")
    if args.steps < WARMUP_STEPS + MIN_TIMED_STEPS + 1:
        parser.error(
            f"--steps {args.steps}: give at least {WARMUP_STEPS + MIN_TIMED_STEPS + 1} ({WARMUP_STEPS} warm-up "
            f"steps, then {MIN_TIMED_STEPS} timed step intervals per run)"
        )
    setup = SETUPS[args.setup]
    work = args.keep or Path(tempfile.mkdtemp(prefix="trm-bench-train-"))
    try:
        build_data(work / "arc", setup, "compact")
        upstream = None if args.set else os.environ.get("TRM_UPSTREAM")
        ours_times = bench_ours(setup, work / "arc", work / "ours-1", args.steps)
        theirs: dict[str, float] | str | None = None
        if args.set:
            variant_times = bench_ours(setup, work / "arc", work / "variant-1", args.steps, tuple(args.set))
        elif upstream:
            build_data(work / "arc-upstream", setup, "materialized")
            theirs = bench_upstream(setup, Path(upstream), work / "arc-upstream", args.steps)
            # Ours runs again after upstream and both runs' steps are pooled, so drift hits both alike.
            ours_times += bench_ours(setup, work / "arc", work / "ours-2", args.steps)
        record = results(setup, ours_times, theirs)
        if args.set:
            record = with_variant(setup, record, args.set, variant_times)
        report(setup, record)
        if args.json:
            print(json.dumps(record))
    finally:
        if args.keep is None:
            remove_own_temp(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
