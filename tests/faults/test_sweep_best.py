"""Kill `trm best` before each of its filesystem mutations (tests/faults/harness.py): run.json and best.json
are always whole, old or new, never lose a field, and the next run records what an uninterrupted one does."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.faults.harness import sweep
from tests.training.checkpointing.test_best import SCORES, SUB, cli_full_set, write  # noqa: F401
from trm.commands import main
from trm.runlock import LOCK_FILE

pytestmark = pytest.mark.e2e


@pytest.mark.usefixtures("cli_full_set")
def test_best_killed_anywhere_keeps_run_json_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    template = tmp_path / "run"  # made once: a manifest records when it was written
    for step, (sub, _full) in SCORES.items():
        write(template, step, {SUB: sub, f"{SUB}/wilson_low": sub - 0.1, f"{SUB}/wilson_high": sub + 0.1})
    (template / "run.json").write_text(json.dumps({"config": {"seed": 0}, "total_steps": 400}, indent=2))
    assert main(["best", str(template), "--top-k", "2"]) == 0  # an earlier choice, in best.json and run.json
    # The lock's holder record is rewritten in place by design (trm/runlock.py: the lock is the inode's) and
    # read only while the lock is held: not compared.
    (template / LOCK_FILE).unlink()

    def setup(root: Path) -> None:
        shutil.copytree(template, root / "run")

    def best(root: Path) -> tuple[int, str]:
        capsys.readouterr()
        code = main(["best", str(root / "run"), "--top-k", "3"])
        return code, capsys.readouterr().err

    result = sweep(
        tmp_path / "root",
        setup,
        best,
        normalize=lambda rel, data: b"" if rel.endswith(LOCK_FILE) else data,
    )
    print(f"best: {result.killed} kills of {result.mutations} mutations in {result.seconds:.1f} s")
