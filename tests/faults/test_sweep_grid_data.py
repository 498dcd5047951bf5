"""Kill `trm data build-sudoku` / `build-maze --overwrite` before each of their filesystem mutations
(tests/faults/harness.py): the dataset they replace stays whole until the new one is there, and the next
build ends as an uninterrupted one."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.data.grid_fixtures import maze_source, sudoku_source
from tests.faults.harness import sampled_inside, sweep
from trm.commands import main

pytestmark = pytest.mark.e2e

# command -> (the CSV fixture, the earlier build's flags, the replacing build's flags)
BUILDS = {
    "build-sudoku": (sudoku_source, ["--num-aug", "1"], ["--num-aug", "2"]),
    "build-maze": (maze_source, ["--no-aug"], ["--aug", "--form", "materialized"]),
}


@pytest.mark.parametrize("command", sorted(BUILDS))
def test_grid_dataset_overwrite_killed_anywhere_keeps_a_whole_dataset(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, earlier, replacing = BUILDS[command]
    csvs = source(tmp_path / "csv")

    def build(root: Path, flags: list[str]) -> tuple[int, str]:
        capsys.readouterr()
        code = main(["data", command, "--output-dir", str(root / "d"), "--source-dir", str(csvs), *flags])
        return code, capsys.readouterr().err

    result = sweep(
        tmp_path / "root",
        lambda root: None if build(root, earlier)[0] == 0 else pytest.fail("the earlier build failed"),
        lambda root: build(root, [*replacing, "--overwrite"]),
        atomic=("d",),
        # one in four points inside the staging folder, every point outside it (87 kills in 10 s -> 31 in 4 s
        # for build-sudoku here)
        select=sampled_inside(".partial/", 4),
    )
    print(f"{command}: {result.killed} kills of {result.mutations} mutations in {result.seconds:.1f} s")
