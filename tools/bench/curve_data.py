"""Datasets of the curve harness (tools.bench.curves), built offline through `python -m trm data`.

- Sudoku: no Sudoku-Extreme CSV is needed. `write_sudoku_csvs` writes train.csv/test.csv in the hub
  dataset's layout (source, question, answer, rating) from random solved grids (the canonical pattern
  `(3·(r mod 3) + r div 3 + c) mod 9` under random band, row, stack, column and digit permutations) with
  `blanks` cells cleared per puzzle: few blanks make a set a tiny model solves exactly within minutes, so
  that exact and q-halt accuracy move during a CPU run. `build-sudoku --source-dir` then builds it.
- ARC: `build-arc` on the ARC tasks shipped with trm (no download).

Each set is built twice: compact for our trainer, materialized (upstream's layout) for upstream's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from trm.io import atomic_write_text


def solved_grid(rng: np.random.Generator) -> np.ndarray:
    """A random valid solved 9x9 Sudoku (digits 1..9)."""
    r, c = np.meshgrid(np.arange(9), np.arange(9), indexing="ij")
    pattern = (3 * (r % 3) + r // 3 + c) % 9
    rows = np.concatenate([3 * band + rng.permutation(3) for band in rng.permutation(3)])
    cols = np.concatenate([3 * stack + rng.permutation(3) for stack in rng.permutation(3)])
    return (rng.permutation(9) + 1)[pattern[rows][:, cols]]


def sudoku_rows(count: int, blanks: int, seed: int) -> list[list[str]]:
    """`count` puzzles with exactly `blanks` cells cleared ('.'), as CSV rows."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(count):
        answer = solved_grid(rng).ravel()
        cleared = np.zeros(81, dtype=bool)
        cleared[rng.choice(81, size=blanks, replace=False)] = True
        question = "".join("." if hole else str(d) for hole, d in zip(cleared, answer, strict=True))
        rows.append([f"generated-{i}", question, "".join(map(str, answer)), str(blanks)])
    return rows


def _csv_text(rows: list[list[str]]) -> str:
    lines = [",".join(("source", "question", "answer", "rating"))]
    lines += [",".join(row) for row in rows]  # no field holds a comma or a quote
    return "\n".join(lines) + "\n"


def write_sudoku_csvs(out: Path, train: int, test: int, blanks: int, seed: int = 0) -> Path:
    """train.csv and test.csv under `out` (atomically); the test puzzles come from another seed."""
    atomic_write_text(out / "train.csv", _csv_text(sudoku_rows(train, blanks, seed)))
    atomic_write_text(out / "test.csv", _csv_text(sudoku_rows(test, blanks, seed + 1)))
    return out


def build(builder: str, args: list[str], out: Path, form: str) -> Path:
    """`python -m trm data <builder> ARGS --output-dir OUT --form FORM` (quietly); returns OUT."""
    cmd = [sys.executable, "-m", "trm", "data", builder, *args, "--output-dir", str(out), "--form", form,
           "--overwrite"]  # fmt: skip
    if builder == "build-arc":
        cmd.append("--quiet")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"`trm data {builder}` failed (exit {proc.returncode}): {tail}")
    return out
