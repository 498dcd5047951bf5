"""Compact form of the Sudoku and Maze datasets: the original puzzles plus one small recipe per puzzle.

Per split, next to upstream's index arrays and `dataset.json`:

* `all__originals_inputs.npy`, `all__originals_labels.npy`: uint8 [n, seq_len], the encoded originals;
* `all__puzzle_origin.npy`: int32 [P], which original each puzzle (one example each) transforms;
* Sudoku: `all__puzzle_rows.npy`, `all__puzzle_cols.npy` (uint8 [P, 9] row/column permutations),
  `all__puzzle_transpose.npy` (uint8 [P]) and `all__puzzle_tokens.npy` (uint8 [P, 11], token -> token);
* Maze: `all__puzzle_dihedral.npy` (uint8 [P], upstream's dihedral ids).

The loader renders examples from these exactly as the materialized rows (tests compare every row).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from trm.errors import TRMError

from .encoding import dihedral

FORM = "grid-compact"
SUDOKU_FIELDS = ("puzzle_rows", "puzzle_cols", "puzzle_transpose", "puzzle_tokens")
MAZE_FIELDS = ("puzzle_dihedral",)
COMMON_FIELDS = ("originals_inputs", "originals_labels", "puzzle_origin")


def _path(root: Path, split: str, name: str) -> Path:
    return root / split / f"all__{name}.npy"


def save(tmp: Path, split: str, arrays: dict[str, np.ndarray]) -> None:
    """Write one split's recipe arrays (names as in the module docstring)."""
    for name, array in arrays.items():
        np.save(_path(tmp, split, name), np.ascontiguousarray(array), allow_pickle=False)


def dihedral_sources(side: int) -> np.ndarray:
    """[8, side*side]: the original cell each transformed cell comes from, per dihedral id."""
    cells = np.arange(side * side).reshape(side, side)
    return np.stack([dihedral(cells, t).ravel() for t in range(8)])


class GridRecipes:
    """One split of a compact Sudoku/Maze dataset: `examples(ids)` -> (inputs, labels) uint8 rows."""

    def __init__(self, root: Path, split: str) -> None:
        def load(name: str) -> np.ndarray:
            try:
                return np.load(_path(root, split, name), allow_pickle=False)
            except (OSError, ValueError) as err:
                raise TRMError(
                    f"{_path(root, split, name)}: unreadable array ({err}); rebuild the dataset with "
                    "`python -m trm data build-sudoku` / `build-maze`"
                ) from None

        self._inputs, self._labels, origin = (load(n) for n in COMMON_FIELDS)
        self._origin = origin.astype(np.int64)
        self.seq_len = self._inputs.shape[1]
        if _path(root, split, "puzzle_dihedral").is_file():
            self._tids = load("puzzle_dihedral").astype(np.int64)
            self._sources = dihedral_sources(math.isqrt(self.seq_len))
            self._kind = "maze"
        else:
            rows, cols, transpose, tokens = (load(n) for n in SUDOKU_FIELDS)
            self._rows, self._cols = rows.astype(np.int64), cols.astype(np.int64)
            self._transpose, self._tokens = transpose.astype(bool), tokens
            self._kind = "sudoku"

    def examples(self, example_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Encoded (inputs, labels) uint8 [k, seq_len]; an example is its puzzle (one example per puzzle)."""
        ids = np.asarray(example_ids, dtype=np.int64)
        if self._kind == "maze":
            return render_maze(self._inputs, self._labels, self._origin[ids], self._tids[ids], self._sources)
        return render_sudoku(
            self._inputs,
            self._labels,
            self._origin[ids],
            self._rows[ids],
            self._cols[ids],
            self._transpose[ids],
            self._tokens[ids],
        )


def render_sudoku(
    inputs: np.ndarray,
    labels: np.ndarray,
    origin: np.ndarray,
    rows: np.ndarray,
    cols: np.ndarray,
    transpose: np.ndarray,
    tokens: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Puzzles from their recipes: transpose, then rows/columns permuted, then tokens mapped (uint8 rows).

    Flat `take`s: output cell (r, c) of puzzle i reads cell rows[r] * 9 + cols[c] of its original (cols[c] *
    9 + rows[r] when transposed), then its token map (index i * 11 + value)."""
    n = len(origin)
    flip = np.asarray(transpose, dtype=bool)[:, None, None]
    r = np.asarray(rows, dtype=np.intp)[:, :, None] * np.where(flip, 1, 9)
    r += np.asarray(origin, dtype=np.intp)[:, None, None] * 81
    source = (r + np.asarray(cols, dtype=np.intp)[:, None, :] * np.where(flip, 9, 1)).reshape(n, 81)
    table = np.ascontiguousarray(tokens, dtype=np.uint8).ravel()
    base = (np.arange(n, dtype=np.intp) * tokens.shape[1])[:, None]
    out = []
    for grids in (inputs, labels):
        moved = np.ascontiguousarray(grids, dtype=np.uint8).ravel().take(source)
        out.append(table.take(moved + base))
    return out[0], out[1]


def render_maze(
    inputs: np.ndarray, labels: np.ndarray, origin: np.ndarray, tids: np.ndarray, sources: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Mazes from their recipes: dihedral transform `tids` of the originals (uint8 rows)."""
    source = sources[np.asarray(tids, dtype=np.int64)]
    return (
        np.take_along_axis(inputs[origin], source, axis=1),
        np.take_along_axis(labels[origin], source, axis=1),
    )
