"""Sudoku-Extreme builder (TRM_SPEC §8.3): upstream's semantics, seeded, atomic, manifest last.

Tokens: PAD 0, then cell value + 1 (blank 1, digits 2..10): `vocab_size` 11, `seq_len` 81, ignore label 0.
Each original puzzle is a group of `1 + num_aug` single-example puzzles (train only): the original, then
`num_aug` random validity-preserving shuffles (digit permutation with blank kept, transpose with
probability 1/2, band and row-within-band permutation, stack and column-within-stack permutation).

Random draws come from `numpy.random.RandomState(seed)` in upstream's order (train subsample, then per
augmentation: digits, transpose, bands and their rows, stacks and their columns), so a build equals
upstream's when upstream's global numpy RNG is seeded with the same value. The compact form stores the
originals and each puzzle's shuffle (`grid_recipes`); materializing renders them, vectorized.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import trm
from trm.errors import TRMError

from .csv_source import PuzzleRows, input_checksums, read_rows, resolve_split_file
from .grid_dataset import (
    COMPACT,
    MATERIALIZED,
    EncodedSplit,
    bad_row,
    check_form,
    check_sizes,
    encode_fixed,
    existing_dataset,
    first_char_outside,
    grid_form,
    subsample,
    write_dataset,
)
from .grid_recipes import render_sudoku

DEFAULT_REPO = "sapientinc/sudoku-extreme"
BUILDER = f"trm-stack {trm.__version__} build-sudoku"
SEQ_LEN = 81
VOCAB_SIZE = 11  # PAD + values 0 (blank) .. 9
_CHUNK = 1 << 16  # puzzles rendered per vectorized block (bounds the index arrays' memory)
_CELLS = np.arange(SEQ_LEN)
_TRANSPOSED = (_CELLS % 9) * 9 + _CELLS // 9  # cell k of x.T is cell _TRANSPOSED[k] of x


def _lookup(allowed: dict[str, int]) -> np.ndarray:
    """uint8 [256]: character code -> value, 255 for characters that are not allowed."""
    table = np.full(256, 255, dtype=np.uint8)
    for ch, value in allowed.items():
        table[ord(ch)] = value
    return table


_QUESTION = _lookup({".": 0, **{str(d): d for d in range(10)}})
_ANSWER = _lookup({str(d): d for d in range(1, 10)})
_ALL_DIGITS = np.uint16(0b1111111110)
_PARSE_CHUNK = 1 << 18


def _unsolved(solutions: np.ndarray) -> np.ndarray:
    """Per grid: whether some row, column or box misses a digit (so repeats another)."""
    bad = np.zeros(len(solutions), dtype=bool)
    for start in range(0, len(solutions), _PARSE_CHUNK):
        digits = solutions[start : start + _PARSE_CHUNK].astype(np.uint16)
        bits = np.left_shift(np.uint16(1), digits).reshape(-1, 3, 3, 3, 3)  # grid, band, row, stack, column
        units = (
            [bits[:, :, :, s, c] for s in range(3) for c in range(3)],  # rows: OR over the 9 columns
            [bits[:, b, r] for b in range(3) for r in range(3)],  # columns: OR over the 9 rows
            [bits[:, :, r, :, c] for r in range(3) for c in range(3)],  # boxes: OR over their 9 cells
        )
        for parts in units:
            seen = parts[0].copy()
            for part in parts[1:]:
                seen |= part
            bad[start : start + _PARSE_CHUNK] |= (seen != _ALL_DIGITS).reshape(len(seen), -1).any(axis=1)
    return bad


def parse(rows: PuzzleRows) -> tuple[np.ndarray, np.ndarray]:
    """(puzzles, solutions) as uint8 [n, 81] cell values (0 = blank), after checking every row."""
    puzzles = _QUESTION[encode_fixed(rows.questions, SEQ_LEN, "the question", rows.where)]
    solutions = _ANSWER[encode_fixed(rows.answers, SEQ_LEN, "the answer", rows.where)]
    for values, strings, allowed, what in (
        (puzzles, rows.questions, ".0123456789", "question (digits 1-9, '.' or '0' for blanks)"),
        (solutions, rows.answers, "123456789", "answer (digits 1-9)"),
    ):
        i = bad_row(values.max(axis=1) == 255)
        if i is not None:
            raise TRMError(
                f"{rows.where(i)}: character {first_char_outside(strings[i], allowed)!r} is not allowed in the "
                f"{what}; fix or remove the row"
            )
    clash = bad_row(((puzzles != 0) & (puzzles != solutions)).any(axis=1))
    if clash is not None:
        cell = int(np.flatnonzero((puzzles[clash] != 0) & (puzzles[clash] != solutions[clash]))[0])
        raise TRMError(
            f"{rows.where(clash)}: the answer contradicts the question at row {cell // 9 + 1}, column "
            f"{cell % 9 + 1} (given {puzzles[clash, cell]}, answer {solutions[clash, cell]}); fix or remove the row"
        )
    i = bad_row(_unsolved(solutions))
    if i is not None:
        raise TRMError(
            f"{rows.where(i)}: the answer is not a solved sudoku (a row, column or box repeats a digit); "
            "fix or remove the row"
        )
    return puzzles, solutions


def difficulty_mask(rows: PuzzleRows, min_difficulty: int | None) -> np.ndarray | None:
    """Rows whose integer rating is at least `min_difficulty` (upstream's filter), None to keep all."""
    if min_difficulty is None:
        return None
    ratings = np.empty(len(rows.ratings), dtype=np.int64)
    for i, r in enumerate(rows.ratings):
        try:
            ratings[i] = int(r)
        except ValueError:
            raise TRMError(
                f"{rows.where(i)}: rating {r!r} is not an integer, which --min-difficulty needs; fix the row "
                "or leave out --min-difficulty"
            ) from None
    return ratings >= min_difficulty


def draw_shuffles(rng: np.random.RandomState, count: int) -> dict[str, np.ndarray]:
    """`count` random shuffles, drawn as upstream draws them: digit maps [count, 10] (blank fixed), transpose
    flags, row and column permutations [count, 9].

    Upstream's per-shuffle calls are `permutation(arange(1, 10))`, `rand()`, `permutation(3)` for the bands,
    one per band for its rows, then the same for stacks and columns. `permutation` is a copy shuffled in
    place, so shuffling rows of prefilled arrays consumes the generator identically, with less overhead.
    """
    digits = np.tile(np.arange(1, 10, dtype=np.int64), (count, 1))
    # per shuffle: bands, rows within bands 0..2, stacks, columns within stacks 0..2
    perms = np.tile(np.arange(3, dtype=np.int64), (count, 8, 1))
    coins = np.empty(count)
    shuffle, rand = rng.shuffle, rng.rand
    for i, (d, p) in enumerate(zip(digits, perms, strict=True)):
        shuffle(d)
        coins[i] = rand()
        for block in p:
            shuffle(block)
    digit_maps = np.zeros((count, 10), dtype=np.uint8)
    digit_maps[:, 1:] = digits
    rows = (perms[:, 0, :, None] * 3 + perms[:, 1:4]).reshape(count, 9)
    cols = (perms[:, 4, :, None] * 3 + perms[:, 5:8]).reshape(count, 9)
    return {"digit_maps": digit_maps, "transpose": coins < 0.5, "rows": rows, "cols": cols}


def recipes(n: int, num_aug: int, rng: np.random.RandomState) -> dict[str, np.ndarray]:
    """Per puzzle (original i, then its `num_aug` shuffles, for each i): origin, row/column permutations,
    transpose flag and token map (PAD and blank fixed; token d + 1 for digit d)."""
    total = n * (1 + num_aug)
    rows = np.tile(np.arange(9, dtype=np.uint8), (total, 1))
    cols = rows.copy()
    transpose = np.zeros(total, dtype=np.uint8)
    tokens = np.tile(np.arange(11, dtype=np.uint8), (total, 1))
    if num_aug:
        shuffles = draw_shuffles(rng, n * num_aug)
        augmented = (np.arange(total) % (1 + num_aug)) != 0
        rows[augmented] = shuffles["rows"]
        cols[augmented] = shuffles["cols"]
        transpose[augmented] = shuffles["transpose"]
        tokens[augmented, 2:] = shuffles["digit_maps"][:, 1:] + 1
    origin = np.repeat(np.arange(n, dtype=np.int32), 1 + num_aug)
    return {
        "puzzle_origin": origin,
        "puzzle_rows": rows,
        "puzzle_cols": cols,
        "puzzle_transpose": transpose,
        "puzzle_tokens": tokens,
    }


def materialize(
    originals: tuple[np.ndarray, np.ndarray], recipe: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Upstream's `inputs`/`labels` rows of every puzzle, rendered from the recipes in bounded blocks."""
    total = len(recipe["puzzle_origin"])
    out = {"inputs": np.empty((total, SEQ_LEN), np.uint8), "labels": np.empty((total, SEQ_LEN), np.uint8)}
    for start in range(0, total, _CHUNK):
        part = {k: v[start : start + _CHUNK] for k, v in recipe.items()}
        out["inputs"][start : start + _CHUNK], out["labels"][start : start + _CHUNK] = render_sudoku(
            *originals,
            part["puzzle_origin"],
            part["puzzle_rows"],
            part["puzzle_cols"],
            part["puzzle_transpose"],
            part["puzzle_tokens"],
        )
    return out


def build_sudoku_dataset(
    output_dir: str | Path,
    *,
    source_repo: str = DEFAULT_REPO,
    source_dir: str | Path | None = None,
    revision: str | None = None,
    subsample_size: int | None = None,
    min_difficulty: int | None = None,
    num_aug: int = 0,
    seed: int = 0,
    form: str = COMPACT,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Build a Sudoku dataset dir (compact: originals + recipes; materialized: upstream's layout) and return
    its manifest. Both forms give the loader the same rows.

    Deterministic in (CSV bytes, arguments, seed). An existing complete dataset with the same arguments and
    inputs is left as is; anything else at `output_dir` needs `overwrite`.
    """
    output_dir = Path(output_dir)
    check_sizes(subsample_size)
    if num_aug < 0:
        raise TRMError(f"--num-aug {num_aug}: must be at least 0")
    check_form(form)
    files = {
        split: resolve_split_file(split, source_repo=source_repo, source_dir=source_dir, revision=revision)
        for split in ("train", "test")
    }
    args = {
        "dataset": "sudoku",
        "subsample_size": subsample_size,
        "min_difficulty": min_difficulty,
        "num_aug": num_aug,
        "seed": seed,
        "form": form,
    }
    inputs = input_checksums(files)
    existing = existing_dataset(output_dir, args, inputs, overwrite=overwrite)
    if existing is not None:
        return existing
    rng = np.random.RandomState(seed)
    splits = {}
    for split in ("train", "test"):  # upstream's order: the train draws come first
        rows = read_rows(files[split])
        puzzles, solutions = parse(rows)
        keep = difficulty_mask(rows, min_difficulty)
        if keep is not None:
            puzzles, solutions = puzzles[keep], solutions[keep]
        if not len(puzzles):
            raise TRMError(f"{files[split]}: no puzzles left (empty file or --min-difficulty too high)")
        aug = 0
        if split == "train":
            picked = subsample(rng, len(puzzles), subsample_size)
            if picked is not None:
                puzzles, solutions = puzzles[picked], solutions[picked]
            aug = num_aug
        originals = (puzzles + 1, solutions + 1)  # tokens
        recipe = recipes(len(puzzles), aug, rng)
        if form == MATERIALIZED:
            arrays = materialize(originals, recipe)
        else:
            arrays = {"originals_inputs": originals[0], "originals_labels": originals[1], **recipe}
        total = len(recipe["puzzle_origin"])
        splits[split] = EncodedSplit(total=total, seq_len=SEQ_LEN, group_size=1 + aug, arrays=arrays)
    return write_dataset(
        output_dir,
        splits=splits,
        vocab_size=VOCAB_SIZE,
        builder=BUILDER,
        args=args,
        inputs=inputs,
        form=grid_form(form),
    )
