"""Kill `trm data audit` before each of its filesystem mutations (tests/faults/harness.py): an earlier audit
folder stays whole until the new one replaces it, and the next audit writes what an uninterrupted one does."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.data.test_audit import build, planted  # noqa: F401  (tiny raw tasks with planted overlaps)
from tests.faults.harness import sweep
from trm.commands import main

pytestmark = pytest.mark.e2e


def test_audit_killed_anywhere_keeps_the_earlier_audit_whole(
    planted: dict,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def audit(dataset: Path, out: Path) -> tuple[int, str]:
        capsys.readouterr()
        argv = [
            "data",
            "audit",
            str(dataset),
            "--out",
            str(out),
            "--input-file-prefix",
            str(planted["prefix"]),
        ]
        code = main([*argv, "--quiet"])
        return code, capsys.readouterr().err

    earlier = tmp_path / "earlier"  # made once: the audit of an earlier build
    assert audit(build(planted, "ds-earlier", num_aug=1), earlier / "audit")[0] == 0
    dataset = build(planted, "ds-sweep")
    result = sweep(
        tmp_path / "root",
        lambda root: shutil.copytree(earlier, root, dirs_exist_ok=True),
        lambda root: audit(dataset, root / "audit"),
        atomic=("audit",),
    )
    print(f"data audit: {result.killed} kills of {result.mutations} mutations in {result.seconds:.1f} s")
