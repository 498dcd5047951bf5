"""On-disk dataset forms and their readers.

Both forms share upstream's index arrays per split (`all__puzzle_identifiers`, `all__puzzle_indices`,
`all__group_indices`), `dataset.json`, `identifiers.json` and `test_puzzles.json`.

* materialized: upstream's layout, `all__inputs.npy` / `all__labels.npy` hold every encoded example.
* compact: the original grids (`grids.npy`, `grid_shapes.npy`) plus per-split recipes (dihedral id and
  colour map per puzzle, offset per example, pair list per group); examples are rendered on demand.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from trm.errors import TRMError

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


class SplitData:
    """One split of one dataset dir: index arrays in RAM and `examples(idx)` -> (inputs, labels) uint8."""

    def __init__(self, root: Path, split: str, form: str) -> None:
        self.root, self.split, self.form = Path(root), split, form
        self.metadata = DatasetMetadata.read(self.root / split / "dataset.json")
        for name in INDEX_FIELDS:
            setattr(self, name, _load(array_path(self.root, split, name)).astype(np.int64))
        self.num_examples = int(self.puzzle_indices[-1])
        self.num_groups = len(self.group_indices) - 1
        if form == MATERIALIZED:
            self._inputs = _load(array_path(self.root, split, "inputs"), mmap=True)
            self._labels = _load(array_path(self.root, split, "labels"), mmap=True)
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
            order = np.argsort(example_ids, kind="stable")  # sorted reads are kinder to a memory map
            inputs = np.empty((len(example_ids), self._inputs.shape[1]), dtype=np.uint8)
            labels = np.empty_like(inputs)
            inputs[order] = self._inputs[example_ids[order]]
            labels[order] = self._labels[example_ids[order]]
            return inputs, labels
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
