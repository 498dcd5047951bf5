"""Sudoku-Extreme builder (TRM_SPEC §8.3): upstream's semantics, seeded, atomic, manifest last.

Tokens: PAD 0, then cell value + 1 (blank 1, digits 2..10): `vocab_size` 11, `seq_len` 81, ignore label 0.
Each original puzzle is a group of `1 + num_aug` single-example puzzles (train only): the original, then
`num_aug` random validity-preserving shuffles (digit permutation with blank kept, transpose with
probability 1/2, band and row-within-band permutation, stack and column-within-stack permutation).

Random draws come from `numpy.random.RandomState(seed)` in upstream's order (train subsample, then per
augmentation: digits, transpose, bands and their rows, stacks and their columns), so a build equals
upstream's when upstream's global numpy RNG is seeded with the same value (`sudoku_draws` makes them in
bulk). The CSVs are scanned once (`csv_source.scan`) and only the rows used are parsed. The compact form
stores the originals and each puzzle's shuffle (`grid_recipes`); materializing renders them, vectorized.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import trm
from trm.errors import TRMError

from .csv_source import SPLIT_FILES, PuzzleCsv, PuzzleRows, input_checksums, resolve_split_file, scan
from .grid_dataset import (
    COMPACT,
    MATERIALIZED,
    EncodedSplit,
    LinkedSplit,
    bad_row,
    check_form,
    check_sizes,
    existing_dataset,
    first_char_outside,
    grid_form,
    write_dataset,
)
from .grid_recipes import render_sudoku
from .sudoku_draws import draw_shuffles

DEFAULT_REPO = "sapientinc/sudoku-extreme"
BUILDER = f"trm-stack {trm.__version__} build-sudoku"
SEQ_LEN = 81
VOCAB_SIZE = 11  # PAD + values 0 (blank) .. 9
_CHUNK = 1 << 16  # puzzles rendered per vectorized block (bounds the index arrays' memory)


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


def _units() -> np.ndarray:
    """float32 [81, 27]: which cells make up each row, column and box."""
    cell = np.arange(81)
    row, col = cell // 9, cell % 9
    member = np.zeros((81, 27), dtype=np.float32)
    member[cell, row] = member[cell, 9 + col] = member[cell, 18 + (row // 3) * 3 + col // 3] = 1
    return member


_UNITS = _units()
_DIGIT_BITS = (2.0 ** np.arange(10)).astype(np.float32)


def _unsolved(solutions: np.ndarray) -> np.ndarray:
    """Per grid: whether some row, column or box misses a digit (so repeats another).

    A unit holds each digit once exactly when the sum of its nine cells' 2**digit is 2 + 4 + ... + 512:
    nine powers of two reach a sum with nine one bits only as nine distinct powers."""
    bad = np.zeros(len(solutions), dtype=bool)
    for start in range(0, len(solutions), _PARSE_CHUNK):
        sums = _DIGIT_BITS[solutions[start : start + _PARSE_CHUNK]] @ _UNITS  # exact in float32
        bad[start : start + _PARSE_CHUNK] = (sums != _ALL_DIGITS).any(axis=1)
    return bad


def parse(rows: PuzzleRows) -> tuple[np.ndarray, np.ndarray]:
    """(puzzles, solutions) as uint8 [n, 81] cell values (0 = blank), after checking every row."""
    puzzles, solutions = _QUESTION[rows.questions], _ANSWER[rows.answers]
    for values, codes, allowed, what in (
        (puzzles, rows.questions, ".0123456789", "question (digits 1-9, '.' or '0' for blanks)"),
        (solutions, rows.answers, "123456789", "answer (digits 1-9)"),
    ):
        i = bad_row(values.max(axis=1) == 255)
        if i is not None:
            raise TRMError(
                f"{rows.where(i)}: character {first_char_outside(codes[i], allowed)!r} is not allowed in the "
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


def recipes(n: int, num_aug: int, shuffles: dict[str, np.ndarray] | None) -> dict[str, np.ndarray]:
    """Per puzzle (original i, then its `num_aug` shuffles, for each i): origin, row/column permutations,
    transpose flag and token map (PAD and blank fixed; token d + 1 for digit d). `shuffles` holds at least
    n * num_aug draws of `draw_shuffles`; the first ones are used."""
    total = n * (1 + num_aug)
    rows = np.tile(np.arange(9, dtype=np.uint8), (total, 1))
    cols = rows.copy()
    transpose = np.zeros(total, dtype=np.uint8)
    tokens = np.tile(np.arange(11, dtype=np.uint8), (total, 1))
    if num_aug:
        used = n * num_aug
        augmented = (np.arange(total) % (1 + num_aug)) != 0
        rows[augmented] = shuffles["rows"][:used]
        cols[augmented] = shuffles["cols"][:used]
        transpose[augmented] = shuffles["transpose"][:used]
        tokens[augmented, 2:] = shuffles["digit_maps"][:used, 1:] + 1
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


class SudokuSource:
    """The scanned train/test CSVs of one source, and what builds from it can share (`build-sweep` makes many
    builds from one source): the parsed rows, the train subsample draw and the augmentation draws.

    Every build seeds `RandomState(seed)` and, as upstream, draws the train subsample first (legacy
    `choice` without replacement: a permutation of all rows, cut to size, so its draws do not depend on the
    size), then the augmentations; so builds with the same seed and row count share one permutation and one
    stream of augmentations, of which each takes a prefix.
    """

    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files
        self.tables: dict[str, PuzzleCsv] = {split: scan(path, SEQ_LEN) for split, path in files.items()}
        self._kept: dict[tuple[str, int | None], np.ndarray | None] = {}
        self._parsed: dict[tuple[str, int | None], tuple[np.ndarray, np.ndarray]] = {}
        self._draws: dict[tuple[int, int | None], tuple[np.ndarray | None, np.random.RandomState]] = {}
        self._shuffles: dict[tuple[int, int | None], dict[str, np.ndarray]] = {}
        self.written: dict[tuple[int | None, str], LinkedSplit] = {}  # test split of a build, by its flags

    def inputs(self) -> dict[str, str]:
        return input_checksums(self.tables)

    def kept(self, split: str, min_difficulty: int | None) -> np.ndarray | None:
        """Rows whose integer rating is at least `min_difficulty` (upstream's filter), None to keep all."""
        key = (split, min_difficulty)
        if key not in self._kept:
            table = self.tables[split]
            self._kept[key] = (
                None if min_difficulty is None else np.flatnonzero(table.ratings() >= min_difficulty)
            )
        return self._kept[key]

    def rows(self, split: str, min_difficulty: int | None, picked: np.ndarray | None = None) -> PuzzleRows:
        kept = self.kept(split, min_difficulty)
        if picked is not None:
            kept = picked if kept is None else kept[picked]
        return self.tables[split].take(kept)

    def parsed(self, split: str, min_difficulty: int | None) -> tuple[np.ndarray, np.ndarray]:
        """(puzzles, solutions) of every kept row (the test split, which no build subsamples)."""
        key = (split, min_difficulty)
        if key not in self._parsed:
            self._parsed[key] = parse(self.rows(split, min_difficulty))
        return self._parsed[key]

    def subsample(self, seed: int, count: int, size: int | None) -> tuple[np.ndarray | None, tuple]:
        """Upstream's train subsample of `size` of `count` rows (None: all), and the key of the generator state
        after it (for `shuffles`)."""
        if size is None or size >= count:
            return None, (seed, None)
        key = (seed, count)
        if key not in self._draws:
            rng = np.random.RandomState(seed)
            self._draws[key] = (rng.choice(count, size=count, replace=False), rng)
        return self._draws[key][0][:size], key

    def shuffles(self, key: tuple, count: int) -> dict[str, np.ndarray]:
        """The first `count` (at least) augmentations drawn after the subsample `key`."""
        have = self._shuffles.get(key)
        if have is None or len(have["transpose"]) < count:
            if key[1] is None:
                rng = np.random.RandomState(key[0])
            else:
                rng = np.random.RandomState()
                rng.set_state(self._draws[key][1].get_state())
            self._shuffles[key] = draw_shuffles(rng, count)
        return self._shuffles[key]

    def reserve(self, key: tuple, count: int) -> None:
        """Draw `count` augmentations at once for later, smaller requests (a sweep asks for its largest first)."""
        self.shuffles(key, count)


def sudoku_files(
    source_repo: str = DEFAULT_REPO, source_dir: str | Path | None = None, revision: str | None = None
) -> dict[str, Path]:
    return {
        split: resolve_split_file(split, source_repo=source_repo, source_dir=source_dir, revision=revision)
        for split in SPLIT_FILES
    }


def manifest_args(
    subsample_size: int | None, min_difficulty: int | None, num_aug: int, seed: int, form: str
) -> dict[str, Any]:
    """The manifest's `args` of a build (what a rebuild must match to be skipped)."""
    return {
        "dataset": "sudoku",
        "subsample_size": subsample_size,
        "min_difficulty": min_difficulty,
        "num_aug": num_aug,
        "seed": seed,
        "form": form,
    }


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
    source: SudokuSource | None = None,
    flag: str = "--output-dir",
) -> dict[str, Any]:
    """Build a Sudoku dataset dir (compact: originals + recipes; materialized: upstream's layout) and return
    its manifest. Both forms give the loader the same rows. `source` (already scanned CSVs, shared by several
    builds) replaces the source flags.

    Deterministic in (CSV bytes, arguments, seed). An existing complete dataset with the same arguments and
    inputs is left as is; anything else at `output_dir` needs `overwrite`. Every CSV row's shape is checked;
    the rows that go into the dataset are checked in full (characters, answer solves the question). `flag`:
    what the caller's user calls `output_dir` (a sweep's `--output-root`), named by a refusal.
    """
    output_dir = Path(output_dir)
    check_sizes(subsample_size)
    if num_aug < 0:
        raise TRMError(f"--num-aug {num_aug}: must be at least 0")
    check_form(form)
    if source is None:
        source = SudokuSource(sudoku_files(source_repo, source_dir, revision))
    args = manifest_args(subsample_size, min_difficulty, num_aug, seed, form)
    inputs = source.inputs()
    existing = existing_dataset(output_dir, args, inputs, overwrite=overwrite, flag=flag)
    if existing is not None:
        return existing
    splits = {}
    for split in ("train", "test"):  # upstream's order: the train draws come first
        kept = source.kept(split, min_difficulty)
        count = len(source.tables[split]) if kept is None else len(kept)
        if not count:
            raise TRMError(
                f"{source.files[split]}: no puzzles left (empty file or --min-difficulty too high)"
            )
        aug, shuffles = 0, None
        if split == "train":
            picked, key = source.subsample(seed, count, subsample_size)
            puzzles, solutions = parse(source.rows(split, min_difficulty, picked))
            aug = num_aug
            shuffles = source.shuffles(key, len(puzzles) * aug) if aug else None
        else:
            earlier = source.written.get((min_difficulty, form))
            if earlier is not None and earlier.complete(split):  # the same test split: link its files
                splits[split] = earlier
                continue
            puzzles, solutions = source.parsed(split, min_difficulty)
        originals = (puzzles + 1, solutions + 1)  # tokens
        recipe = recipes(len(puzzles), aug, shuffles)
        if form == MATERIALIZED:  # without augmentations every recipe is the identity
            arrays = (
                materialize(originals, recipe) if aug else {"inputs": originals[0], "labels": originals[1]}
            )
        else:
            arrays = {"originals_inputs": originals[0], "originals_labels": originals[1], **recipe}
        total = len(recipe["puzzle_origin"])
        splits[split] = EncodedSplit(total=total, seq_len=SEQ_LEN, group_size=1 + aug, arrays=arrays)
    manifest = write_dataset(
        output_dir,
        splits=splits,
        vocab_size=VOCAB_SIZE,
        builder=BUILDER,
        args=args,
        inputs=inputs,
        form=grid_form(form),
        flag=flag,
    )
    source.written.setdefault((min_difficulty, form), LinkedSplit(output_dir, manifest))
    return manifest
