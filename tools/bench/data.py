"""Data benchmark: dataset builds (ARC compact and materialized; Sudoku, Maze) and loader throughput,
optionally vs upstream.

    nox -s bench -- data [--num-aug 1000] [--forms compact materialized] [--keep DIR]
    TRM_UPSTREAM=/path/to/TinyRecursiveModels [TRM_UPSTREAM_PYTHON=/venv/with/argdantic/bin/python] \
        nox -s bench -- data
    nox -s bench -- data --dataset sudoku --source-dir DIR [--subsample-size 1000 --num-aug 1000]
    nox -s bench -- data --dataset maze --source-dir DIR [--aug]

Sudoku and Maze read the hub's train.csv/test.csv from --source-dir (no download during a benchmark) and
are built with --seed 0 on both sides (upstream's global numpy RNG seeded alike).

Each build runs in its own process so wall time, CPU time and peak RSS are that build's alone. Targets
(2-core machine, ARC-AGI-2 + ConceptARC, 1000 augmentations; Sudoku sudoku-extreme-1k-aug-1000): compact
≤ 10 s, ≤ 1 GB RSS, ≤ 100 MB on disk (ARC); materialized ≥ 10× faster than upstream's builder with ≤ ¼ of its peak RSS; loader ≥ 20k
examples/s on one core at batch 768.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from trm.data.arc_source import DEFAULT_PREFIX
from trm.safe_remove import remove_own_temp
from trm.training.recipes import get_recipe

TARGETS = {"compact": {"wall_s": 10.0, "rss_gb": 1.0, "disk_mb": 100.0}, "loader_examples_per_s": 20000}


@dataclass
class Run:
    """Resources used by one child process."""

    name: str
    wall_s: float
    cpu_s: float
    peak_rss_gb: float
    disk_mb: float
    ok: bool
    note: str = ""


def measure(
    name: str, cmd: list[str], out_dir: Path, cwd: Path | None = None, env: dict | None = None
) -> Run:
    """Run `cmd`, returning wall/CPU time and peak RSS (from wait4) and the size of `out_dir`."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    ok = proc.returncode == 0
    note = "" if ok else output.decode(errors="replace").strip().splitlines()[-1:][0] if output else "failed"
    return Run(
        name=name,
        wall_s=wall,
        cpu_s=usage.ru_utime + usage.ru_stime,
        peak_rss_gb=usage.ru_maxrss / (1 << 20),
        disk_mb=dir_size(out_dir) / 1e6,
        ok=ok,
        note=note,
    )


def dir_size(path: Path) -> int:
    """Total bytes of the files below `path` (0 if absent)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def loader_throughput(path: Path, batch_size: int, batches: int) -> tuple[float, float, float]:
    """(seconds to open the dataset, train examples per wall second, per CPU second) on one core."""
    import torch

    from trm.data.loader import PuzzleLoader

    torch.set_num_threads(1)
    started = time.perf_counter()
    loader = PuzzleLoader([path], "train", global_batch_size=batch_size, seed=0)
    opened = time.perf_counter() - started

    def endless():  # one call of iter_train is one epoch: a 1k-group Sudoku/Maze set gives 1 batch of 768
        while True:
            produced = False
            for item in loader.iter_train():
                produced = True
                yield item
            if not produced:
                return

    stream = endless()
    next(stream)  # warm-up: permutation and first batch
    started, cpu_started = time.perf_counter(), time.process_time()
    count = 0
    for _, batch, _ in stream:
        count += len(batch["inputs"])
        if count >= batches * batch_size:
            break
    return opened, count / (time.perf_counter() - started), count / (time.process_time() - cpu_started)


def build_args(args: argparse.Namespace) -> list[str]:
    """The builder flags shared by our runs and upstream's."""
    flags = ["--input-file-prefix", str(args.input_file_prefix), "--subsets", *args.subsets]
    flags += ["--test-set-name", args.test_set_name, "--num-aug", str(args.num_aug)]
    return flags


def grid_args(args: argparse.Namespace) -> list[str]:
    """Sudoku/Maze builder flags, in upstream's spelling (ours accept them unchanged)."""
    flags = []
    if args.subsample_size is not None:
        flags += ["--subsample-size", str(args.subsample_size)]
    if args.dataset == "sudoku":
        flags += ["--num-aug", str(args.num_aug)]
    elif args.aug:
        flags += ["--aug"]
    return flags


# Runs upstream's Sudoku/Maze builder on local CSVs: its `hf_hub_download` returns the file, numpy is seeded.
_UPSTREAM_GRID = """
import sys
import numpy as np
checkout, kind, source, output, *options = sys.argv[1:]
sys.path.insert(0, checkout + "/dataset")
module = __import__(f"build_{kind}_dataset")
module.hf_hub_download = lambda repo, filename, repo_type=None: f"{source}/{filename}"
np.random.seed(0)
config = module.DataProcessConfig(output_dir=output, **dict(o.split("=") for o in options))
for split in ("train", "test"):
    module.convert_subset(split, config)
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nox -s bench -- data", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=["arc", "sudoku", "maze"], default="arc")
    parser.add_argument("--source-dir", default=None, help="sudoku/maze: directory with train.csv, test.csv")
    parser.add_argument("--subsample-size", type=int, default=None, help="sudoku/maze (sudoku default 1000)")
    parser.add_argument("--aug", action="store_true", help="maze: the 8 dihedral transforms")
    parser.add_argument("--input-file-prefix", default=str(DEFAULT_PREFIX))
    parser.add_argument("--subsets", nargs="+", default=["training2", "evaluation2", "concept"])
    parser.add_argument("--test-set-name", default="evaluation2")
    parser.add_argument("--num-aug", type=int, default=1000)
    parser.add_argument(
        "--forms", nargs="+", choices=["compact", "materialized"], default=["compact", "materialized"]
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=get_recipe("arc2").global_batch_size,
        help="default: arc2's global batch",
    )
    parser.add_argument("--loader-batches", type=int, default=60)
    parser.add_argument("--workers", type=int, default=0, help="builder --workers (0 = auto)")
    parser.add_argument(
        "--upstream", default=os.environ.get("TRM_UPSTREAM"), help="upstream checkout (env TRM_UPSTREAM)"
    )
    parser.add_argument(
        "--keep",
        default=None,
        help="build into this dir and keep the datasets (default: a temp dir, removed)",
    )
    args = parser.parse_args(argv)
    if args.dataset != "arc":
        if not args.source_dir:
            parser.error(
                f"--dataset {args.dataset} needs --source-dir DIR (the hub's train.csv and test.csv)"
            )
        if args.dataset == "sudoku" and args.subsample_size is None:
            args.subsample_size = 1000

    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="trm-bench-data-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.dataset == "arc":
        print(
            f"ARC build benchmark: subsets {' '.join(args.subsets)}, test set {args.test_set_name}, "
            f"num_aug {args.num_aug}"
        )
    else:
        print(f"{args.dataset} build benchmark: {args.source_dir}, flags {' '.join(grid_args(args))}")
    print(f"cpu cores: {os.cpu_count()}, load average: {os.getloadavg()[0]:.1f}, work dir: {work}")
    runs: dict[str, Run] = {}
    throughput: dict[str, tuple[float, float, float]] = {}
    try:
        for form in args.forms:
            out = work / form
            remove_own_temp(out)
            if args.dataset == "arc":
                cmd = [
                    sys.executable,
                    "-m",
                    "trm",
                    "data",
                    "build-arc",
                    "--output-dir",
                    str(out),
                    "--form",
                    form,
                ]
                cmd += [*build_args(args), "--quiet", "--workers", str(args.workers)]
            else:
                cmd = [sys.executable, "-m", "trm", "data", f"build-{args.dataset}", "--output-dir", str(out)]
                cmd += ["--source-dir", args.source_dir, "--seed", "0", "--form", form, *grid_args(args)]
            runs[form] = measure(f"trm {form}", cmd, out)
            if runs[form].ok:
                throughput[form] = loader_throughput(out, args.batch_size, args.loader_batches)
        if args.upstream:
            runs["upstream"] = run_upstream(Path(args.upstream), args, work)
            if runs["upstream"].ok and args.dataset == "arc":  # upstream's augmented Sudoku arrays are int64
                throughput["upstream"] = import_and_load(work / "upstream", args)
        report(runs, throughput, args)
    finally:
        if not args.keep:
            remove_own_temp(work)
    return 0 if all(r.ok for r in runs.values()) else 1


def run_upstream(checkout: Path, args: argparse.Namespace, work: Path) -> Run:
    """upstream's `python -m dataset.build_arc_dataset` with the same flags, in its checkout (or its Sudoku/Maze
    builder on the same CSVs)."""
    out = work / "upstream"
    remove_own_temp(out)
    if not (checkout / "dataset" / "build_arc_dataset.py").is_file():
        return Run("upstream", 0, 0, 0, 0, False, f"{checkout}: not a TinyRecursiveModels checkout")
    python = os.environ.get("TRM_UPSTREAM_PYTHON", sys.executable)  # an env with upstream's deps
    if args.dataset != "arc":
        harness = work / "upstream_grid_harness.py"
        harness.write_text(_UPSTREAM_GRID)
        options = [f"subsample_size={args.subsample_size}"] if args.subsample_size is not None else []
        options += [f"num_aug={args.num_aug}"] if args.dataset == "sudoku" else ([f"aug={args.aug}"])
        cmd = [python, str(harness), str(checkout), args.dataset, args.source_dir, str(out), *options]
        return measure("upstream", cmd, out)
    cmd = [python, "-m", "dataset.build_arc_dataset", "--output-dir", str(out), *build_args(args)]
    path = os.pathsep.join(filter(None, [str(checkout), os.environ.get("PYTHONPATH")]))
    return measure("upstream", cmd, out, cwd=checkout, env={**os.environ, "PYTHONPATH": path})


def import_and_load(path: Path, args: argparse.Namespace) -> tuple[float, float, float]:
    """Import upstream's output (writes a manifest) and measure our loader on it."""
    from trm.data.upstream_import import import_upstream

    import_upstream(path)
    return loader_throughput(path, args.batch_size, args.loader_batches)


def report(
    runs: dict[str, Run], throughput: dict[str, tuple[float, float]], args: argparse.Namespace
) -> None:
    """Print the table, the targets and (with upstream) the ratios."""
    print()
    print(
        f"{'build':<18}{'wall s':>9}{'cpu s':>9}{'peak RSS GB':>13}{'disk MB':>11}{'open s':>8}{'loader ex/s':>13}"
    )
    for key, run in runs.items():
        opened, rate, cpu_rate = throughput.get(key, (float("nan"),) * 3)
        status = "" if run.ok else f"   FAILED: {run.note}"
        print(
            f"{run.name:<18}{run.wall_s:>9.1f}{run.cpu_s:>9.1f}{run.peak_rss_gb:>13.2f}{run.disk_mb:>11.1f}"
            f"{opened:>8.2f}{rate:>13,.0f}{cpu_rate:>11,.0f}{status}"
        )
    compact = runs.get("compact")
    if compact and compact.ok and args.num_aug == 1000:
        t = TARGETS["compact"]
        disk = (  # ARC's target; Sudoku's test split alone is 68 MB of originals
            f", disk ≤ {t['disk_mb']:.0f} MB: {verdict(compact.disk_mb <= t['disk_mb'])}"
            if args.dataset == "arc"
            else ""
        )
        print(
            f"\ncompact targets: wall ≤ {t['wall_s']:.0f} s: {verdict(compact.wall_s <= t['wall_s'])}, "
            f"RSS ≤ {t['rss_gb']:.0f} GB: {verdict(compact.peak_rss_gb <= t['rss_gb'])}{disk}"
        )
    for key, (_, rate, cpu_rate) in throughput.items():
        target = TARGETS["loader_examples_per_s"]
        print(
            f"loader ({key}) ≥ {target:,} ex/s on one core: "
            f"wall {verdict(rate >= target)}, cpu {verdict(cpu_rate >= target)}"
        )
    upstream = runs.get("upstream")
    if upstream and upstream.ok:
        for form in ("compact", "materialized"):
            ours = runs.get(form)
            if ours and ours.ok:
                print(
                    f"upstream / {form}: {upstream.wall_s / ours.wall_s:.1f}x faster (wall), "
                    f"{upstream.cpu_s / max(ours.cpu_s, 1e-9):.1f}x less CPU, "
                    f"{ours.peak_rss_gb / upstream.peak_rss_gb:.2f} of its peak RSS, "
                    f"{ours.disk_mb / upstream.disk_mb:.3f} of its disk"
                )
        if runs.get("materialized") and runs["materialized"].ok:
            m = runs["materialized"]
            print(
                f"materialized targets: ≥ 10x faster: {verdict(upstream.wall_s >= 10 * m.wall_s)}, "
                f"≤ 1/4 RSS: {verdict(m.peak_rss_gb * 4 <= upstream.peak_rss_gb)}"
            )
    if os.getloadavg()[0] > (os.cpu_count() or 1):
        print(
            "note: the machine was busy (load average above the core count); wall times are inflated, see cpu s"
        )


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


if __name__ == "__main__":
    sys.exit(main())
