"""Distinct dihedral x colour-permutation variants of a task: the content test, and per-task random draws.

The dataset builder draws tries from upstream's single legacy stream (`legacy_draws`) and uses the content
keys below to tell new variants from repeats; `plan_augmentations` / `plan_translations` draw from an
independent stream per task (`task_rng`), for variants made outside a dataset build (unseen tasks at
inference). Semantics follow the upstream ARC builder: the original first, then random (dihedral id, colour
permutation fixing 0) tries, up to 5·num_aug of them, keeping a try only when its content (the multiset of
all transformed (input, output) pairs, shapes included) is new, until num_aug variants exist. The content
test is exact but cheap: a transformed pair is identified by the colour-relabelling pattern of its grids
(shared by all colour maps) plus the colours the map assigns to the pattern's colour slots, so thousands
of tries are compared as small integer keys instead of hashing grids.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
from dataclasses import dataclass

import numpy as np

from .encoding import GRID_SIZE, TRANSPOSING, dihedral

RETRIES_FACTOR = 5
_NO_COLOUR = 15  # 4-bit filler for unused colour slots in a key
_N_PERMUTATIONS = 362880  # 9!
_MIX_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)
_SLOT_WEIGHT = np.array([16**i for i in range(9)], dtype=np.int64)


@dataclass
class AugmentationPlan:
    """Accepted variants of one task: row 0 is the original (tid 0, identity colours)."""

    tids: np.ndarray  # uint8 [n]
    colour_maps: np.ndarray  # uint8 [n, 10]


def task_rng(seed: int, subset: str, task_id: str, stream: int) -> np.random.Generator:
    """Independent random stream for one task, from (seed, subset, task id, stream) only."""
    digest = hashlib.sha256(f"{subset}\x00{task_id}".encode()).digest()
    words = [int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4)]
    return np.random.Generator(np.random.Philox(np.random.SeedSequence([seed, stream, *words])))


@functools.cache
def _dihedral_perm(shape: tuple[int, int]) -> np.ndarray:
    """[8, h*w]: for each dihedral id, which original cell each transformed cell (row-major) comes from."""
    cells = np.arange(shape[0] * shape[1]).reshape(shape)
    return np.stack([dihedral(cells, t).ravel() for t in range(8)])


def _dihedral_index(shape_a: tuple[int, int], shape_b: tuple[int, int]) -> np.ndarray:
    """[8, cells]: where each cell of the concatenated transformed pair comes from in the original pair."""
    return np.concatenate(
        [_dihedral_perm(shape_a), _dihedral_perm(shape_b) + shape_a[0] * shape_a[1]], axis=1
    )


def _pair_classes(pairs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per (pair, dihedral id): content-class id, colour-slot weights [10] and the filler constant.

    Two transformed pairs have equal content under colour maps m, m' exactly when they share a class
    (same shapes and colour-relabelling pattern) and m, m' give the same colours to the class's slots,
    i.e. when sum_c m[c]·weight[c] + filler agree.
    """
    classes: dict[tuple, int] = {}
    n = len(pairs)
    class_ids = np.empty((n, 8), dtype=np.int64)
    weights = np.zeros((n, 8, 10), dtype=np.int64)
    filler = np.zeros(n, dtype=np.int64)
    colours = np.arange(10, dtype=np.uint8)
    rows = np.arange(8)[:, None]
    for i, (inp, out) in enumerate(pairs):
        flat = np.concatenate([inp.ravel(), out.ravel()])[_dihedral_index(inp.shape, out.shape)]
        eq = flat[:, :, None] == colours
        first = np.where(eq.any(axis=1), eq.argmax(axis=1), flat.shape[1])
        first[:, 0] = flat.shape[1] + 1  # black is never a slot
        order = np.argsort(first, axis=1, kind="stable")
        k = int((first[0] < flat.shape[1]).sum())
        lut = np.zeros((8, 10), dtype=np.uint8)
        lut[rows, order[:, :k]] = np.arange(1, k + 1, dtype=np.uint8)
        pattern = np.take_along_axis(lut, flat, axis=1)
        weights[i, rows, order[:, :k]] = _SLOT_WEIGHT[:k]
        filler[i] = _NO_COLOUR * _SLOT_WEIGHT[k:].sum()
        for t in range(8):
            shapes = (inp.shape, out.shape) if t not in TRANSPOSING else (inp.shape[::-1], out.shape[::-1])
            class_ids[i, t] = classes.setdefault((shapes, pattern[t].tobytes()), len(classes))
    return class_ids, weights, filler


def _content_keys(
    tids: np.ndarray, cmaps: np.ndarray, class_ids: np.ndarray, weights: np.ndarray, filler: np.ndarray
) -> np.ndarray:
    """One int64 per try identifying its content: the sorted per-pair keys (class id, slot colours), mixed."""
    # float64 matmuls are exact here (keys < 2**53) and use BLAS; one per dihedral id present.
    keys = np.empty((len(tids), len(class_ids)), dtype=np.int64)
    colours = cmaps.astype(np.float64)
    for t in np.unique(tids):
        sel = tids == t
        keys[sel] = (colours[sel] @ weights[:, t, :].T.astype(np.float64)).astype(np.int64)
    keys += filler + (class_ids[:, tids].T << 36)
    if keys.shape[1] == 1:
        return keys[:, 0]
    keys.sort(axis=1)
    # Fold the sorted row into one 64-bit value (multiply-xorshift mixing; a false match between two
    # different rows needs a 64-bit collision among a few thousand tries).
    mixed = np.zeros(len(keys), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for column in keys.T.astype(np.uint64):
            mixed = (mixed ^ column) * _MIX_MULTIPLIER
            mixed ^= mixed >> np.uint64(29)
    return mixed.view(np.int64)


@functools.cache
def _permutations_of_1_to_9() -> np.ndarray:
    """All 9! orderings of colours 1..9 (3.3 MB, built once)."""
    flat = itertools.chain.from_iterable(itertools.permutations(range(1, 10)))
    return np.fromiter(flat, dtype=np.uint8, count=_N_PERMUTATIONS * 9).reshape(_N_PERMUTATIONS, 9)


def _draw_tries(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """n random (dihedral id, colour map fixing 0) tries; consecutive calls continue one stream."""
    u = rng.random((n, 2))
    tids = np.minimum((u[:, 0] * 8).astype(np.int64), 7)
    perm = np.minimum((u[:, 1] * _N_PERMUTATIONS).astype(np.int64), _N_PERMUTATIONS - 1)
    cmaps = np.zeros((n, 10), dtype=np.int64)
    cmaps[:, 1:] = _permutations_of_1_to_9()[perm]
    return tids, cmaps


def plan_augmentations(
    pairs: list[tuple[np.ndarray, np.ndarray]], num_aug: int, rng: np.random.Generator
) -> AugmentationPlan:
    """Original + up to `num_aug` distinct variants from at most 5·num_aug random tries."""
    identity = np.arange(10, dtype=np.int64)[None, :]
    tids, cmaps = np.zeros(1, dtype=np.int64), identity
    if num_aug > 0:
        class_ids, weights, filler = _pair_classes(pairs)
        budget = RETRIES_FACTOR * num_aug
        # Draw a first batch of tries; draw the rest of the budget only if it does not suffice.
        # Row-major draws make the two-step result identical to drawing the whole budget at once.
        first = min(budget, 2 * num_aug + 16)
        for n in (first, budget - first):
            if n <= 0:
                continue
            more_t, more_c = _draw_tries(rng, n)
            tids, cmaps = np.concatenate([tids, more_t]), np.concatenate([cmaps, more_c])
            keys = _content_keys(tids, cmaps, class_ids, weights, filler)
            _, first_seen = np.unique(keys, return_index=True)
            if len(first_seen) >= num_aug + 1:
                break
        keep = np.sort(first_seen)[: num_aug + 1]
        tids, cmaps = tids[keep], cmaps[keep]
    return AugmentationPlan(tids=tids.astype(np.uint8), colour_maps=cmaps.astype(np.uint8))


def transformed_extent(pairs: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """[8, n_pairs, 2]: max height and width of each pair (input and output) after each dihedral id."""
    hw = np.array(
        [[max(a.shape[0], b.shape[0]), max(a.shape[1], b.shape[1])] for a, b in pairs], dtype=np.int64
    ).reshape(len(pairs), 2)
    ext = np.empty((8, len(pairs), 2), dtype=np.int64)
    for t in range(8):
        ext[t] = hw[:, ::-1] if t in TRANSPOSING else hw
    return ext


def plan_translations(
    pairs: list[tuple[np.ndarray, np.ndarray]], tids: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """uint8 [n_puzzles, n_pairs, 2] top-left offsets; one random anchor example per puzzle stays at (0, 0)."""
    n, p = len(tids), len(pairs)
    if p == 0:
        return np.zeros((n, 0, 2), dtype=np.uint8)
    extent = transformed_extent(pairs)[tids.astype(np.int64)]  # [n, p, 2]
    u = rng.random((n, p + 1, 2))
    offsets = (u[:, :p] * (GRID_SIZE - extent + 1)).astype(np.int64)
    anchor = np.minimum((u[:, p, 0] * p).astype(np.int64), p - 1)
    offsets[np.arange(n), anchor] = 0
    return offsets.astype(np.uint8)
