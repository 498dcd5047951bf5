"""Maze-Hard builder (TRM_SPEC §8.4): upstream's semantics, seeded, atomic, manifest last.

Characters `#`, space, `S`, `G`, `o` (wall, open, start, goal, path) are tokens 1..5 with PAD 0:
`vocab_size` 6, `seq_len` 900 (30×30, row-major), ignore label 0. With `aug`, every train maze is a group
of its 8 dihedral transforms (upstream's ids 0..7, identity first); otherwise a group of one.
The only random draw is the train subsample, from `numpy.random.RandomState(seed)` as upstream draws it
from numpy's global RNG.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import trm
from trm.errors import TRMError

from .csv_source import PuzzleRows, input_checksums, resolve_split_file, scan
from .grid_dataset import (
    COMPACT,
    MATERIALIZED,
    EncodedSplit,
    bad_row,
    chars_outside,
    check_form,
    check_sizes,
    existing_dataset,
    first_char_outside,
    grid_form,
    subsample,
    write_dataset,
)
from .grid_recipes import dihedral_sources, render_maze

DEFAULT_REPO = "sapientinc/maze-30x30-hard-1k"
BUILDER = f"trm-stack {trm.__version__} build-maze"
CHARSET = "# SGo"
SIDE = 30
SEQ_LEN = SIDE * SIDE
VOCAB_SIZE = len(CHARSET) + 1
_TOKENS = np.zeros(256, dtype=np.uint8)
_TOKENS[np.frombuffer(CHARSET.encode(), dtype=np.uint8)] = np.arange(1, len(CHARSET) + 1)
# [8, 900]: for each dihedral id, which original cell each transformed cell comes from
_DIHEDRAL = dihedral_sources(SIDE)


def parse(rows: PuzzleRows) -> tuple[np.ndarray, np.ndarray]:
    """(mazes, solutions) as uint8 [n, 900] tokens, after checking every row."""
    q, a = rows.questions, rows.answers
    for codes, name in ((q, "question"), (a, "answer")):
        i = bad_row(chars_outside(codes, CHARSET))
        if i is not None:
            raise TRMError(
                f"{rows.where(i)}: character {first_char_outside(codes[i], CHARSET)!r} in the {name} is not one "
                f"of {CHARSET!r} (wall, open, start, goal, path); fix or remove the row"
            )
    # A solution marks open cells of its maze as path and changes nothing else.
    contradicts = (q != a) & ~((q == ord(" ")) & (a == ord("o")))
    i = bad_row(contradicts.any(axis=1))
    if i is not None:
        cell = int(np.flatnonzero(contradicts[i])[0])
        raise TRMError(
            f"{rows.where(i)}: the answer contradicts the maze at row {cell // SIDE + 1}, column {cell % SIDE + 1} "
            f"({chr(q[i, cell])!r} became {chr(a[i, cell])!r}; an answer may only turn ' ' into 'o'); "
            "fix or remove the row"
        )
    return _TOKENS[q], _TOKENS[a]


def build_maze_dataset(
    output_dir: str | Path,
    *,
    source_repo: str = DEFAULT_REPO,
    source_dir: str | Path | None = None,
    revision: str | None = None,
    subsample_size: int | None = None,
    aug: bool = False,
    seed: int = 0,
    form: str = COMPACT,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Build a Maze dataset dir (compact: originals + dihedral ids; materialized: upstream's layout) and return
    its manifest. Both forms give the loader the same rows.

    Deterministic in (CSV bytes, arguments, seed). An existing complete dataset with the same arguments and
    inputs is left as is; anything else at `output_dir` needs `overwrite`.
    """
    output_dir = Path(output_dir)
    check_sizes(subsample_size)
    check_form(form)
    files = {
        split: resolve_split_file(split, source_repo=source_repo, source_dir=source_dir, revision=revision)
        for split in ("train", "test")
    }
    args = {
        "dataset": "maze",
        "subsample_size": subsample_size,
        "aug": aug,
        "seed": seed,
        "form": form,
    }
    tables = {split: scan(path, SEQ_LEN, f" (a {SIDE}x{SIDE} maze)") for split, path in files.items()}
    inputs = input_checksums(tables)
    existing = existing_dataset(output_dir, args, inputs, overwrite=overwrite)
    if existing is not None:
        return existing
    rng = np.random.RandomState(seed)
    splits = {}
    for split in ("train", "test"):
        mazes, solutions = parse(tables[split].take())
        if not len(mazes):
            raise TRMError(f"{files[split]}: holds no mazes; use the hub dataset's {split}.csv")
        tids = [0]
        if split == "train":
            picked = subsample(rng, len(mazes), subsample_size)
            if picked is not None:
                mazes, solutions = mazes[picked], solutions[picked]
            if aug:
                tids = list(range(8))
        total = len(mazes) * len(tids)
        recipe = {
            "puzzle_origin": np.repeat(np.arange(len(mazes), dtype=np.int32), len(tids)),
            "puzzle_dihedral": np.tile(np.array(tids, dtype=np.uint8), len(mazes)),
        }
        if form == MATERIALIZED:
            inputs_rows, labels_rows = render_maze(
                mazes, solutions, recipe["puzzle_origin"], recipe["puzzle_dihedral"], _DIHEDRAL
            )
            arrays = {"inputs": inputs_rows, "labels": labels_rows}
        else:
            arrays = {"originals_inputs": mazes, "originals_labels": solutions, **recipe}
        splits[split] = EncodedSplit(total=total, seq_len=SEQ_LEN, group_size=len(tids), arrays=arrays)
    return write_dataset(
        output_dir,
        splits=splits,
        vocab_size=VOCAB_SIZE,
        builder=BUILDER,
        args=args,
        inputs=inputs,
        form=grid_form(form),
    )
