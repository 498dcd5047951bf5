from __future__ import annotations

import numpy as np

from trm.data.encoding import dihedral, encode_grid
from trm.data.render import grid_store, render_pairs, render_rows, render_task


def random_case(rng, k=120, n=3):
    grids = [rng.integers(0, 10, size=tuple(rng.integers(1, 31, 2))).astype(np.uint8) for _ in range(n)]
    grids.append(np.zeros((30, 30), np.uint8))  # full canvas: no EOS at all
    tids = rng.integers(0, 8, k)
    cmaps = np.concatenate([np.zeros((k, 1), int), np.argsort(rng.random((k, 9)), 1) + 1], 1).astype(np.uint8)
    offsets = np.zeros((k, len(grids), 2), np.uint8)
    for i in range(k):
        for j, g in enumerate(grids):
            h, w = dihedral(g, tids[i]).shape
            offsets[i, j] = rng.integers(0, 31 - h), rng.integers(0, 31 - w)
    return grids, tids, cmaps, offsets


def expected(grid, tid, cmap, offset):
    return encode_grid(dihedral(cmap[grid], tid), tuple(int(x) for x in offset))


def test_render_task_matches_encode_grid():
    grids, tids, cmaps, offsets = random_case(np.random.default_rng(0))
    for use_offsets in (True, False):
        out = render_task(grids, tids, cmaps, offsets if use_offsets else None)
        for i in range(len(tids)):
            for j, g in enumerate(grids):
                off = offsets[i, j] if use_offsets else (0, 0)
                assert np.array_equal(out[i, j], expected(g, tids[i], cmaps[i], off)), (i, j)


def test_render_pairs_shares_offsets_between_input_and_output():
    grids, tids, cmaps, _ = random_case(np.random.default_rng(1))
    pairs = [(grids[0], grids[1]), (grids[2], grids[3])]
    rng = np.random.default_rng(2)
    offsets = np.zeros((len(tids), 2, 2), np.uint8)
    for i, t in enumerate(tids):
        for j, (a, b) in enumerate(pairs):
            h = max(dihedral(a, t).shape[0], dihedral(b, t).shape[0])
            w = max(dihedral(a, t).shape[1], dihedral(b, t).shape[1])
            offsets[i, j] = rng.integers(0, 31 - h), rng.integers(0, 31 - w)
    inputs, labels = render_pairs(pairs, tids, cmaps, offsets)
    assert inputs.flags.c_contiguous and labels.flags.c_contiguous
    for i in range(len(tids)):
        for j, (a, b) in enumerate(pairs):
            assert np.array_equal(inputs[i, j], expected(a, tids[i], cmaps[i], offsets[i, j]))
            assert np.array_equal(labels[i, j], expected(b, tids[i], cmaps[i], offsets[i, j]))


def test_render_rows_matches_encode_grid():
    grids, tids, cmaps, offsets = random_case(np.random.default_rng(3))
    padded = np.zeros((len(grids), 30, 30), np.uint8)
    shapes = np.array([g.shape for g in grids], np.uint8)
    for i, g in enumerate(grids):
        padded[i, : g.shape[0], : g.shape[1]] = g
    which = np.arange(len(tids)) % len(grids)
    rows = render_rows(grid_store(padded), shapes, which, tids, cmaps, offsets[np.arange(len(tids)), which])
    for i in range(len(tids)):
        assert np.array_equal(rows[i], expected(grids[which[i]], tids[i], cmaps[i], offsets[i, which[i]]))
