"""Kill `trm data build-arc` before each of its filesystem mutations (tests/faults/harness.py): the dataset
it replaces stays whole until the new one is there, and the next build ends as an uninterrupted one."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.harness import sampled_inside, sweep
from trm.commands import main

pytestmark = pytest.mark.e2e

BUILD_ARC = ["data", "build-arc", "--subsets", "training2", "evaluation2", "--test-set-name", "evaluation2",
             "--max-puzzles", "2", "--quiet"]  # fmt: skip


# Two thirds of the build's points lie inside its staging folder (`.d.<host>-<pid>.<random>.partial/`): one in
# four of them is killed (26 kills in 16 s instead of 86 in 54 s here), every point outside it (fsyncs aside).
EVERY_POINT_BUT_A_SAMPLE_INSIDE_THE_STAGING_FOLDER = sampled_inside(".partial/", 4)


def test_build_arc_overwrite_killed_anywhere_keeps_a_whole_dataset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def build(root: Path, *flags: str) -> tuple[int, str]:
        capsys.readouterr()
        code = main([*BUILD_ARC, "--output-dir", str(root / "d"), *flags])
        return code, capsys.readouterr().err

    def earlier(root: Path) -> None:
        assert build(root, "--num-aug", "2")[0] == 0

    result = sweep(
        tmp_path / "root",
        earlier,
        lambda root: build(root, "--num-aug", "1", "--overwrite"),
        atomic=("d",),
        select=EVERY_POINT_BUT_A_SAMPLE_INSIDE_THE_STAGING_FOLDER,
    )
    print(f"build-arc: {result.killed} kills of {result.mutations} mutations in {result.seconds:.1f} s")
