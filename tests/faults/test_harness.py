"""The fault-injection harness itself, on trm.io's publishing of a folder (the default suite's sweeps: with renameat2's
exchange and with the two renames NFS and macOS get)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.harness import changes_the_tree, sweep
from trm import io


def write_report(root: Path, text: str) -> None:
    with io.atomic_directory(root / "out", overwrite=True, kind="report", flag="--out") as tmp:
        (tmp / "report.md").write_text(text)
        (tmp / "plots").mkdir()
        (tmp / "plots" / "a.txt").write_text(text.upper())


def publish(root: Path) -> tuple[int, str]:
    write_report(root, "new")
    return 0, ""


def test_a_replaced_folder_is_whole_after_a_kill_anywhere_and_the_next_run_completes(tmp_path: Path) -> None:
    result = sweep(tmp_path / "root", lambda root: write_report(root, "old"), publish, atomic=("out",))
    fsyncs = [point for point in result.log if not changes_the_tree(point)]
    assert fsyncs and all(" fsync " in point for point in fsyncs)
    assert result.killed == result.mutations - len(fsyncs) > 10 and not result.fixed_by_hand


def test_without_an_exchange_a_kill_anywhere_leaves_the_old_folder_whole_and_the_next_run_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The two-rename path (NFS, macOS, overlayfs): after any kill the old folder is whole at its name or
    moved aside, and the next writer puts it back, then publishes."""
    monkeypatch.setattr(io, "exchange", lambda a, b: False)
    result = sweep(
        tmp_path / "root", lambda root: write_report(root, "old"), publish, atomic=("out",), moved_aside=True
    )
    assert result.killed > 10 and not result.fixed_by_hand
    assert any(point.endswith(": replace out") for point in result.log)  # moved aside: two renames


def test_a_writer_that_tears_its_output_is_caught(tmp_path: Path) -> None:
    def in_place(root: Path) -> tuple[int, str]:
        (root / "out.txt").write_text("new")
        return 0, ""

    with pytest.raises(AssertionError, match=r"killed before mutation 1: write into the opened file out\.txt: "
                       r"out\.txt is neither old nor new"):  # fmt: skip
        sweep(tmp_path / "root", lambda root: (root / "out.txt").write_text("old"), in_place)
