"""The fault-injection harness itself, on trm.io's publishing of a folder (the default suite's one sweep)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.harness import Killed, changes_the_tree, injected, snapshot, sweep
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


def test_without_an_exchange_a_folder_killed_while_moved_aside_is_put_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filesystem without renameat2's exchange: two renames, and a kill between them leaves the old folder
    moved aside; the next writer of the same target puts it back before anything else."""
    monkeypatch.setattr(io, "exchange", lambda a, b: False)
    root = tmp_path / "root"
    root.mkdir()
    write_report(root, "old")
    old = snapshot(root)
    with injected(root) as counting:
        publish(root)
    between = next(
        i for i, point in enumerate(counting.log) if " replace .out." in point and point.endswith(".partial")
    )
    write_report(root, "old")
    with injected(root, kill_at=between), pytest.raises(Killed):
        publish(root)
    assert not (root / "out").exists() and len(list(root.glob(".out.old-*"))) == 1
    io.remove_dead_leftovers(root / "out")
    assert snapshot(root) == old  # the old folder back, the killed writer's staging folder gone


def test_a_writer_that_tears_its_output_is_caught(tmp_path: Path) -> None:
    def in_place(root: Path) -> tuple[int, str]:
        (root / "out.txt").write_text("new")
        return 0, ""

    with pytest.raises(AssertionError, match=r"killed before mutation 1: write into the opened file out\.txt: "
                       r"out\.txt is neither old nor new"):  # fmt: skip
        sweep(tmp_path / "root", lambda root: (root / "out.txt").write_text("old"), in_place)
