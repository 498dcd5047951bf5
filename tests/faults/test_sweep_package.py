"""Kill `trm package kaggle --overwrite` before each of its filesystem mutations (tests/faults/harness.py):
an earlier bundle stays whole until the new one replaces it, and the next run writes the bundle an
uninterrupted run writes."""

from __future__ import annotations

import shutil
import types
from pathlib import Path

import pytest

from tests.faults.harness import sweep
from tests.helpers import SmokeCheckpoint, make_smoke
from trm.commands import main

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> SmokeCheckpoint:
    return make_smoke(tmp_path_factory.mktemp("package"))


def test_package_kaggle_killed_anywhere_keeps_the_earlier_bundle_whole(
    smoke: SmokeCheckpoint,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # config.json records when it was written: one clock for every package of the sweep
    monkeypatch.setattr("trm.kaggle.package.time", types.SimpleNamespace(time=lambda: 1_800_000_000.0))

    def package(out: Path, *flags: str) -> tuple[int, str]:
        capsys.readouterr()
        code = main(["package", "kaggle", str(smoke.checkpoint), str(out), "--no-wheels", "--quiet", *flags])
        return code, capsys.readouterr().err

    earlier = tmp_path / "earlier"  # made once: the bundle's files record when they were written
    assert package(earlier / "bundle", "--no-identifiers")[0] == 0
    result = sweep(
        tmp_path / "root",
        lambda root: shutil.copytree(earlier, root, dirs_exist_ok=True),
        lambda root: package(root / "bundle", "--overwrite"),
        atomic=("bundle",),
    )
    print(f"package kaggle: {result.killed} kills of {result.mutations} mutations in {result.seconds:.1f} s")
