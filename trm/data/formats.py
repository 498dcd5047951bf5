"""On-disk dataset forms and their readers.

Both forms share upstream's index arrays per split (`all__puzzle_identifiers`, `all__puzzle_indices`,
`all__group_indices`), `dataset.json`, `identifiers.json` and `test_puzzles.json`.

* materialized: upstream's layout, `all__inputs.npy` / `all__labels.npy` hold every encoded example.
* compact: the original grids (`grids.npy`, `grid_shapes.npy`) plus per-split recipes (dihedral id and
  colour map per puzzle, offset per example, pair list per group); examples are rendered on demand.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from trm.errors import TRMError

from .grid_recipes import FORM as GRID_COMPACT
from .grid_recipes import GridRecipes
from .metadata import DatasetMetadata
from .render import grid_store, render_rows

COMPACT = "compact"
MATERIALIZED = "materialized"
FORMS = (COMPACT, MATERIALIZED)
SET = "all"
INDEX_FIELDS = ("puzzle_identifiers", "puzzle_indices", "group_indices")
MATERIALIZED_FIELDS = ("inputs", "labels")
COMPACT_FIELDS = ("puzzle_dihedral", "puzzle_colours", "example_offsets", "group_pair_indices", "pair_grids")
GRIDS = "grids.npy"
GRID_SHAPES = "grid_shapes.npy"


def array_path(root: Path, split: str, name: str) -> Path:
    """`<root>/<split>/all__<name>.npy`."""
    return root / split / f"{SET}__{name}.npy"


class NpyStreamWriter:
    """Write a C-order .npy file row block by row block (constant memory), hashing as it goes."""

    def __init__(self, path: Path, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.path, self.shape, self.dtype = path, shape, np.dtype(dtype)
        self.rows = 0
        self.sha256 = hashlib.sha256()
        self._file = open(path, "wb")  # noqa: SIM115 (closed in close())
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": shape}
        np.lib.format.write_array_header_1_0(_HashingFile(self._file, self.sha256), header)

    def write(self, block: np.ndarray) -> None:
        """Append rows (block.shape[1:] must equal shape[1:])."""
        data = np.ascontiguousarray(block, dtype=self.dtype)
        buffer = memoryview(data).cast("B")
        self.sha256.update(buffer)
        self._file.write(buffer)
        self.rows += len(data)

    def close(self) -> str:
        """Finish the file; returns its sha256. Fails if fewer/more rows than announced were written."""
        self._file.close()
        if self.rows != self.shape[0]:
            raise RuntimeError(f"{self.path}: wrote {self.rows} rows, header says {self.shape[0]}")
        return self.sha256.hexdigest()


class _HashingFile:
    def __init__(self, f, h) -> None:
        self._f, self._h = f, h

    def write(self, data: bytes) -> int:
        self._h.update(data)
        return self._f.write(data)


def _load(path: Path, mmap: bool = False) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise TRMError(
            f"{path}: unreadable array ({err}); rebuild the dataset with `python -m trm data build-arc`"
        ) from None


class RowReader:
    """Random rows of a 2-D uint8 .npy file via pread of runs of consecutive rows.

    Cheaper than a memory map for scattered batches: no kernel read-ahead of pages that are never used
    (the file is advised as randomly accessed) and no mapped pages counted in the process RSS.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        mapped = _load(path, mmap=True)  # only to parse the header: shape, dtype, data offset
        shape, fortran, dtype, self.offset = mapped.shape, np.isfortran(mapped), mapped.dtype, mapped.offset
        del mapped
        if len(shape) != 2 or fortran or dtype != np.uint8:
            raise TRMError(
                f"{path}: expected a C-order uint8 [N, seq_len] array, got {dtype} {shape}; rebuild it"
            )
        self.shape = shape
        self.row_bytes = shape[1]
        self._fd: int | None = None
        self._pid = -1

    def _descriptor(self) -> int:
        if self._fd is None or self._pid != os.getpid():  # reopen after fork
            self._fd = os.open(self.path, os.O_RDONLY)
            self._pid = os.getpid()
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_RANDOM)
        return self._fd

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """uint8 [len(ids), row_bytes]: the rows at `ids` (any order, repeats allowed)."""
        out = np.empty((len(ids), self.row_bytes), dtype=np.uint8)
        if not len(ids):
            return out
        if ids.min() < 0 or ids.max() >= self.shape[0]:
            raise IndexError(f"{self.path}: row index out of range")
        order = np.argsort(ids, kind="stable")
        sorted_ids = ids[order]
        breaks = np.flatnonzero(np.diff(sorted_ids) != 1) + 1
        starts = np.concatenate([[0], breaks])
        ends = np.concatenate([breaks, [len(ids)]])
        fd = self._descriptor()
        staging = np.empty_like(out)
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            first = int(sorted_ids[a])
            last = int(sorted_ids[b - 1])
            if last - first + 1 == b - a:  # a run of distinct consecutive rows
                data = os.pread(fd, (b - a) * self.row_bytes, self.offset + first * self.row_bytes)
                staging[a:b] = np.frombuffer(data, dtype=np.uint8).reshape(b - a, self.row_bytes)
            else:  # repeated rows
                for i in range(a, b):
                    data = os.pread(fd, self.row_bytes, self.offset + int(sorted_ids[i]) * self.row_bytes)
                    staging[i] = np.frombuffer(data, dtype=np.uint8)
        out[order] = staging
        return out

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_fd": None, "_pid": -1}

    def __del__(self) -> None:
        if getattr(self, "_fd", None) is not None and self._pid == os.getpid():
            os.close(self._fd)


class SplitData:
    """One split of one dataset dir: index arrays in RAM and `examples(idx)` -> (inputs, labels) uint8."""

    readers: tuple[RowReader, ...] = ()  # the materialized form's example files

    def __init__(self, root: Path, split: str, form: str) -> None:
        self.root, self.split, self.form = Path(root), split, form
        self.metadata = DatasetMetadata.read(self.root / split / "dataset.json")
        for name in INDEX_FIELDS:
            setattr(self, name, _load(array_path(self.root, split, name)).astype(np.int64))
        self.num_examples = int(self.puzzle_indices[-1])
        self.num_groups = len(self.group_indices) - 1
        if form == MATERIALIZED:
            self._inputs = RowReader(array_path(self.root, split, "inputs"))
            self._labels = RowReader(array_path(self.root, split, "labels"))
            self.readers = (self._inputs, self._labels)
        elif form == GRID_COMPACT:  # Sudoku / Maze: originals + per-puzzle recipes (trm/data/grid_recipes.py)
            self._grid = GridRecipes(self.root, split)
        elif form == COMPACT:
            arrays = {name: _load(array_path(self.root, split, name)) for name in COMPACT_FIELDS}
            self._tids = arrays["puzzle_dihedral"]
            self._cmaps = arrays["puzzle_colours"]
            self._offsets = arrays["example_offsets"]
            self._group_pairs = arrays["group_pair_indices"].astype(np.int64)
            self._pair_grids = arrays["pair_grids"].astype(np.int64)
            self._shapes = _load(self.root / GRID_SHAPES)
            self._store = grid_store(_load(self.root / GRIDS))
            # puzzle -> group, to find an example's pair without a search at batch time
            self._puzzle_group = np.repeat(np.arange(self.num_groups), np.diff(self.group_indices))
        else:
            raise TRMError(f"{self.root}: unknown dataset form {form!r}; rebuild the dataset")

    def examples(
        self, example_ids: np.ndarray, puzzle_ids: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Encoded (inputs, labels) uint8 [k, seq_len] of the given example indices."""
        example_ids = np.asarray(example_ids, dtype=np.int64)
        if self.form == MATERIALIZED:
            return self._inputs.rows(example_ids), self._labels.rows(example_ids)
        if self.form == GRID_COMPACT:
            return self._grid.examples(example_ids)
        if puzzle_ids is None:
            puzzle_ids = np.searchsorted(self.puzzle_indices, example_ids, side="right") - 1
        puzzle_ids = np.asarray(puzzle_ids, dtype=np.int64)
        groups = self._puzzle_group[puzzle_ids]
        pairs = self._group_pairs[groups] + (example_ids - self.puzzle_indices[puzzle_ids])
        grids = self._pair_grids[pairs].T.ravel()  # inputs then labels
        tids = np.tile(self._tids[puzzle_ids], 2)
        cmaps = np.tile(self._cmaps[puzzle_ids], (2, 1))
        offsets = np.tile(self._offsets[example_ids], (2, 1))
        rows = render_rows(self._store, self._shapes, grids, tids, cmaps, offsets)
        return rows[: len(example_ids)], rows[len(example_ids) :]
