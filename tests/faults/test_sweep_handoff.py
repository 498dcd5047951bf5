"""Kill `trm handoff` before each of its filesystem mutations (tests/faults/harness.py): an earlier bundle
stays whole until the new one replaces it, and the next run writes the bundle an uninterrupted run writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.harness import sweep
from tests.launch.handoff.test_handoff import synthetic_run
from trm.commands import main
from trm.launch.handoff.handoff import build_bundle

pytestmark = pytest.mark.e2e


def test_handoff_killed_anywhere_keeps_the_earlier_bundle_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def setup(root: Path) -> None:
        run = synthetic_run(root)
        build_bundle(run, root / "bundle")  # an earlier handoff of the same run, then the run went on
        with (run / "metrics.csv").open("a") as f:
            f.write("202,1302,train/lm_loss,0.5\n")

    def handoff(root: Path) -> tuple[int, str]:
        capsys.readouterr()
        code = main(["handoff", str(root / "checkpoints" / "trm-arc2"), "--out", str(root / "bundle")])
        return code, capsys.readouterr().err

    result = sweep(tmp_path / "root", setup, handoff, atomic=("bundle",))
    print(f"handoff: {result.killed} kills of {result.mutations} mutations in {result.seconds:.1f} s")
