"""Small Sudoku and Maze CSVs in the hub datasets' layout (header, then source, question, answer, rating)."""

from __future__ import annotations

import csv
from collections import deque
from pathlib import Path

import numpy as np

HEADER = ["source", "question", "answer", "rating"]


def sudoku_solution(rng: np.random.Generator) -> np.ndarray:
    """A random solved 9x9 grid: the canonical pattern under random band/row/stack/column/digit shuffles."""
    r, c = np.meshgrid(np.arange(9), np.arange(9), indexing="ij")
    base = (3 * (r % 3) + r // 3 + c) % 9
    rows = np.concatenate([b * 3 + rng.permutation(3) for b in rng.permutation(3)])
    cols = np.concatenate([s * 3 + rng.permutation(3) for s in rng.permutation(3)])
    digits = rng.permutation(9) + 1
    return digits[base[rows][:, cols]]


def sudoku_rows(n: int, seed: int) -> list[list[str]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        solution = sudoku_solution(rng).ravel()
        blanks = rng.random(81) < 0.6
        question = "".join("." if b else str(d) for b, d in zip(blanks, solution, strict=True))
        out.append([f"gen{i % 3}", question, "".join(map(str, solution)), str(int(rng.integers(0, 60)))])
    return out


def maze_pair(rng: np.random.Generator, side: int = 30) -> tuple[str, str]:
    """A random depth-first maze (walls '#', open ' '), start 'S', goal 'G', and its shortest path as 'o'."""
    grid = np.full((side, side), "#")
    cells = [(r, c) for r in range(1, side - 1, 2) for c in range(1, side - 1, 2)]
    start = cells[int(rng.integers(len(cells)))]
    grid[start] = " "
    stack, seen = [start], {start}
    while stack:
        r, c = stack[-1]
        nexts = [
            (r + dr, c + dc)
            for dr, dc in ((0, 2), (2, 0), (0, -2), (-2, 0))
            if (r + dr, c + dc) in set(cells) and (r + dr, c + dc) not in seen
        ]
        if not nexts:
            stack.pop()
            continue
        nr, nc = nexts[int(rng.integers(len(nexts)))]
        grid[(r + nr) // 2, (c + nc) // 2] = " "
        grid[nr, nc] = " "
        seen.add((nr, nc))
        stack.append((nr, nc))
    a, b = rng.choice(len(cells), size=2, replace=False)
    s, g = cells[a], cells[b]
    prev = {s: s}
    queue = deque([s])
    while queue:
        r, c = queue.popleft()
        for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            if grid[nr, nc] != "#" and (nr, nc) not in prev:
                prev[(nr, nc)] = (r, c)
                queue.append((nr, nc))
    solved = grid.copy()
    node = prev[g]
    while node != s:
        solved[node] = "o"
        node = prev[node]
    for board in (grid, solved):
        board[s], board[g] = "S", "G"
    return "".join(grid.ravel()), "".join(solved.ravel())


def maze_rows(n: int, seed: int) -> list[list[str]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        q, a = maze_pair(rng)
        out.append([f"gen{i}", q, a, str(a.count("o"))])
    return out


def write_csv(path: Path, rows: list[list[str]], header: list[str] = HEADER) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def sudoku_source(root: Path, train: int = 12, test: int = 5) -> Path:
    write_csv(root / "train.csv", sudoku_rows(train, 1))
    write_csv(root / "test.csv", sudoku_rows(test, 2))
    return root


def maze_source(root: Path, train: int = 6, test: int = 3) -> Path:
    write_csv(root / "train.csv", maze_rows(train, 3))
    write_csv(root / "test.csv", maze_rows(test, 4))
    return root
