"""Kill `trm report` before each of its filesystem mutations (tests/faults/harness.py): an earlier report
stays whole until the new one replaces it, and the next run writes the report an uninterrupted run writes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.faults.harness import sampled_inside, sweep
from tests.report.runs import recipe_config, write_run
from trm.commands import main

pytestmark = pytest.mark.e2e


def test_report_killed_anywhere_keeps_the_earlier_report_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    template = tmp_path / "template"  # two runs and an earlier report of one of them, made once
    for n in (2, 1):
        config = recipe_config("debug-tiny", f"arch.L_cycles={n}", run_name=f"L{n}")
        write_run(template / "runs" / f"L{n}", config, steps=10)

    def report(root: Path, *names: str) -> tuple[int, str]:
        capsys.readouterr()
        code = main(["report", *(str(root / "runs" / n) for n in names), "--out", str(root / "out")])
        return code, capsys.readouterr().err

    assert report(template, "L2")[0] == 0
    result = sweep(
        tmp_path / "root",
        lambda root: shutil.copytree(template, root, dirs_exist_ok=True),
        lambda root: report(root, "L2", "L1"),
        atomic=("out",),
        # the report's points are all inside its staging folder but the first: one in eight of them (6 kills
        # of 31 in 6 s here), among them the removal of the earlier report the exchange moved into it
        select=sampled_inside(".partial", 8),
    )
    print(f"report: {result.killed} kills of {result.mutations} mutations in {result.seconds:.1f} s")
