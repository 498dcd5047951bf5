"""Learning-curve parity: our trainer against upstream's `pretrain.py`, or against ours with a change.

    TRM_UPSTREAM=/path/to/TinyRecursiveModels nox -s bench -- curves [--setup sudoku|arc] [--steps N]
        [--seeds S] [--out DIR]
    nox -s bench -- curves --setup sudoku --variant "lr2x: lr=2e-3"     # ours vs ours with overrides
    nox -s bench -- curves --setup sudoku --variant "curriculum: depth_curriculum.ramp=0.3 depth_curriculum.stages=2"
    nox -s bench -- curves --setup sudoku --resume-at random            # ours vs ours stopped and resumed
    nox -s bench -- curves --setup sudoku --subset-eval 0.1 --top-k 3    # full vs subset in-run evaluations
    nox -s bench -- curves --device cuda --steps 1000 --seeds 8 --time-budget-s 300   # on one GPU
    nox -s bench -- curves --replot OUT/sudoku-cuda.json               # draw the PNG of a JSON

Both trainers run on the same data (our compact build; upstream's materialized build of the same
puzzles) and configuration (a recipe of trm/training/recipes.py, rendered as the upstream keys both take),
for N optimizer steps and S seeds each (seed s for both), one process at a time, on CPU (or `--device
cuda`: both on the same GPU, eager), with train metrics logged every step and no evaluation. Upstream's metrics are recorded from its `wandb.log` calls
(`tools.bench.upstream_trainer --metrics`, W&B disabled); ours come from the run's metrics.jsonl.

The data orders differ by design (our loader draws from a counter-based hash, upstream's from numpy's
global generator), so the curves are compared in distribution, not step by step: at checkpoints every
N/10 steps (at least the ACT limit), each run's metric is its mean over the window since the previous
checkpoint, and the seeds give a mean with a
Student-t interval; the final checkpoint's difference gets Welch's interval (tools.bench.curve_stats).
The verdict per metric and overall: "indistinguishable at equal steps" or the step where they part.

When the two sides' steps cost different training FLOPs (a variant of another depth, e.g. a depth
curriculum, or size), they are also compared at equal compute: each run's window means placed at their
windows' mean cumulative FLOPs (the trainer's own count per step, trm.training.curriculum) and interpolated
onto 10 common FLOP values, from where both sides have a first window to the smaller of the two totals.

`--resume-at` stops our run by SIGTERM once it logged that step (it saves and exits 75), reruns the same
command (it resumes), and also checks identity: each seed's resumed run must log exactly the metrics of
the uninterrupted one at every step ("identical"), not only a matching distribution.

`--subset-eval FRACTION` compares ours evaluating the whole test set at about `--evals` in-run evaluations
(from step `--eval-from` on) with ours evaluating a subset there (`eval_subset.fraction=FRACTION`,
`eval_subset.seed` = the run's seed, `best.top_k=--top-k`): the training curves must be identical step by
step, the checkpoints' weights equal, and the checkpoint the subset run chooses at its end the full run's
best or within its Wilson interval (tools.bench.curve_subset).

`--time-budget-s T` makes S a maximum: no seed pair starts once the longest pair so far would end past T
seconds from the start (data build included), after the first two. The files are rewritten after every
seed from the second, so a run cut off by a time limit keeps its comparison so far.

Writes <out>/<setup>[-<variant>|-resume|-subset<FRACTION>][-cuda].json (every run's curve, the intervals, the verdicts, each
side's training FLOPs when they differ, the command) and a .png beside it (both trainers' means with their
bands; a second row at equal compute when compared); where matplotlib does not import
(a GPU host with the kit) the JSON says so and `--replot JSON` draws the PNG elsewhere. All figures are
measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tools import checkout_env
from tools.bench import curve_data, curve_stats, curve_subset
from tools.bench.curve_output import report, write_outputs
from trm.errors import TRMError
from trm.exit_codes import SAVED_RETRY
from trm.safe_remove import remove_own_temp
from trm.training.recipes import Recipe, get_recipe

METRICS = ("train/lm_loss", "train/accuracy", "train/exact_accuracy", "train/q_halt_accuracy")
# Means over the sequences that halted in the step: a step where none halted has no value (upstream logs
# 0 there, dividing by max(count, 1); ours logs nothing), so those steps are skipped for these.
PER_HALTED = frozenset(("train/accuracy", "train/exact_accuracy", "train/q_halt_accuracy"))
Curves = dict[str, dict[int, float]]  # metric -> step -> value
LEVEL = curve_stats.LEVEL  # of every interval
DEVICES = ("cpu", "cuda")


@dataclasses.dataclass(frozen=True)
class Setup:
    """A configuration both trainers run: the recipe and how its dataset is built."""

    name: str
    recipe: Recipe
    builder: str
    build_args: tuple[str, ...]
    steps: int  # the default run length
    sudoku_csv: tuple[int, int, int] | None = None  # train puzzles, test puzzles, blanks (generated CSVs)
    eval_test: int | None = None  # generated test puzzles when in-run evaluations are compared


_SMALL_TRM = {"hidden_size": 64, "num_heads": 2, "L_layers": 1, "H_cycles": 2, "L_cycles": 2,
              "halt_max_steps": 4, "puzzle_emb_ndim": 64, "puzzle_emb_len": 1, "forward_dtype": "float32"}  # fmt: skip
_SHORT_RUN = {"global_batch_size": 32, "lr": 1e-3, "lr_warmup_steps": 20, "weight_decay": 0.1,
              "puzzle_emb_weight_decay": 0.1, "puzzle_emb_lr": 1e-2, "ema": False, "evaluators": []}  # fmt: skip

SETUPS = {
    "sudoku": Setup(
        name="sudoku",
        # upstream README's Sudoku MLP variant (mlp_t, no position encodings), shrunk to run on one core
        recipe=get_recipe("sudoku-mlp").with_changes(arch=_SMALL_TRM, **_SHORT_RUN),
        builder="build-sudoku",
        build_args=("--num-aug", "8"),
        steps=200,
        sudoku_csv=(512, 64, 2),
        eval_test=512,
    ),
    "arc": Setup(
        name="arc",
        # the trainer benchmark's ARC set (16 tasks per subset, 8 augmentations), seq 900, with a puzzle embedding
        recipe=get_recipe("bench-tiny").with_changes(
            arch={**_SMALL_TRM, "hidden_size": 32, "puzzle_emb_ndim": 32, "pos_encodings": "rope"},
            **{**_SHORT_RUN, "global_batch_size": 16},
        ),
        builder="build-arc",
        build_args=get_recipe("bench-tiny").build_args,
        steps=40,
    ),
}


def build_data(setup: Setup, work: Path) -> tuple[Path, Path]:
    """The setup's dataset, compact (ours) and materialized (upstream's)."""
    args = list(setup.build_args)
    if setup.sudoku_csv is not None:
        train, test, blanks = setup.sudoku_csv
        source = curve_data.write_sudoku_csvs(work / "sudoku-csv", train, test, blanks)
        args += ["--source-dir", str(source)]
    ours = curve_data.build(setup.builder, args, work / "data-compact", "compact")
    theirs = curve_data.build(setup.builder, args, work / "data-materialized", "materialized")
    return ours, theirs


def epochs_for(data: Path, steps: int, batch: int) -> int:
    """Epochs whose schedule has at least `steps` full batches (one spare epoch: upstream drops partial ones)."""
    meta = json.loads((data / "train" / "dataset.json").read_text(encoding="utf-8"))
    per_epoch = meta["total_groups"] * meta["mean_puzzle_examples"] / batch
    return math.ceil(steps / per_epoch) + 1


def trainer_env() -> dict[str, str]:
    """No tracking, eager, one torch thread (one core per run: the runs' timing does not matter, their math does)."""
    env = checkout_env({**os.environ, "WANDB_MODE": "disabled", "DISABLE_COMPILE": "1"})
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def read_jsonl(path: Path, steps: int) -> Curves:
    """Per-metric curves of steps 1..steps from a JSONL of {"step": N, name: value, ...} rows (the
    per-halted-sequence metrics only at steps where some sequence halted, train/count > 0)."""
    curves: Curves = {m: {} for m in METRICS}
    if not path.is_file():
        return curves
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        step = row.get("step")
        if step is None or not 1 <= step <= steps:
            continue
        halted = row.get("train/count", 0) > 0
        for metric in METRICS:
            if metric in row and (halted or metric not in PER_HALTED):
                curves[metric][int(step)] = float(row[metric])
    return curves


def _run(cmd: list[str], cwd: Path | None, what: str) -> None:
    proc = subprocess.run(
        cmd, cwd=cwd, env=trainer_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise TRMError(f"{what} failed (exit {proc.returncode}):\n{tail}")


# Our trainer's evaluation settings unless a plan evaluates: none, and one checkpoint kept.
NO_EVALUATION = ("evaluate=false", "checkpoint.keep=1")


@dataclasses.dataclass(frozen=True)
class OursRun:
    """One run of our trainer: its overrides on data `data`, in `run_dir`, for `steps` steps from `seed`."""

    overrides: Sequence[str]
    data: Path
    run_dir: Path
    seed: int
    steps: int
    device: str = "cpu"
    evaluation: Sequence[str] = NO_EVALUATION

    def command(self) -> list[str]:
        return [sys.executable, "-m", "trm.train", *self.overrides, f"data_paths=[{self.data}]",
                f"seed={self.seed}", f"max_steps={self.steps}", "log_interval=1", *self.evaluation,
                f"device={self.device}", f"+checkpoint_path={self.run_dir}"]  # fmt: skip

    @property
    def metrics(self) -> Path:
        return self.run_dir / "metrics.jsonl"


def run_ours(run: OursRun) -> Curves:
    """Our trainer for `run.steps` steps."""
    _run(run.command(), None, f"our trainer (seed {run.seed})")
    return read_jsonl(run.metrics, run.steps)


def logged_step(metrics: Path) -> int:
    """The last step in a metrics.jsonl being written (0 when none yet)."""
    if not metrics.is_file():
        return 0
    lines = metrics.read_text(encoding="utf-8").splitlines()
    complete = [line for line in lines if line.endswith("}")]  # the last line may be half written
    return json.loads(complete[-1])["step"] if complete else 0


def interrupt_at(cmd: list[str], metrics: Path, step: int, what: str) -> None:
    """Run `cmd`, send SIGTERM once `metrics` has logged `step`, and require the trainer's "saved, rerun"
    exit (SAVED_RETRY): a preemption as on a rented host."""
    proc = subprocess.Popen(
        cmd, env=trainer_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        while proc.poll() is None and logged_step(metrics) < step:
            time.sleep(0.05)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != SAVED_RETRY:
        tail = "\n".join(stderr.strip().splitlines()[-5:])
        raise TRMError(
            f"{what}: expected exit {SAVED_RETRY} (saved) after SIGTERM, got {proc.returncode}:\n{tail}"
        )


def run_ours_resumed(run: OursRun, at: int) -> tuple[Curves, int]:
    """Our trainer stopped by SIGTERM once step `at` is logged, then the same command again (it resumes
    from the checkpoint the signal saved); the curves and the step it resumed from."""
    cmd = run.command()
    interrupt_at(cmd, run.metrics, at, f"our trainer (seed {run.seed}, stopped at step {at})")
    saved = max(int(p.name.removeprefix("step_")) for p in run.run_dir.glob("step_*") if p.is_dir())
    _run(cmd, None, f"our trainer (seed {run.seed}, resumed from step {saved})")
    return read_jsonl(run.metrics, run.steps), saved


def run_upstream(
    overrides: Sequence[str],
    checkout: Path,
    data: Path,
    run_dir: Path,
    seed: int,
    steps: int,
    device: str = "cpu",
) -> Curves:
    """Upstream's pretrain.py (tools.bench.upstream_trainer) for its epochs; its first `steps` steps."""
    run_dir.mkdir(parents=True, exist_ok=True)
    metrics = run_dir / "metrics.jsonl"
    # min_eval_interval=1 with a single iteration: upstream neither evaluates nor saves
    cmd = [sys.executable, "-m", "tools.bench.upstream_trainer", "--device", device, "--metrics", str(metrics),
           str(checkout), *overrides, f"data_paths=[{data}]", f"seed={seed}", "min_eval_interval=1",
           f"+checkpoint_path={run_dir / 'ckpt'}", "+project_name=curves", f"+run_name=seed{seed}"]  # fmt: skip
    _run(cmd, checkout, f"upstream's pretrain.py (seed {seed})")
    curves = read_jsonl(metrics, steps)
    if len(curves["train/lm_loss"]) < steps:
        raise TRMError(
            f"upstream's pretrain.py logged {len(curves['train/lm_loss'])} of {steps} steps (seed {seed})"
        )
    return curves


def train_flops(overrides: Sequence[str], data: Path, steps: int) -> list[float]:
    """Cumulative model training FLOPs of our trainer with `overrides` on `data` after steps 0..steps
    (index s: steps 1..s), each step at its depth (a depth curriculum's early steps are cheaper): the
    trainer's own count (trm.training.throughput, trm.training.curriculum) times the global batch."""
    from trm.model.registry import model_config
    from trm.training.config import compose
    from trm.training.curriculum import cumulative_train_flops, run_schedule
    from trm.training.throughput import total_steps

    cfg = compose([*overrides, f"data_paths=[{data}]"])
    meta = json.loads((data / "train" / "dataset.json").read_text(encoding="utf-8"))
    model = model_config(
        cfg.arch, batch_size=1, seq_len=meta["seq_len"], vocab_size=meta["vocab_size"],
        num_puzzle_identifiers=meta["num_puzzle_identifiers"], forward_dtype="float32",
    )  # fmt: skip
    total = total_steps(cfg.epochs, meta["total_groups"], meta["mean_puzzle_examples"], cfg.global_batch_size)
    return cumulative_train_flops(model, run_schedule(cfg, total), steps, cfg.global_batch_size)


def identical(a: Curves, b: Curves) -> int | None:
    """The first step where two runs' logged metrics differ (None: equal at every step of every metric)."""
    differing = [s for m in METRICS for s in sorted(set(a[m]) | set(b[m])) if a[m].get(s) != b[m].get(s)]
    return min(differing) if differing else None


def compare(
    runs_a: list[Curves], runs_b: list[Curves], steps: int, halt_max_steps: int
) -> list[curve_stats.MetricComparison]:
    """Both sides at checkpoints every steps/10 steps, but never closer than `halt_max_steps`: every window
    then holds a step where some sequence halted (each halts within that many steps), so the per-halted
    metrics have a value in each."""
    every = max(steps // 10, halt_max_steps)
    marks = curve_stats.checkpoints(steps, every)
    return [
        curve_stats.compare_metric(
            m, [r[m] for r in runs_a], [r[m] for r in runs_b], marks, window=every, level=LEVEL
        )
        for m in METRICS
    ]


# Keys whose change changes the training FLOPs per step: the model, the depth curriculum, the batch.
FLOP_KEYS = ("arch", "depth_curriculum.", "global_batch_size")


def changes_flops(overrides: Sequence[str]) -> bool:
    """Whether a variant's overrides touch what the training FLOPs per step depend on (FLOP_KEYS)."""
    return any(o.split("=", 1)[0].lstrip("+").startswith(FLOP_KEYS) for o in overrides)


def comparison_rows(
    runs_a: list[Curves],
    runs_b: list[Curves],
    steps: int,
    halt_max_steps: int,
    flops: tuple[list[float], list[float]] | None,
) -> list[list[curve_stats.MetricComparison]]:
    """At equal steps; and at equal compute when the sides' FLOPs per step differ."""
    rows = [compare(runs_a, runs_b, steps, halt_max_steps)]
    if flops is not None and flops[0] != flops[1]:
        rows.append(compare_at_compute(runs_a, runs_b, flops, steps, halt_max_steps))
    return rows


def compare_at_compute(
    runs_a: list[Curves],
    runs_b: list[Curves],
    flops: tuple[list[float], list[float]],
    steps: int,
    halt_max_steps: int,
) -> list[curve_stats.MetricComparison]:
    """Both sides at equal training compute: each run's window means (the equal-step window) placed at
    its cumulative FLOPs and interpolated onto 10 common FLOP values (curve_stats.compare_metric_at_compute)."""
    window = max(steps // 10, halt_max_steps)
    return [
        curve_stats.compare_metric_at_compute(
            m, [r[m] for r in runs_a], [r[m] for r in runs_b], *flops, window=window, level=LEVEL
        )
        for m in METRICS
    ]


def parse_variant(text: str) -> tuple[str, list[str]]:
    """'NAME: key=value key=value' -> (NAME, overrides)."""
    name, sep, rest = text.partition(":")
    overrides = shlex.split(rest)
    if not sep or not name.strip() or not overrides or not all("=" in o for o in overrides):
        raise TRMError(
            f"--variant {text!r}: write it as 'NAME: key=value [key=value ...]' (our trainer's overrides)"
        )
    return name.strip(), overrides


def with_overrides(base: Sequence[str], overrides: Sequence[str]) -> tuple[str, ...]:
    """`base` overrides with `overrides` appended, each key given once (the new value wins)."""
    keys = {o.split("=", 1)[0].lstrip("+") for o in overrides}
    return (*(o for o in base if o.split("=", 1)[0].lstrip("+") not in keys), *overrides)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nox -s bench -- curves", description=__doc__.splitlines()[0])
    parser.add_argument("--setup", choices=sorted(SETUPS), default="sudoku")
    parser.add_argument(
        "--steps", type=int, default=None, help="optimizer steps per run (default: the setup's)"
    )
    parser.add_argument("--seeds", type=int, default=3, help="runs per side, seeds 0..S-1 (2 or more)")
    parser.add_argument("--out", type=Path, default=Path("build/curves"), help="where the JSON and PNG go")
    parser.add_argument("--keep", type=Path, default=None, help="keep data and run directories here")
    change = parser.add_mutually_exclusive_group()
    change.add_argument(
        "--variant", default=None, help="'NAME: key=value ...': ours against ours with these overrides"
    )
    change.add_argument(
        "--resume-at", default=None, help="STEP or 'random': ours against ours stopped there and resumed"
    )
    change.add_argument(
        "--subset-eval",
        type=float,
        default=None,
        metavar="FRACTION",
        help="ours with full in-run evaluations against ours evaluating this share of the test set in-run",
    )
    parser.add_argument(
        "--top-k", type=int, default=3, help="with --subset-eval: the subset side's best.top_k (default 3)"
    )
    parser.add_argument(
        "--evals",
        type=int,
        default=10,
        help="with --subset-eval: in-run evaluations per run (about; default 10), from --eval-from on",
    )
    parser.add_argument(
        "--eval-from",
        type=int,
        default=0,
        metavar="STEP",
        help="with --subset-eval: no in-run evaluation before this step (default 0: from the first pass)",
    )
    parser.add_argument(
        "--device", choices=DEVICES, default="cpu", help="where both trainers run (default cpu)"
    )
    parser.add_argument("--time-budget-s", type=float, default=None, metavar="T",
                        help="--seeds becomes a maximum: no seed pair starts that would end past T seconds")  # fmt: skip
    parser.add_argument("--replot", type=Path, default=None, metavar="JSON",
                        help="only draw the PNG of a JSON this harness wrote (beside it), e.g. one from a GPU host")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        if args.replot is not None:
            return replot(args.replot)
        return _main(args, parser.prog, recorded_argv(list(sys.argv[1:] if argv is None else argv)))
    except TRMError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one harness run compares: side A is always ours on the setup's config; side B is named here."""

    labels: tuple[str, str]
    suffix: str  # of the output files' names
    run_b: Callable[[int], Curves]  # seed -> side B's curves
    resume_at: int | None = None
    resumed_from: list[int] | None = None  # per seed: the step of the checkpoint the SIGTERM saved
    overrides_b: tuple[str, ...] | None = None  # side B's trainer config when it is not side A's
    run_a: Callable[[int], Curves] | None = None  # seed -> side A's curves (None: ours, no evaluation)
    finish: Callable[[list[Curves], list[Curves]], dict] | None = None  # both sides' runs -> JSON entries


def plan(
    args: argparse.Namespace, base: tuple[str, ...], data: tuple[Path, Path], work: Path, steps: int
) -> Plan:
    """Side B: ours with --variant overrides, ours stopped at --resume-at and resumed, ours evaluating a
    subset in-run (--subset-eval; side A then evaluates in full), else upstream."""
    ours_data, theirs_data = data
    device = args.device
    if args.subset_eval is not None:
        return subset_plan(args, base, ours_data, work, steps)
    if args.variant is not None:
        name, overrides = parse_variant(args.variant)
        changed = with_overrides(base, overrides)
        return Plan(
            ("trm-stack", f"trm-stack {name}"),
            f"-{name}",
            lambda seed: run_ours(OursRun(changed, ours_data, work / f"{name}-{seed}", seed, steps, device)),
            overrides_b=changed,
        )
    if args.resume_at is not None:
        at = _resume_step(args.resume_at, steps)
        resumed_from: list[int] = []

        def resumed(seed: int) -> Curves:
            curves, saved = run_ours_resumed(
                OursRun(base, ours_data, work / f"resumed-{seed}", seed, steps, device), at
            )
            resumed_from.append(saved)
            return curves

        return Plan(
            ("trm-stack", f"trm-stack stopped at {at}, resumed"), "-resume", resumed, at, resumed_from
        )
    checkout = os.environ.get("TRM_UPSTREAM")
    if not checkout:
        raise TRMError(
            "TRM_UPSTREAM is not set: point it at a TinyRecursiveModels checkout (or pass --variant or --resume-at)"
        )
    return Plan(
        ("trm-stack", "upstream"),
        "",
        lambda seed: run_upstream(
            base, Path(checkout), theirs_data, work / f"upstream-{seed}", seed, steps, device
        ),
    )


def check_subset_args(fraction: float, top_k: int, evals: int, eval_from: int, steps: int) -> None:
    """--subset-eval, --top-k, --evals and --eval-from as the comparison needs them."""
    if not 0 < fraction < 1:
        raise TRMError(f"--subset-eval {fraction}: give the subset's share of the test set, in (0, 1)")
    if top_k < 1:
        raise TRMError(
            f"--top-k {top_k}: the subset run re-evaluates its top k on the full set at its end; give 1 or more"
        )
    if evals < 2:
        raise TRMError(f"--evals {evals}: choosing a best checkpoint needs 2 or more evaluations")
    if not 0 <= eval_from < steps:
        raise TRMError(f"--eval-from {eval_from}: give a step in 0..{steps - 1} (the run has {steps})")


def eval_schedule(data: Path, steps: int, batch: int, evals: int, start: int = 0) -> tuple[int, int, int]:
    """(epochs, eval_interval, min_eval_interval) for about `evals` in-run evaluations between step
    `start` and step `steps`: one after every `eval_interval` epochs (at least 1) from the first pass that
    ends at or after `start` on, and epochs a multiple of the interval covering the steps."""
    meta = json.loads((data / "train" / "dataset.json").read_text(encoding="utf-8"))
    per_epoch = meta["total_groups"] * meta["mean_puzzle_examples"] / batch
    interval = max(1, round((steps - start) / evals / per_epoch))
    epochs = interval * math.ceil(epochs_for(data, steps, batch) / interval)
    first = max(0, math.ceil(start / (interval * per_epoch)) - 1)
    return epochs, interval, first


# Both sides of --subset-eval: evaluate after every pass, an evaluation checkpoint each, all kept, none by time.
IN_RUN_EVALUATION = (
    "evaluate=true",
    "checkpoint.keep=0",
    "checkpoint.every_eval=true",
    "checkpoint.every_minutes=0",
)


def subset_plan(args: argparse.Namespace, base: tuple[str, ...], data: Path, work: Path, steps: int) -> Plan:
    """Side A: ours evaluating the whole test set in-run; side B: the same, evaluating a subset
    (eval_subset.fraction, seeded by the run's seed) and choosing its best among the top k on the full set."""
    batch = int(next(o for o in base if o.startswith("global_batch_size=")).split("=", 1)[1])
    epochs, interval, first = eval_schedule(data, steps, batch, args.evals, args.eval_from)
    scheduled = with_overrides(
        base, [f"epochs={epochs}", f"eval_interval={interval}", f"min_eval_interval={first}"]
    )
    fraction, top_k, device = args.subset_eval, args.top_k, args.device

    def subset_keys(seed: int) -> tuple[str, ...]:
        return (*IN_RUN_EVALUATION, f"eval_subset.fraction={fraction}", f"eval_subset.seed={seed}",
                f"best.top_k={top_k}")  # fmt: skip

    def finish(runs_a: list[Curves], runs_b: list[Curves]) -> dict:
        full = [work / f"full-{seed}" for seed in range(len(runs_a))]
        subset = [work / f"subset-{seed}" for seed in range(len(runs_b))]
        identity = step_identity(runs_a, runs_b)
        weights = [curve_subset.weights_identity(a, b) for a, b in zip(full, subset, strict=True)]
        best = curve_subset.compare_runs(full, subset)
        same_weights = all(w["first_difference"] is None for w in weights)
        training = "identical" if identity["identical"] and same_weights else "NOT identical"
        return {
            "eval_schedule": {
                "epochs": epochs,
                "eval_interval": interval,
                "min_eval_interval": first,
                "fraction": fraction,
                "top_k": top_k,
            },
            "identical": identity["identical"],
            "first_difference": identity["first_difference"],
            "weights": weights,
            "best": best,
            "verdict": f"training {training} at every step; {best['verdict']}",
        }

    return Plan(
        ("trm-stack full evaluations", f"trm-stack subset {fraction:g}, top-{top_k}"),
        f"-subset{fraction:g}",
        lambda seed: run_ours(
            OursRun(scheduled, data, work / f"subset-{seed}", seed, steps, device, subset_keys(seed))
        ),
        run_a=lambda seed: run_ours(
            OursRun(scheduled, data, work / f"full-{seed}", seed, steps, device, IN_RUN_EVALUATION)
        ),
        finish=finish,
    )


def recorded_argv(argv: list[str]) -> list[str]:
    """The command line as the JSON records it: without `--keep DIR` (a local scratch path, no effect on results)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--keep":
            skip = True
        elif not arg.startswith("--keep="):
            out.append(arg)
    return out


def _main(args: argparse.Namespace, prog: str, argv: list[str]) -> int:
    setup = SETUPS[args.setup]
    steps = args.steps or setup.steps
    if args.seeds < 2:
        raise TRMError(f"--seeds {args.seeds}: intervals across seeds need 2 or more")
    if steps < 2:
        raise TRMError(f"--steps {steps}: a curve needs 2 or more steps")
    if args.time_budget_s is not None and args.time_budget_s <= 0:
        raise TRMError(f"--time-budget-s {args.time_budget_s:g}: give a positive number of seconds")
    if args.subset_eval is not None:
        check_subset_args(args.subset_eval, args.top_k, args.evals, args.eval_from, steps)
        if setup.eval_test is not None and setup.sudoku_csv is not None:
            setup = dataclasses.replace(
                setup, sudoku_csv=(*setup.sudoku_csv[:1], setup.eval_test, *setup.sudoku_csv[2:])
            )
    work = args.keep or Path(tempfile.mkdtemp(prefix="trm-curves-"))
    started = time.monotonic()
    try:
        data = build_data(setup, work)
        epochs = epochs_for(data[0], steps, setup.recipe.global_batch_size)
        base = setup.recipe.with_changes(epochs=epochs, eval_interval=epochs).overrides
        how = plan(args, base, data, work, steps)
        # Each side's cumulative training FLOPs, when a variant changes what a step costs (equal compute).
        flops = (
            (train_flops(base, data[0], steps), train_flops(how.overrides_b, data[0], steps))
            if how.overrides_b is not None and changes_flops([o for o in how.overrides_b if o not in base])
            else None
        )
        stem = args.out / f"{setup.name}{how.suffix}{'' if args.device == 'cpu' else '-' + args.device}"
        runs_a: list[Curves] = []
        runs_b: list[Curves] = []
        longest_pair, stopped = 0.0, False
        for seed in range(args.seeds):  # interleaved, so drift of the machine hits both sides alike
            if seed >= 2 and past_budget(time.monotonic() - started, longest_pair, args.time_budget_s):
                stopped = True
                print(f"seed {seed}: not started, it would end past --time-budget-s {args.time_budget_s:g}")
                break
            pair_started = time.monotonic()
            if how.run_a is not None:
                runs_a.append(how.run_a(seed))
            else:
                runs_a.append(
                    run_ours(OursRun(base, data[0], work / f"ours-{seed}", seed, steps, args.device))
                )
            runs_b.append(how.run_b(seed))
            longest_pair = max(longest_pair, time.monotonic() - pair_started)
            print(f"seed {seed}: both runs done ({time.monotonic() - started:.0f} s)", flush=True)
            if seed >= 1:  # rewritten after every seed: a run cut off by a time limit keeps what it compared
                rows = comparison_rows(runs_a, runs_b, steps, setup.recipe.config.arch.halt_max_steps, flops)
                comparisons = rows[0]
                result = {
                    "setup": setup.name,
                    "command": f"{prog} {shlex.join(argv)}".strip(),
                    "labels": list(how.labels),
                    "device": args.device,
                    "steps": steps,
                    "seeds": len(runs_a),
                    "seeds_planned": args.seeds,
                    "time_budget_s": args.time_budget_s,
                    "stopped_for_time": False,
                    "level": LEVEL,
                    "overrides": list(base),
                    "measured": True,
                    "wall_seconds": round(time.monotonic() - started),
                    "verdict": curve_stats.overall_verdict(comparisons),
                    "metrics": [c.as_dict() for c in comparisons],
                    **(
                        {}
                        if flops is None
                        else {"train_flops": {how.labels[0]: flops[0][-1], how.labels[1]: flops[1][-1]}}
                    ),
                    "runs": {how.labels[0]: runs_a, how.labels[1]: runs_b},
                }
                if len(rows) > 1:
                    result["equal_compute"] = {
                        "verdict": curve_stats.overall_verdict(rows[1]),
                        "metrics": [c.as_dict() for c in rows[1]],
                    }
                if how.resume_at is not None:
                    result.update(resume_identity(runs_a, runs_b, how.resume_at))
                    result["resumed_from"] = how.resumed_from
                if how.finish is not None:
                    result.update(how.finish(runs_a, runs_b))
                write_outputs(stem, result, rows)
        if stopped:
            result["stopped_for_time"] = True
            write_outputs(stem, result, rows)
        report(stem, result, rows)
    finally:
        if args.keep is None:
            remove_own_temp(work)  # the bench's own scratch folder
    return 0


def past_budget(elapsed_s: float, longest_pair_s: float, budget_s: float | None) -> bool:
    """Whether one more seed pair, as long as the longest so far, would end past the budget."""
    return budget_s is not None and elapsed_s + longest_pair_s > budget_s


def step_identity(runs_a: list[Curves], runs_b: list[Curves]) -> dict:
    """ "identical" when every seed's side B logged exactly what its side A did, at every step; else the
    first differing step per seed."""
    first = [identical(a, b) for a, b in zip(runs_a, runs_b, strict=True)]
    same = all(f is None for f in first)
    verdict = "identical" if same else f"not identical (first differing step per seed: {first})"
    return {"identical": same, "first_difference": first, "verdict": verdict}


def resume_identity(runs_a: list[Curves], runs_b: list[Curves], at: int) -> dict:
    """The resume check's verdict: each seed's resumed run against the uninterrupted one (step_identity)."""
    return {"resume_at": at, **step_identity(runs_a, runs_b)}


def replot(path: Path) -> int:
    """Draw the PNG of a JSON this harness wrote, beside it: the equal-step comparison is recomputed from
    its runs; the equal-compute one (which needs the FLOPs per step) is read back from the JSON."""
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
        setup = SETUPS[result["setup"]]
        runs = [[{m: {int(s): v for s, v in run[m].items()} for m in METRICS} for run in result["runs"][label]]
                for label in result["labels"]]  # fmt: skip
        at_compute = [
            curve_stats.MetricComparison.from_dict(m)
            for m in result.get("equal_compute", {}).get("metrics", [])
        ]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TRMError(
            f"--replot {path}: not a JSON this harness wrote ({type(exc).__name__}: {exc})"
        ) from exc
    comparisons = compare(runs[0], runs[1], result["steps"], setup.recipe.config.arch.halt_max_steps)
    rows = [comparisons, *([at_compute] if at_compute else [])]
    stem = path.parent / path.name.removesuffix(".json")  # sudoku-subset0.1.json: the stem keeps its dot
    write_outputs(stem, result, rows)
    report(stem, result, rows)
    return 0


def _resume_step(value: str | None, steps: int) -> int | None:
    """--resume-at: a step in 1..steps-2 (the SIGTERM must land before the run ends), or 'random': one
    drawn from the middle of the run, steps/10 .. 3/4·steps."""
    if value is None:
        return None
    if value == "random":
        return random.randint(max(1, steps // 10), max(1, steps * 3 // 4))
    if not value.isdigit() or not 1 <= int(value) <= steps - 2:
        raise TRMError(f"--resume-at {value}: give a step in 1..{steps - 2} or 'random'")
    return int(value)


if __name__ == "__main__":
    sys.exit(main())
