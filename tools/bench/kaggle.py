"""Kaggle benchmark: bundle size and packaging cost, offline inference throughput on shipped ARC tasks.

    nox -s bench -- kaggle [--tasks 8] [--num-aug 8] [--device auto] [--batch-size N] [--tiny] [--wheels]

Packages a model of the paper's size (or `--tiny`) saved as an upstream weight file, then runs
`python -m trm infer` on the first `--tasks` ARC-AGI-2 evaluation tasks, each in its own process (wall
time, CPU time, peak RSS). The puzzle table of a real aug-1000 run (876,406 rows × 512 fp32, 1.8 GB) is
not materialised; its bundle size is projected from the measured one. Targets: packaging without wheels
≤ 60 s and ≤ 2 GB RSS for the paper model; on one H100, ≥ 50 rows/s at 16 ACT steps (a FLOP estimate:
≈ 5.4 TFLOP per row, so 1,000 augmentations of 120 tasks take under an hour there). On CPU the paper
model is for smoke checks only (minutes per row on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path

from tools.bench.data import Run, dir_size, measure
from trm.data.arc_source import DEFAULT_PREFIX
from trm.training.recipes import TINY_ARCH, get_recipe

PAPER_IDENTIFIERS = 876406  # ARC-1 + ConceptARC, 1000 augmentations (upstream's builder's count)
TARGETS = {"package_wall_s": 60.0, "package_rss_gb": 2.0, "h100_rows_per_s": 50.0}


def write_weights(path: Path, tiny: bool, rows: int) -> list[str]:
    """An upstream-format weight file (random init); returns the arch overrides that rebuild it."""
    import torch

    from trm.model import TinyRecursiveModel, TRMConfig
    from trm.model.upstream import to_upstream_state_dict

    shapes = {"batch_size": 1, "seq_len": 900, "vocab_size": 12, "num_puzzle_identifiers": rows}
    if tiny:  # the debug-tiny recipe's model
        recipe = get_recipe("debug-tiny")
        cfg, overrides = recipe.model_config(**shapes), [o for o in recipe.overrides if o.startswith("arch.")]
    else:  # the trainer's default architecture (the paper's width)
        cfg, overrides = TRMConfig(**shapes), []
    torch.save(to_upstream_state_dict(TinyRecursiveModel(cfg).state_dict()), path)
    return overrides


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nox -s bench -- kaggle", description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=8, help="evaluation2 tasks to infer")
    parser.add_argument("--num-aug", type=int, default=8)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument(
        "--tiny", action="store_true", help="the debug-tiny recipe's model instead of the paper's"
    )
    parser.add_argument("--wheels", action="store_true", help="also build the wheelhouse (needs the index)")
    parser.add_argument("--keep", default=None, help="work in this folder and keep it")
    args = parser.parse_args(argv)

    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="trm-bench-kaggle-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"cpu cores: {os.cpu_count()}, load average: {os.getloadavg()[0]:.1f}, work dir: {work}")
    rows = 1000
    overrides = write_weights(work / "step_1", args.tiny, rows)
    bundle = work / "bundle"
    cmd = [sys.executable, "-m", "trm", "package", "kaggle", str(work / "step_1"), str(bundle), "--overwrite"]
    cmd += ["--quiet", "--no-identifiers", *([] if args.wheels else ["--no-wheels"]), *overrides]
    package = measure("package", cmd, bundle)

    challenges = json.loads(Path(f"{DEFAULT_PREFIX}_evaluation2_challenges.json").read_text())
    subset = dict(list(challenges.items())[: args.tasks])
    (work / "tasks.json").write_text(json.dumps(subset))
    cmd = [
        sys.executable,
        "-m",
        "trm",
        "infer",
        "--weights",
        str(bundle),
        "--challenges",
        str(work / "tasks.json"),
    ]
    cmd += ["--out", str(work / "submission.json"), "--num-aug", str(args.num_aug), "--device", args.device]
    cmd += ["--quiet", *(["--batch-size", str(args.batch_size)] if args.batch_size else [])]
    infer, output = measure_with_output("infer", cmd, work / "submission.json")
    report(package, infer, output, bundle, args, rows)
    return 0 if package.ok and infer.ok else 1


def measure_with_output(name: str, cmd: list[str], out: Path) -> tuple[Run, str]:
    """`measure`, plus the command's summary line (rows run, device, seconds)."""
    log = out.with_suffix(".log")
    wrapped = ["bash", "-c", 'set -o pipefail; "$@" 2>&1 | tee "$0"', str(log), *cmd]
    run = measure(name, wrapped, out)
    return run, log.read_text() if log.exists() else ""


def report(package: Run, infer: Run, output: str, bundle: Path, args: argparse.Namespace, rows: int) -> None:
    model_mb = (bundle / "model.pt").stat().st_size / 2**20 if (bundle / "model.pt").exists() else 0.0
    width = TINY_ARCH.puzzle_emb_ndim if args.tiny else 512
    table_mb = PAPER_IDENTIFIERS * width * 4 / 2**20
    print()
    print(f"{'step':10} {'ok':>3} {'wall s':>8} {'cpu s':>8} {'RSS GB':>7}  note")
    for run in (package, infer):
        print(
            f"{run.name:10} {'yes' if run.ok else 'NO':>3} {run.wall_s:8.1f} {run.cpu_s:8.1f} {run.peak_rss_gb:7.2f}  {run.note}"
        )
    print()
    print(
        f"bundle: {dir_size(bundle) / 2**20:.1f} MiB (model.pt {model_mb:.1f} MiB, puzzle table {rows} rows)"
    )
    print(
        f"with the aug-1000 table and identifiers.json: ≈ {dir_size(bundle) / 2**20 + table_mb + 27:.0f} MiB"
    )
    match = re.search(r"ran (\d+)/(\d+) rows on (\S+) in ([\d.]+) s", output)
    if match:
        done, device, seconds = int(match[1]), match[3], float(match[4])
        print(
            f"inference: {done} rows of {args.tasks} tasks on {device} in {seconds:.1f} s: {done / seconds:.2f} rows/s"
        )
        print(f"  → {seconds / args.tasks:.1f} s per task at --num-aug {args.num_aug}")
    print(f"targets: {TARGETS}")


if __name__ == "__main__":
    sys.exit(main())
