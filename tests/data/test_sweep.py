"""`python -m trm data build-sweep`: the scaling grid equals one build-sudoku per cell, resumes, refuses bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.data.grid_fixtures import sudoku_source
from trm.data.manifest import MANIFEST
from trm.data.sudoku import build_sudoku_dataset
from trm.data.sweep import build_sweep, sweep_dir_name
from trm.errors import TRMError

ROOT = Path(__file__).resolve().parents[2]


def files(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_names_follow_upstreams_readme():
    assert sweep_dir_name(1000, 1000) == "sudoku-extreme-1k-aug-1000"
    assert sweep_dir_name(250, 10) == "sudoku-extreme-250-aug-10"
    assert sweep_dir_name(5000, 2000) == "sudoku-extreme-5k-aug-2000"


@pytest.mark.parametrize("form", ["compact", "materialized"])
def test_every_cell_equals_its_own_build_and_a_rerun_skips_them(tmp_path, form):
    src = sudoku_source(tmp_path / "src", train=30, test=4)
    results = build_sweep(
        tmp_path / "grid",
        subsample_sizes=[5, 40],
        num_augs=[0, 3, 7],
        source_dir=src,
        form=form,
        progress=False,
    )
    assert [(r.subsample_size, r.num_aug, r.built) for r in results] == [
        (5, 0, True),
        (5, 3, True),
        (5, 7, True),
        (40, 0, True),
        (40, 3, True),
        (40, 7, True),
    ]
    for r in results:
        alone = tmp_path / "alone" / r.path.name
        build_sudoku_dataset(
            alone, source_dir=src, subsample_size=r.subsample_size, num_aug=r.num_aug, form=form
        )
        ours = files(r.path)
        # the manifest records build time; every data file and the arguments are identical
        assert {k: v for k, v in ours.items() if k != MANIFEST} == {
            k: v for k, v in files(alone).items() if k != MANIFEST
        }
        assert (
            r.manifest["fingerprint"]
            == __import__("json").loads((alone / MANIFEST).read_text())["fingerprint"]
        )
    # the test split is written once and hard-linked into the other cells (same file system)
    for name in ("dataset.json", "all__puzzle_indices.npy"):
        assert len({(r.path / "test" / name).stat().st_ino for r in results}) == 1
    mtimes = {r.path: (r.path / MANIFEST).stat().st_mtime_ns for r in results}
    import shutil

    (results[2].path / MANIFEST).unlink()  # without its manifest a folder is not known to be ours: kept
    with pytest.raises(TRMError, match=r"sudoku-extreme-5-aug-7: refusing to replace it: .*no manifest"):
        build_sweep(
            tmp_path / "grid",
            subsample_sizes=[5],
            num_augs=[7],
            source_dir=src,
            form=form,
            overwrite=True,
            progress=False,
        )
    assert (results[2].path / "train").is_dir()
    shutil.rmtree(results[2].path)  # a cell that was never published is built, the others are skipped
    again = build_sweep(
        tmp_path / "grid",
        subsample_sizes=[5, 40],
        num_augs=[0, 3, 7],
        source_dir=src,
        form=form,
        overwrite=True,
        progress=False,
    )
    assert [r.built for r in again] == [False, False, True, False, False, False]
    assert all((r.path / MANIFEST).stat().st_mtime_ns == mtimes[r.path] for r in again if not r.built)


def test_bad_grids_and_foreign_dirs_are_refused_before_building(tmp_path):
    src = sudoku_source(tmp_path / "src", train=10, test=2)
    with pytest.raises(TRMError, match="--subsample-size 0: must be at least 1"):
        build_sweep(tmp_path / "g", subsample_sizes=[0], num_augs=[1], source_dir=src, progress=False)
    with pytest.raises(TRMError, match="--num-aug -1: must be at least 0"):
        build_sweep(tmp_path / "g", subsample_sizes=[3], num_augs=[-1], source_dir=src, progress=False)
    (tmp_path / "g" / sweep_dir_name(3, 2)).mkdir(parents=True)
    with pytest.raises(TRMError, match="sudoku-extreme-3-aug-2: already exists") as err:
        build_sweep(tmp_path / "g", subsample_sizes=[3], num_augs=[1, 2], source_dir=src, progress=False)
    assert str(err.value).endswith("choose another --output-root")  # the sweep's flag, not build-sudoku's
    (tmp_path / "g" / sweep_dir_name(3, 2) / "notes.txt").write_text("mine")
    with pytest.raises(TRMError, match=r"^--output-root .*sudoku-extreme-3-aug-2: refusing to replace it"):
        build_sweep(tmp_path / "g", subsample_sizes=[3], num_augs=[2], source_dir=src, progress=False)
    assert sorted(p.name for p in (tmp_path / "g").iterdir()) == ["sudoku-extreme-3-aug-2"]
    assert [p.name for p in (tmp_path / "g" / sweep_dir_name(3, 2)).iterdir()] == ["notes.txt"]


def test_command_line(tmp_path):
    src = sudoku_source(tmp_path / "src", train=8, test=2)
    cmd = [
        sys.executable,
        "-m",
        "trm",
        "data",
        "build-sweep",
        "--dataset",
        "sudoku",
        "--subsample-size",
        "2",
        "4",
    ]
    cmd += ["--num-aug", "1", "2", "--output-root", str(tmp_path / "g"), "--source-dir", str(src)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    assert run.returncode == 0, run.stderr
    assert (
        "4 built, 0 skipped" in run.stdout
        and "sudoku-extreme-4-aug-2: 4 puzzles x 3 = 12 train puzzles" in run.stdout
    )
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    assert "0 built, 4 skipped" in run.stdout
