"""Turn augmentation recipes (grid, dihedral id, colour map, offset) into 900-token rows, vectorised.

Two routes with identical output: `render_rows` for arbitrary rows (the loader's compact form) and
`render_task` for all variants of one task at once (the materialized writer), which only touches each
grid's own cells.
"""

from __future__ import annotations

import functools

import numpy as np

from .encoding import COLOUR_OFFSET, EOS, GRID_SIZE, PAD, SEQ_LEN, TRANSPOSING, dihedral

_EOS_SLOT = SEQ_LEN  # index of the EOS token in an extended grid row
_PAD_SLOT = SEQ_LEN + 1  # index of the PAD token in an extended grid row
# Source cell of a transformed grid's cell (a, b), as coefficients of (h-1, a, b) and (w-1, a, b).
_SOURCE = {
    0: ((0, 1, 0), (0, 0, 1)),
    1: ((0, 0, 1), (1, -1, 0)),
    2: ((1, -1, 0), (1, 0, -1)),
    3: ((1, 0, -1), (0, 1, 0)),
    4: ((0, 1, 0), (1, 0, -1)),
    5: ((1, -1, 0), (0, 0, 1)),
    6: ((0, 0, 1), (0, 1, 0)),
    7: ((1, 0, -1), (1, -1, 0)),
}


@functools.cache
def canvas_table() -> np.ndarray:
    """int16 [8*30*30, 901]: for (tid, h, w) the source of each canvas cell at offset 0 (plus a PAD slot)."""
    size = GRID_SIZE
    h = np.arange(1, size + 1)[:, None, None, None]
    w = np.arange(1, size + 1)[None, :, None, None]
    a = np.arange(size)[None, None, :, None]
    b = np.arange(size)[None, None, None, :]
    table = np.empty((8, size, size, SEQ_LEN + 1), dtype=np.int16)
    for t, ((rh, ra, rb), (cw, ca, cb)) in _SOURCE.items():
        height, width = (w, h) if t in TRANSPOSING else (h, w)
        src = (rh * (h - 1) + ra * a + rb * b) * size + (cw * (w - 1) + ca * a + cb * b)
        inside = (a < height) & (b < width)
        eos = ((a == height) & (b < width)) | ((b == width) & (a < height))
        cell = np.where(inside, src, np.where(eos, _EOS_SLOT, _PAD_SLOT))
        table[t, :, :, :SEQ_LEN] = cell.reshape(size, size, SEQ_LEN)
        table[t, :, :, SEQ_LEN] = _PAD_SLOT
    return table.reshape(8 * size * size, SEQ_LEN + 1)


@functools.cache
def shift_table() -> np.ndarray:
    """int16 [900, 900]: for offset r*30+c, which offset-0 cell lands on each canvas cell (900 = none)."""
    i = np.arange(GRID_SIZE)[None, None, :, None]
    j = np.arange(GRID_SIZE)[None, None, None, :]
    r = np.arange(GRID_SIZE)[:, None, None, None]
    c = np.arange(GRID_SIZE)[None, :, None, None]
    ok = (i >= r) & (j >= c)
    src = np.where(ok, (i - r) * GRID_SIZE + (j - c), SEQ_LEN)
    return src.reshape(SEQ_LEN, SEQ_LEN).astype(np.int16)


def grid_store(grids: np.ndarray) -> np.ndarray:
    """uint8 [n, 902]: padded 30x30 grids as colour tokens, then an EOS slot and a PAD slot."""
    n = len(grids)
    store = np.empty((n, SEQ_LEN + 2), dtype=np.uint8)
    store[:, :SEQ_LEN] = grids.reshape(n, SEQ_LEN) + COLOUR_OFFSET
    store[:, _EOS_SLOT] = EOS
    store[:, _PAD_SLOT] = PAD
    return store


def colour_luts(cmaps: np.ndarray) -> np.ndarray:
    """uint8 [k, 12] token maps: PAD and EOS fixed, colour token c+2 -> cmap[c]+2."""
    luts = np.empty((len(cmaps), COLOUR_OFFSET + 10), dtype=np.uint8)
    luts[:, PAD] = PAD
    luts[:, EOS] = EOS
    luts[:, COLOUR_OFFSET:] = cmaps + COLOUR_OFFSET
    return luts


def render_rows(
    store: np.ndarray,
    shapes: np.ndarray,
    grid_ids: np.ndarray,
    tids: np.ndarray,
    cmaps: np.ndarray,
    offsets: np.ndarray,
) -> np.ndarray:
    """uint8 [k, 900]: row i = grid `grid_ids[i]` colour-mapped, transformed by `tids[i]`, placed at `offsets[i]`."""
    # Flat gathers with precomputed offsets: canvas cell -> source cell -> original token -> mapped token.
    h = shapes[grid_ids, 0].astype(np.intp)
    w = shapes[grid_ids, 1].astype(np.intp)
    key = tids.astype(np.intp) * SEQ_LEN + (h - 1) * GRID_SIZE + (w - 1)
    index = shift_table()[offsets[:, 0].astype(np.intp) * GRID_SIZE + offsets[:, 1]].astype(np.intp)
    index += (key * (SEQ_LEN + 1))[:, None]
    index = np.take(canvas_table(), index, mode="clip").astype(np.intp)
    index += (grid_ids.astype(np.intp) * (SEQ_LEN + 2))[:, None]
    index = np.take(store, index, mode="clip").astype(np.intp)
    index += (np.arange(len(tids), dtype=np.intp) * (COLOUR_OFFSET + 10))[:, None]
    return np.take(colour_luts(cmaps), index, mode="clip")


@functools.cache
def _cells(t: int, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int]:
    """For a grid shape under dihedral t: source cell of each transformed cell, canvas positions of the
    cells, of the EOS row and of the EOS column (at offset 0), and the transformed height and width."""
    h, w = shape
    height, width = (w, h) if t in TRANSPOSING else (h, w)
    source = dihedral(np.arange(h * w).reshape(h, w), t).ravel()
    cells = (np.arange(height)[:, None] * GRID_SIZE + np.arange(width)).ravel()
    eos_row = height * GRID_SIZE + np.arange(width)
    eos_col = np.arange(height) * GRID_SIZE + width
    return source, cells, eos_row, eos_col, height, width


def _scatter(
    flat: np.ndarray,
    grids: list[np.ndarray],
    tids: np.ndarray,
    cmaps: np.ndarray,
    offsets: np.ndarray | None,
    row_start: np.ndarray,
) -> None:
    """Write every variant k of every grid j at flat[row_start[k, j] : +900] (offset offsets[k, j] or 0).

    One scatter per dihedral id for all grids: only the grids' own cells and their EOS rows/columns are
    written (the rows must be zero already); an EOS cell pushed off the canvas goes to flat[-1].
    """
    spare = len(flat) - 1
    luts = colour_luts(cmaps)
    variants = np.arange(len(tids), dtype=np.intp)
    for t in np.unique(tids).tolist():
        sel = variants[tids == t]
        parts = [_cells(t, g.shape) for g in grids]
        tokens = np.concatenate([g.ravel()[p[0]] for g, p in zip(grids, parts, strict=True)]).astype(np.intp)
        owner = np.repeat(np.arange(len(grids)), [len(p[0]) for p in parts])
        cells = np.concatenate([p[1] for p in parts])
        heights = np.array([p[4] for p in parts])
        widths = np.array([p[5] for p in parts])
        base = row_start[sel]  # [k_t, grids]
        if offsets is not None:
            r = offsets[sel, :, 0].astype(np.intp)
            c = offsets[sel, :, 1].astype(np.intp)
            base = base + r * GRID_SIZE + c
        else:
            r = c = np.zeros(base.shape, dtype=np.intp)
        flat[base[:, owner] + cells] = luts[sel][:, tokens + COLOUR_OFFSET]
        for which, start, size in ((2, r, heights), (3, c, widths)):
            eos = np.concatenate([p[which] for p in parts])
            eos_owner = np.repeat(np.arange(len(grids)), [len(p[which]) for p in parts])
            fits = (start + size < GRID_SIZE)[:, eos_owner]
            flat[np.where(fits, base[:, eos_owner] + eos, spare)] = EOS


def render_task(
    grids: list[np.ndarray], tids: np.ndarray, cmaps: np.ndarray, offsets: np.ndarray | None
) -> np.ndarray:
    """uint8 [k, len(grids), 900]: every variant (tids[i], cmaps[i]) of each grid, at offsets[i, j] or (0, 0)."""
    k, n = len(tids), len(grids)
    flat = np.zeros(k * n * SEQ_LEN + 1, dtype=np.uint8)
    row_start = (np.arange(k, dtype=np.intp)[:, None] * n + np.arange(n)) * SEQ_LEN
    _scatter(flat, grids, tids, cmaps, offsets, row_start)
    return flat[:-1].reshape(k, n, SEQ_LEN)


def render_pairs(
    pairs: list[tuple[np.ndarray, np.ndarray]],
    tids: np.ndarray,
    cmaps: np.ndarray,
    offsets: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, labels), each uint8 [k, len(pairs), 900]: every variant of each pair, input and output
    sharing the offset offsets[i, j] (or (0, 0)); both come from one buffer without copies."""
    k, n = len(tids), len(pairs)
    half = k * n * SEQ_LEN
    flat = np.zeros(2 * half + 1, dtype=np.uint8)
    row_start = (np.arange(k, dtype=np.intp)[:, None] * n + np.tile(np.arange(n), 2)) * SEQ_LEN
    row_start[:, n:] += half  # labels live in the second half of the buffer
    both = None if offsets is None else np.concatenate([offsets, offsets], axis=1)
    _scatter(flat, [p[0] for p in pairs] + [p[1] for p in pairs], tids, cmaps, both, row_start)
    return flat[:half].reshape(k, n, SEQ_LEN), flat[half:-1].reshape(k, n, SEQ_LEN)
