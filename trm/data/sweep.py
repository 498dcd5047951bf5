"""Scaling-study grids: every (train subsample size, augmentation factor) Sudoku dataset in one command.

Upstream's README sweeps `--subsample-size 100 250 500 1000 2000 5000` × `--num-aug 10 100 500 1000 2000`,
one `build_sudoku_dataset.py` run each. Here one process scans the CSVs once and shares the parsed test
split, the subsample permutation and the augmentation stream (`SudokuSource`): each build is then a prefix
of the largest one, written atomically with its manifest exactly as `build-sudoku` writes it (the same
flags give the same bytes); the test split, identical in every cell, is written once and hard-linked. Complete datasets with the same arguments and inputs are skipped, so an
interrupted sweep resumes where it stopped.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from trm.errors import TRMError

from .grid_dataset import COMPACT, check_form, check_sizes, existing_dataset
from .sudoku import DEFAULT_REPO, SudokuSource, build_sudoku_dataset, manifest_args, sudoku_files


def size_label(n: int) -> str:
    """Upstream's spelling of a size in directory names: 1000 -> 1k, 250 -> 250."""
    return f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n)


def sweep_dir_name(subsample_size: int, num_aug: int) -> str:
    """`sudoku-extreme-1k-aug-1000`, as upstream's README names its dataset dirs."""
    return f"sudoku-extreme-{size_label(subsample_size)}-aug-{num_aug}"


@dataclass(frozen=True)
class SweepResult:
    """One dataset of the grid: where it is and whether this run built it (False: already complete)."""

    subsample_size: int
    num_aug: int
    path: Path
    built: bool
    manifest: dict


def build_sweep(
    output_root: str | Path,
    *,
    subsample_sizes: list[int],
    num_augs: list[int],
    source_repo: str = DEFAULT_REPO,
    source_dir: str | Path | None = None,
    revision: str | None = None,
    min_difficulty: int | None = None,
    seed: int = 0,
    form: str = COMPACT,
    overwrite: bool = False,
    progress: bool = True,
) -> list[SweepResult]:
    """Build `<output_root>/sudoku-extreme-<size>-aug-<aug>` for every size × aug (grid order in the result)."""
    if not subsample_sizes or not num_augs:
        raise TRMError("build-sweep needs at least one --subsample-size and one --num-aug")
    for size in subsample_sizes:
        check_sizes(size)
    for aug in num_augs:
        if aug < 0:
            raise TRMError(f"--num-aug {aug}: must be at least 0")
    check_form(form)
    root = Path(output_root)
    names = [(size, aug) for size in dict.fromkeys(subsample_sizes) for aug in dict.fromkeys(num_augs)]
    source = SudokuSource(sudoku_files(source_repo, source_dir, revision))
    inputs = source.inputs()
    done: dict[tuple[int, int], dict] = {}
    for size, aug in names:
        args = manifest_args(size, min_difficulty, aug, seed, form)
        manifest = existing_dataset(
            root / sweep_dir_name(size, aug), args, inputs, overwrite=overwrite, flag="--output-root"
        )
        if manifest is not None:
            done[(size, aug)] = manifest
    # The largest build first: its augmentation draw is the one the smaller builds take prefixes of.
    kept = source.kept("train", min_difficulty)
    rows = len(source.tables["train"]) if kept is None else len(kept)
    todo = sorted((key for key in names if key not in done), key=lambda key: -min(key[0], rows) * key[1])
    results = {key: SweepResult(*key, root / sweep_dir_name(*key), False, done[key]) for key in done}
    bar = tqdm(
        total=len(names),
        initial=len(done),
        desc="build-sweep",
        unit="dataset",
        disable=not progress,
        file=sys.stderr,
    )
    with bar:
        for size, aug in todo:
            path = root / sweep_dir_name(size, aug)
            bar.set_postfix_str(path.name)
            manifest = build_sudoku_dataset(
                path,
                subsample_size=size,
                min_difficulty=min_difficulty,
                num_aug=aug,
                seed=seed,
                form=form,
                overwrite=overwrite,
                source=source,
                flag="--output-root",
            )
            results[(size, aug)] = SweepResult(size, aug, path, True, manifest)
            bar.update()
    return [results[key] for key in names]
