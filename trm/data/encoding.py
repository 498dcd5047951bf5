"""ARC grid <-> 900-token sequence encoding, the 8 dihedral transforms and augmentation identifiers."""

from __future__ import annotations

import numpy as np

from trm.errors import TRMError

GRID_SIZE = 30
SEQ_LEN = GRID_SIZE * GRID_SIZE
PAD = 0
EOS = 1
COLOUR_OFFSET = 2  # colour c is token c + 2
VOCAB_SIZE = 12
BLANK_IDENTIFIER = "<blank>"
ID_SEPARATOR = "|||"

# Inverse of each dihedral id: rotations by 90/270 undo each other, the rest are involutions.
DIHEDRAL_INVERSE = [0, 3, 2, 1, 4, 5, 6, 7]
# Dihedral ids that swap height and width.
TRANSPOSING = frozenset({1, 3, 6, 7})


def dihedral(grid: np.ndarray, tid: int) -> np.ndarray:
    """Apply dihedral transform `tid` (0 id, 1-3 rot90/180/270 ccw, 4 flip-lr, 5 flip-ud, 6 transpose, 7 anti)."""
    if tid == 0:
        return grid
    if tid in (1, 2, 3):
        return np.rot90(grid, k=tid)
    if tid == 4:
        return np.fliplr(grid)
    if tid == 5:
        return np.flipud(grid)
    if tid == 6:
        return grid.T
    if tid == 7:
        return np.fliplr(np.rot90(grid))
    raise ValueError(f"dihedral id must be in 0..7, got {tid}")


def inverse_dihedral(grid: np.ndarray, tid: int) -> np.ndarray:
    """Undo `dihedral(grid, tid)`."""
    return dihedral(grid, DIHEDRAL_INVERSE[tid])


def encode_grid(grid: np.ndarray, offset: tuple[int, int] = (0, 0)) -> np.ndarray:
    """Encode a grid (values 0..9) as 900 uint8 tokens: grid+2 at `offset`, EOS row/column after it, PAD elsewhere."""
    grid = np.asarray(grid)
    h, w = grid.shape
    r, c = offset
    if r < 0 or c < 0 or r + h > GRID_SIZE or c + w > GRID_SIZE:
        raise ValueError(f"a {h}x{w} grid does not fit a {GRID_SIZE}x{GRID_SIZE} canvas at offset {offset}")
    canvas = np.zeros((GRID_SIZE, GRID_SIZE), dtype=np.uint8)
    canvas[r : r + h, c : c + w] = grid.astype(np.uint8) + COLOUR_OFFSET
    if r + h < GRID_SIZE:
        canvas[r + h, c : c + w] = EOS
    if c + w < GRID_SIZE:
        canvas[r : r + h, c + w] = EOS
    return canvas.reshape(-1)


def crop(tokens: np.ndarray) -> np.ndarray:
    """Largest top-left all-colour rectangle of a 900-token sequence, as a grid of colours 0..9.

    Row by row, the usable width is where the first non-colour token appears, and it can only shrink;
    the rectangle with the largest area wins (the first one on ties). A sequence starting with PAD or
    EOS gives an empty (0x0) grid.
    """
    canvas = np.asarray(tokens).reshape(GRID_SIZE, GRID_SIZE)
    is_colour = (canvas >= COLOUR_OFFSET) & (canvas < VOCAB_SIZE)
    first_bad = np.where(is_colour.all(axis=1), GRID_SIZE, np.argmin(is_colour, axis=1))
    widths = np.minimum.accumulate(first_bad)
    areas = widths * np.arange(1, GRID_SIZE + 1)
    best = int(np.argmax(areas))
    if areas[best] == 0:
        return np.zeros((0, 0), dtype=np.uint8)
    return (canvas[: best + 1, : widths[best]] - COLOUR_OFFSET).astype(np.uint8)


def identifier(task_id: str, tid: int, colour_map: np.ndarray | None) -> str:
    """The puzzle identifier string: the plain task id for the original, else `task|||tN|||<10 digits>`."""
    if colour_map is None:
        return task_id
    digits = "".join(str(int(x)) for x in colour_map)
    return f"{task_id}{ID_SEPARATOR}t{tid}{ID_SEPARATOR}{digits}"


def parse_identifier(s: str) -> tuple[str, int, np.ndarray | None]:
    """Split an identifier into (task_id, dihedral id, colour map or None for an original task)."""
    parts = s.split(ID_SEPARATOR)
    if len(parts) == 1:
        return s, 0, None
    if (
        len(parts) != 3
        or not parts[1].startswith("t")
        or parts[1][1:] not in {str(t) for t in range(8)}
        or len(parts[2]) != 10
        or not parts[2].isdigit()
        or sorted(parts[2]) != list("0123456789")
    ):
        raise TRMError(
            f"puzzle identifier {s!r} is not '<task>|||t<0-7>|||<permutation of 0-9>'; "
            "rebuild the dataset with `python -m trm data build-arc`"
        )
    return parts[0], int(parts[1][1:]), np.array([int(ch) for ch in parts[2]], dtype=np.uint8)


def invert_augmentation(grid: np.ndarray, tid: int, colour_map: np.ndarray | None) -> np.ndarray:
    """Map an augmented grid back to the original task's frame: undo the dihedral, then the colours."""
    grid = inverse_dihedral(np.asarray(grid), tid)
    if colour_map is None:
        return np.array(grid)
    inverse = np.argsort(colour_map).astype(np.uint8)
    return inverse[grid]
