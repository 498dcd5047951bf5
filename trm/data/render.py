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


def render_task(
    grids: list[np.ndarray], tids: np.ndarray, cmaps: np.ndarray, offsets: np.ndarray | None
) -> np.ndarray:
    """uint8 [k, len(grids), 900]: every variant (tids[i], cmaps[i]) of each grid, at offsets[i, j] or (0, 0).

    Works on a flat buffer: per (dihedral id, grid) it scatters only the grid's own cells and its EOS
    row/column; an EOS cell pushed off the canvas goes to one spare byte at the end.
    """
    k, n = len(tids), len(grids)
    flat = np.zeros(k * n * SEQ_LEN + 1, dtype=np.uint8)
    spare = k * n * SEQ_LEN
    luts = colour_luts(cmaps)
    variants = np.arange(k, dtype=np.intp)
    for t in np.unique(tids):
        sel = variants[tids == t]
        lut = luts[sel]
        for j, grid in enumerate(grids):
            tg = dihedral(grid, int(t))
            h, w = tg.shape
            base = (sel * n + j) * SEQ_LEN
            if offsets is not None:
                r = offsets[sel, j, 0].astype(np.intp)
                c = offsets[sel, j, 1].astype(np.intp)
                base = base + r * GRID_SIZE + c
            else:
                r = c = np.zeros(len(sel), dtype=np.intp)
            cells = (np.arange(h)[:, None] * GRID_SIZE + np.arange(w)).ravel()
            flat[base[:, None] + cells] = lut[:, tg.ravel().astype(np.intp) + COLOUR_OFFSET]
            eos_row = h * GRID_SIZE + np.arange(w)
            flat[np.where((r + h < GRID_SIZE)[:, None], base[:, None] + eos_row, spare)] = EOS
            eos_col = np.arange(h) * GRID_SIZE + w
            flat[np.where((c + w < GRID_SIZE)[:, None], base[:, None] + eos_col, spare)] = EOS
    return flat[:spare].reshape(k, n, SEQ_LEN)
