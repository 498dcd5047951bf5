"""Kill `trm publish-checkpoint` before each of its filesystem mutations (tests/faults/harness.py), the Hub
being a recorder (tests/hub/test_publish.py): the folder a killed publish staged in the temp folder is cleared
by the next publish, and a --dry-run's earlier folder stays whole until the new one replaces it."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.faults.harness import sweep
from tests.hub.conftest import TrainedRun, trained  # noqa: F401  (the session's tiny trained run)
from tests.hub.test_publish import EXPECTED_FILES, Recorder, hub  # noqa: F401  (the recording Hub)
from trm.commands import main

pytestmark = pytest.mark.e2e


def publishing(trained: TrainedRun) -> list[str]:  # noqa: F811
    return ["publish-checkpoint", str(trained.run_dir), "--repo", "me/trm-tiny"]


def test_publish_killed_anywhere_leaves_nothing_in_the_temp_folder_after_the_next_one(
    trained: TrainedRun,  # noqa: F811
    hub: Recorder,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = tmp_path / "root"
    monkeypatch.setattr(tempfile, "tempdir", str(root / "tmp"))  # the publish's scratch folder, under root

    def publish(root: Path) -> tuple[int, str]:
        capsys.readouterr()
        hub.uploaded = {}
        code = main([*publishing(trained), "--best"])
        assert code != 0 or set(hub.uploaded) == EXPECTED_FILES
        return code, capsys.readouterr().err

    result = sweep(root, lambda root: (root / "tmp").mkdir(), publish)
    print(
        f"publish-checkpoint: {result.killed} kills of {result.mutations} mutations in {result.seconds:.1f} s"
    )


def test_a_dry_run_killed_anywhere_keeps_the_earlier_folder_whole(
    trained: TrainedRun,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def dry_run(out: Path, *flags: str) -> tuple[int, str]:
        capsys.readouterr()
        code = main([*publishing(trained), "--dry-run", "--out", str(out), *flags])
        return code, capsys.readouterr().err

    earlier = tmp_path / "earlier"  # made once: the folder's marker records when it was written
    assert dry_run(earlier / "out", "--license", "apache-2.0")[0] == 0
    result = sweep(
        tmp_path / "root",
        lambda root: shutil.copytree(earlier, root, dirs_exist_ok=True),
        lambda root: dry_run(root / "out", "--best"),
        atomic=("out",),
    )
    print(
        f"publish-checkpoint --dry-run: {result.killed} kills of {result.mutations} mutations in {result.seconds:.1f} s"
    )
