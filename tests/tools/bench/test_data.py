"""The data benchmark's Sudoku/Maze mode on generated CSVs (the ARC mode runs in `nox -s bench`)."""

from __future__ import annotations

import pytest

from tests.data.grid_fixtures import maze_source, sudoku_source
from tools.bench.data import main


@pytest.mark.parametrize("dataset", ["sudoku", "maze"])
def test_grid_datasets_build_and_load(dataset, tmp_path, capsys):
    source = (sudoku_source if dataset == "sudoku" else maze_source)(tmp_path / "csv")
    keep = tmp_path / "keep"
    argv = ["--dataset", dataset, "--source-dir", str(source), "--batch-size", "4", "--loader-batches", "3"]
    assert main([*argv, "--keep", str(keep), "--upstream", "", "--num-aug", "2"]) == 0
    out = capsys.readouterr().out
    for form in ("compact", "materialized"):
        row = next(line for line in out.splitlines() if line.startswith(f"trm {form}"))
        assert float(row.split()[-2].replace(",", "")) > 0  # loader examples/s
        assert (keep / form / "manifest.json").is_file()
    with pytest.raises(SystemExit):
        main(["--dataset", dataset])  # no --source-dir: the benchmark never downloads
    assert "needs --source-dir DIR" in capsys.readouterr().err
