"""`PuzzleLoader`: upstream's batch sampling (upstream: puzzle_dataset.py), deterministic from (seed, epoch, position).

Train iteration, per data path (set) in turn: per epoch a seeded permutation of the groups; walking it,
each group visit picks one puzzle (augmentation) of the group and takes min(#examples, space left) of
its examples in random order; batches are exactly `global_batch_size` (a short last batch of a pass is
dropped) and rank r gets rows [r·local, (r+1)·local). Every random choice comes from a counter-based hash
of (seed, set, epoch, position in epoch), so a loader needs no RNG state: `state_dict()` is a position
and a restored loader yields exactly the batches an uninterrupted one would, for any world size.

Several data paths are merged as upstream does (metadata counts summed, sets `all`, `all1`, … iterated one
after another), except that puzzle identifiers of path i are shifted by the identifier counts of paths
0..i-1 so that different puzzles never share an embedding row (upstream lets them collide).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trm.errors import TRMError

from .formats import SplitData
from .manifest import combined_fingerprint, count_problems, read_verified_manifest, rebuild_hint
from .metadata import DatasetMetadata, merge_metadata
from .prefetch import prefetched

IGNORE_LABEL = -100
SPLITS = ("train", "test")
STATE_VERSION = 1
_U64 = np.uint64
_GOLDEN = _U64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray | np.uint64) -> np.ndarray:
    """splitmix64 finaliser: a bijective, well-mixed map on uint64."""
    with np.errstate(over="ignore"):
        x = np.asarray(x, dtype=_U64)
        x = (x ^ (x >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> _U64(27))) * _U64(0x94D049BB133111EB)
        return x ^ (x >> _U64(31))


def _add(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.asarray(a, dtype=_U64) + np.asarray(b, dtype=_U64)


def _unit(x: np.ndarray) -> np.ndarray:
    """uint64 -> float64 in [0, 1)."""
    return (x >> _U64(11)).astype(np.float64) * (1.0 / (1 << 53))


class PuzzleLoader:
    """Batches of one split of one or more dataset dirs (see module docstring)."""

    def __init__(
        self,
        data_paths: Sequence[str | Path],
        split: str,
        *,
        global_batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        epochs_per_iter: int = 1,
        prefetch: int = 0,
        pin_memory: bool = False,
    ) -> None:
        if isinstance(data_paths, (str, Path)):
            data_paths = [data_paths]
        if split not in SPLITS:
            raise TRMError(f"split {split!r}: must be 'train' or 'test'")
        if not data_paths:
            raise TRMError("data_paths is empty: pass at least one dataset directory (data_paths=[...])")
        if global_batch_size < 1 or world_size < 1 or global_batch_size % world_size:
            raise TRMError(
                f"global_batch_size={global_batch_size} must be a positive multiple of the world size "
                f"({world_size}); change global_batch_size or the number of processes"
            )
        if not 0 <= rank < world_size:
            raise TRMError(f"rank {rank} is outside 0..{world_size - 1}")
        if epochs_per_iter < 1:
            raise TRMError(f"epochs_per_iter={epochs_per_iter} must be >= 1")
        if prefetch < 0:
            raise TRMError(f"prefetch={prefetch} must be ≥ 0 (0: no batches built ahead)")
        self.data_paths = [Path(p) for p in data_paths]
        self.split = split
        self.global_batch_size = global_batch_size
        self.local_batch_size = global_batch_size // world_size
        self.rank, self.world_size, self.seed, self.epochs_per_iter = rank, world_size, seed, epochs_per_iter
        self.prefetch, self.pin_memory = prefetch, pin_memory
        self._manifests = [read_verified_manifest(p) for p in self.data_paths]
        self._sets = [
            SplitData(p, split, m["form"]) for p, m in zip(self.data_paths, self._manifests, strict=True)
        ]
        for path, manifest, data in zip(self.data_paths, self._manifests, self._sets, strict=True):
            _check_counts(path, manifest, data)
        self.metadata: DatasetMetadata = merge_metadata(
            [(str(p), s.metadata) for p, s in zip(self.data_paths, self._sets, strict=True)]
        )
        self.set_names = list(self.metadata.sets)
        self._id_offsets = np.cumsum([0] + [s.metadata.num_puzzle_identifiers for s in self._sets])[:-1]
        self.fingerprint: str = combined_fingerprint(self._manifests)
        self._position = {"iteration": 0, "set_index": 0, "group_position": 0}

    # ----- lazily loaded side files -------------------------------------------------------------------
    @functools.cached_property
    def identifiers(self) -> list[str]:
        """Identifier strings indexed by (merged) puzzle identifier."""
        names: list[str] = []
        for path, data in zip(self.data_paths, self._sets, strict=True):
            part = _read_json(path / "identifiers.json")
            if not isinstance(part, list) or len(part) != data.metadata.num_puzzle_identifiers:
                raise TRMError(
                    f"{path / 'identifiers.json'}: expected a list of {data.metadata.num_puzzle_identifiers} "
                    "identifiers; rebuild the dataset with `python -m trm data build-arc`"
                )
            names.extend(part)
        return names

    @functools.cached_property
    def test_puzzles(self) -> dict[str, Any]:
        """Original JSON of the ARC test-set tasks ({task_id: {train, test}}), merged over data paths."""
        merged: dict[str, Any] = {}
        for path in self.data_paths:
            file = path / "test_puzzles.json"
            if file.is_file():
                merged.update(_read_json(file))
        return merged

    # ----- resumable position ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The position after the last yielded train batch (plus what it is only valid for).

        A restored loader's `iter_train()` first finishes the interrupted pass (an empty pass if it stopped
        right after the pass's last batch), then each call is one new pass.
        """
        return {
            "version": STATE_VERSION,
            "fingerprint": self.fingerprint,
            "seed": self.seed,
            "epochs_per_iter": self.epochs_per_iter,
            **self._position,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a position saved by `state_dict` (world size and batch size may differ)."""
        for key, mine in (
            ("version", STATE_VERSION),
            ("fingerprint", self.fingerprint),
            ("seed", self.seed),
            ("epochs_per_iter", self.epochs_per_iter),
        ):
            if state.get(key) != mine:
                raise TRMError(
                    f"loader state: {key}={state.get(key)!r} but this loader has {mine!r}; resume with the same "
                    "dataset (data_paths), seed and eval_interval, or start a new run"
                )
        position = {k: int(state[k]) for k in ("iteration", "set_index", "group_position")}
        if position["set_index"] > len(self._sets) or min(position.values()) < 0:
            raise TRMError(f"loader state: position {position} does not fit this dataset; start a new run")
        self._position = position

    # ----- train ----------------------------------------------------------------------------------------
    def guaranteed_batches(self, epochs: int) -> int:
        """The fewest train batches one pass of `epochs` epochs yields (module function `guaranteed_batches`)."""
        return guaranteed_batches(pass_bounds(self._sets), self.global_batch_size, epochs)

    def epochs_for_batches(self, batches: int) -> int:
        """The fewest epochs per pass that guarantee `batches` train batches (module `epochs_for_batches`)."""
        return epochs_for_batches(
            pass_bounds(self._sets), self.global_batch_size, batches, self.data_paths[0]
        )

    def _epoch_key(self, set_index: int, epoch: int) -> np.ndarray:
        mask = (1 << 64) - 1
        base = _mix(_add(_mix(_U64(self.seed & mask)), ((set_index + 1) * 0x632BE59BD9B4E019) & mask))
        return _mix(_add(base, (epoch * int(_GOLDEN)) & mask))

    def _group_order(self, set_index: int, iteration: int) -> tuple[np.ndarray, np.ndarray]:
        """Groups visited in one iteration, and each visit's random key."""
        groups = self._sets[set_index].num_groups
        orders, keys = [], []
        for e in range(self.epochs_per_iter):
            epoch = iteration * self.epochs_per_iter + e
            seq = np.random.SeedSequence([self.seed, set_index, epoch])
            orders.append(np.random.Generator(np.random.Philox(seq)).permutation(groups))
            keys.append(
                _mix(_add(self._epoch_key(set_index, epoch), np.arange(groups, dtype=_U64) * _GOLDEN))
            )
        return np.concatenate(orders), np.concatenate(keys)

    def iter_train(self) -> Iterator[tuple[str, dict[str, torch.Tensor], int]]:
        """One pass of `epochs_per_iter` epochs over every set, from the current position.

        With `prefetch` > 0 the next batches are built (and with `pin_memory` pinned) in a background thread
        (trm.data.prefetch); the position (`state_dict`) is always that after the last batch handed out here.
        """
        if self.split != "train":
            raise TRMError("iter_train() needs a loader built with split='train'")
        start = dict(self._position)
        batches = self._train_pass(start)
        if self.prefetch:
            batches = prefetched(batches, self.prefetch, pin_memory=self.pin_memory)
        for set_name, batch, rows, position in batches:
            self._position = position
            yield set_name, batch, rows
        self._position = {"iteration": start["iteration"] + 1, "set_index": 0, "group_position": 0}

    def _train_pass(
        self, position: dict[str, int]
    ) -> Iterator[tuple[str, dict[str, torch.Tensor], int, dict[str, int]]]:
        """The batches of the pass `position` is in, from there, each with the position after it."""
        iteration = position["iteration"]
        for s in range(position["set_index"], len(self._sets)):
            data = self._sets[s]
            order, keys = self._group_order(s, iteration)
            lo, hi = data.group_indices[order], data.group_indices[order + 1]
            puzzles = lo + np.minimum((_unit(_mix(keys ^ _U64(1))) * (hi - lo)).astype(np.int64), hi - lo - 1)
            sizes = data.puzzle_indices[puzzles + 1] - data.puzzle_indices[puzzles]
            cum = np.concatenate([[0], np.cumsum(sizes)])
            start = position["group_position"] if s == position["set_index"] else 0
            while True:
                end = int(np.searchsorted(cum, cum[start] + self.global_batch_size, side="left"))
                if end >= len(cum):
                    break  # the remaining visits cannot fill a batch: drop it, as upstream does
                batch = self._train_batch(s, data, puzzles[start:end], sizes[start:end], keys[start:end])
                start = end
                after = {"iteration": iteration, "set_index": s, "group_position": start}
                yield self.set_names[s], batch, self.global_batch_size, after

    def _train_batch(
        self, s: int, data: SplitData, puzzles: np.ndarray, sizes: np.ndarray, keys: np.ndarray
    ) -> dict[str, torch.Tensor]:
        take = sizes.copy()
        take[-1] -= sizes.sum() - self.global_batch_size  # the last visit is truncated to fit
        visit = np.repeat(np.arange(len(puzzles)), sizes)
        local = np.arange(len(visit)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        with np.errstate(over="ignore"):
            draw = _mix(_add(keys[visit] ^ _U64(2), _U64(1) + local.astype(_U64) * _GOLDEN))
        order = np.lexsort((draw, visit))  # random order of each visited puzzle's examples
        rank_in_visit = np.empty_like(local)
        rank_in_visit[order] = local
        keep = order[rank_in_visit[order] < take[visit[order]]]
        example_ids = data.puzzle_indices[puzzles[visit[keep]]] + local[keep]
        puzzle_ids = puzzles[visit[keep]]
        rows = slice(self.rank * self.local_batch_size, (self.rank + 1) * self.local_batch_size)
        return self._collate(s, data, example_ids[rows], puzzle_ids[rows])

    # ----- test -----------------------------------------------------------------------------------------
    def test_layout(self) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """(set name, group_indices, puzzle_indices) of every set: groups of puzzles (ARC: an original task
        and its augmentations), puzzles of examples (their test inputs)."""
        return [
            (name, data.group_indices, data.puzzle_indices)
            for name, data in zip(self.set_names, self._sets, strict=True)
        ]

    def iter_test(
        self, examples: Mapping[str, np.ndarray] | None = None
    ) -> Iterator[tuple[str, dict[str, torch.Tensor], int]]:
        """Every example in order (or, with `examples`, only each set's listed example ids, ascending), in
        chunks of global_batch_size; short local batches padded with blanks."""
        for s, data in enumerate(self._sets):
            chosen = None if examples is None else np.asarray(examples.get(self.set_names[s], ()), np.int64)
            total = data.num_examples if chosen is None else len(chosen)
            for start in range(0, total, self.global_batch_size):
                end = min(total, start + self.global_batch_size)
                lo = start + self.rank * self.local_batch_size
                hi = min(start + (self.rank + 1) * self.local_batch_size, end)
                example_ids = np.arange(lo, max(lo, hi), dtype=np.int64)
                if chosen is not None:
                    example_ids = chosen[example_ids]
                puzzle_ids = np.searchsorted(data.puzzle_indices, example_ids, side="right") - 1
                yield self.set_names[s], self._collate(s, data, example_ids, puzzle_ids), end - start

    # ----- collate --------------------------------------------------------------------------------------
    def _collate(
        self, s: int, data: SplitData, example_ids: np.ndarray, puzzle_ids: np.ndarray
    ) -> dict[str, torch.Tensor]:
        meta = data.metadata
        n, size = len(example_ids), self.local_batch_size
        inputs = np.full((size, meta.seq_len), meta.pad_id, dtype=np.int32)
        labels = np.full((size, meta.seq_len), IGNORE_LABEL, dtype=np.int32)
        identifiers = np.full(size, meta.blank_identifier_id, dtype=np.int32)
        if n:
            raw_inputs, raw_labels = data.examples(example_ids, puzzle_ids)
            inputs[:n] = raw_inputs
            labels[:n] = raw_labels
            if meta.ignore_label_id is not None:
                labels[:n][raw_labels == meta.ignore_label_id] = IGNORE_LABEL
            identifiers[:n] = data.puzzle_identifiers[puzzle_ids] + self._id_offsets[s]
        return {
            "inputs": torch.from_numpy(inputs),
            "labels": torch.from_numpy(labels),
            "puzzle_identifiers": torch.from_numpy(identifiers),
        }


def _check_counts(path: Path, manifest: dict[str, Any], data: SplitData) -> None:
    """The manifest's counts of the split (not covered by its fingerprint) against the arrays read, and a
    materialized split's example rows against its index arrays and `dataset.json`; one line naming both."""
    problems = count_problems(
        manifest, data.split, {"examples": data.num_examples, "groups": data.num_groups}
    )
    for reader in data.readers:
        if reader.shape != (data.num_examples, data.metadata.seq_len):
            problems.append(
                f"{reader.path.name} is {list(reader.shape)}, but puzzle_indices and dataset.json need "
                f"[{data.num_examples}, {data.metadata.seq_len}]"
            )
    if problems:
        raise TRMError(f"{path}/{data.split}: {'; '.join(problems)}; {rebuild_hint(path, manifest)}")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise TRMError(
            f"{path}: unreadable ({err}); rebuild the dataset with `python -m trm data build-arc`"
        ) from None


# ----- how many batches a pass yields at least ------------------------------------------------------------
def pass_bounds(sets: Sequence[SplitData]) -> list[tuple[int, int]]:
    """Per set (r, w): the rows one epoch holds at least (the sum over its groups of their smallest puzzle's
    examples: a visit takes one puzzle of its group) and the rows a batch may waste at most (the largest
    puzzle's examples less one: the rest of the batch's truncated last visit)."""
    bounds = []
    for data in sets:
        sizes = np.diff(data.puzzle_indices)
        if data.num_groups and len(sizes):
            smallest = np.minimum.reduceat(sizes, data.group_indices[:-1])
            bounds.append((int(smallest.sum()), max(int(sizes.max()) - 1, 0)))
    return bounds


def guaranteed_batches(bounds: Sequence[tuple[int, int]], global_batch_size: int, epochs: int) -> int:
    """The fewest train batches one pass of `epochs` epochs yields, whatever puzzles the seed draws.

    A set's pass holds at least epochs·r rows; a batch uses up at most gbs + w of them and the pass ends
    with fewer than gbs rows left, so it yields at least ⌊(epochs·r − gbs)/(gbs + w)⌋ + 1 batches once
    epochs·r ≥ gbs (r, w: `pass_bounds`)."""
    total = 0
    for rows_per_epoch, waste in bounds:
        rows = epochs * rows_per_epoch
        if rows >= global_batch_size:
            total += (rows - global_batch_size) // (global_batch_size + waste) + 1
    return total


def epochs_for_batches(
    bounds: Sequence[tuple[int, int]], global_batch_size: int, batches: int, where: str | Path
) -> int:
    """The fewest epochs per pass that guarantee `batches` train batches in one pass (`guaranteed_batches`);
    TRMError naming `where` when no epoch is sure to hold a row."""
    if not any(rows for rows, _ in bounds):
        raise TRMError(
            f"{where}: no epoch of its train split is sure to hold a row (every group has a puzzle without "
            "examples); rebuild the dataset"
        )
    low, high = 1, 1
    while guaranteed_batches(bounds, global_batch_size, high) < batches:
        low, high = high + 1, high * 2
    while low < high:
        mid = (low + high) // 2
        if guaranteed_batches(bounds, global_batch_size, mid) >= batches:
            high = mid
        else:
            low = mid + 1
    return high
