"""The `dataset.json` figures of the recipes' full datasets, for estimates before a dataset is built.

The launch's estimate reads the built dataset's own `train/` and `test/dataset.json`; before the data step
(a dry run on a fresh host, the docs' table of paper runs, `python -m tools.jobs check`) it uses these,
recorded from datasets `python -m trm data build-*` wrote. Only the keys the estimate reads are kept.
"""

from __future__ import annotations

from functools import cache
from typing import Any

_ARC = {"seq_len": 900, "vocab_size": 12}  # 30x30 grids
_ARC1_TRAIN = {**_ARC, "num_puzzle_identifiers": 876_406, "total_groups": 960,
               "mean_puzzle_examples": 4.146, "total_puzzles": 876_405}  # fmt: skip
_ARC2_TRAIN = {**_ARC, "num_puzzle_identifiers": 1_191_730, "total_groups": 1280,
               "mean_puzzle_examples": 4.332593232186176, "total_puzzles": 1_191_729}  # fmt: skip


@cache
def recorded() -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Dataset directory name -> (train, test) figures. Built on first use: the builders' constants come
    from trm.data, which needs numpy (the launcher's plan module is imported without it)."""
    from trm.data import maze, sudoku

    # Sudoku and Maze: one puzzle identifier; a group is a puzzle with its augmentations, and
    # `total_puzzles` counts groups as upstream's builder does (trm.data.grid_dataset): rows = total_puzzles.
    grid = {"num_puzzle_identifiers": 1, "mean_puzzle_examples": 1.0}
    sudoku_shape = {"seq_len": sudoku.SEQ_LEN, "vocab_size": sudoku.VOCAB_SIZE, **grid}
    maze_shape = {"seq_len": maze.SEQ_LEN, "vocab_size": maze.VOCAB_SIZE, **grid}
    return {
        # ARC-AGI-1 + ConceptARC, 1000 augmentations (TRM_SPEC §8.2).
        "arc1concept-aug-1000": (
            _ARC1_TRAIN,
            {**_ARC1_TRAIN, "total_groups": 400, "mean_puzzle_examples": 1.048, "total_puzzles": 368_150},
        ),
        # ARC-AGI-2 + ConceptARC, 1000 augmentations (build-arc, compact form).
        "arc2concept-aug-1000": (
            _ARC2_TRAIN,
            {
                **_ARC2_TRAIN,
                "total_groups": 120,
                "mean_puzzle_examples": 1.4346951147634845,
                "total_puzzles": 118_766,
            },
        ),
        # 1,000 puzzles x (1 + 1000 shuffles) train; the full 422,786-puzzle test split (docs/data.md).
        "sudoku-extreme-1k-aug-1000": (
            {**sudoku_shape, "total_groups": 1000, "total_puzzles": 1000},
            {**sudoku_shape, "total_groups": 422_786, "total_puzzles": 422_786},
        ),
        # 1,000 train and 1,000 test mazes, no augmentation.
        "maze-30x30-hard-1k": (
            {**maze_shape, "total_groups": 1000, "total_puzzles": 1000},
            {**maze_shape, "total_groups": 1000, "total_puzzles": 1000},
        ),
    }


def recorded_sizes(dataset: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(train, test) figures recorded for the dataset directory named `dataset`; None when not recorded."""
    return recorded().get(dataset)
