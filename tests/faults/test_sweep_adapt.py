"""Kill `trm adapt` before each of its filesystem mutations (tests/faults/harness.py): the next run of the
same command resumes the folder and ends where an uninterrupted adaptation ends."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adapt.generated import write_tasks
from tests.faults.harness import sweep
from tests.helpers import SmokeCheckpoint, make_smoke
from trm.commands import main

pytestmark = pytest.mark.e2e

# Compared byte for byte after the next run; the trainer's own files (times, the lock's holder) by name only.
SAME_BYTES = (".trm-created", "inputs/", "dataset/")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> SmokeCheckpoint:
    return make_smoke(tmp_path_factory.mktemp("adapt"))


def test_adapt_killed_anywhere_is_resumed_by_the_same_command(
    smoke: SmokeCheckpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hidden = write_tasks(tmp_path / "hidden", "hidden", 3, seed=5, colours=4)

    def adapt(root: Path) -> tuple[int, str]:
        capsys.readouterr()
        argv = ["adapt", str(smoke.checkpoint), "--challenges", str(hidden), "--out", str(root / "out"),
                "--steps", "0", "--num-aug", "1", "--quiet"]  # fmt: skip
        code = main(argv)
        return code, capsys.readouterr().err

    result = sweep(
        tmp_path / "root",
        lambda root: None,
        adapt,
        normalize=lambda rel, data: data if rel.removeprefix("out/").startswith(SAME_BYTES) else b"",
    )
    print(f"adapt: {result.killed} kills of {result.mutations} mutations in {result.seconds:.1f} s")
