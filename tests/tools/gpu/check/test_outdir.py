"""What a check run may write over in --out and --extension-dir: its own report and an earlier run's
work/ (kept aside), never a user's files; refusals come before any part runs, in one line, exit 2."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import pytest

from tests.helpers import ended_pid
from tools.gpu import extension as ext
from tools.gpu.check import cli, core, plan
from trm.errors import TRMError
from trm.safe_remove import MARKER, host_tag

ROOT = Path(__file__).resolve().parents[4]


def _parts(ran: list[str], seen: dict[str, list[str]] | None = None) -> tuple[core.Part, ...]:
    """The real parts with fake bodies: each records that it ran and what it found in work/."""

    def fake(name: str):
        def run(ctx: core.Context) -> core.Outcome:
            ran.append(name)
            if seen is not None:
                seen[name] = sorted(p.name for p in ctx.work.iterdir())
            (ctx.work / f"{name}.log").write_text(f"$ {name}\n")
            return core.Outcome("pass", f"{name} ok")

        return run

    return tuple(dataclasses.replace(p, run=fake(p.name), needs_cuda=False) for p in plan.PARTS)


@pytest.fixture
def no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check as on a machine without CUDA (its parts here are fakes that need none)."""
    monkeypatch.setattr(cli, "cuda_available", lambda: False)


def _tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", ["report.json", "report.md"])
def test_a_users_file_named_like_the_report_is_refused_untouched(
    tmp_path: Path, name: str, no_cuda: None, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / name).write_text('{"my": "measurements"}\n')
    before = _tree(out)
    ran: list[str] = []
    assert cli.main(["--out", str(out), "--only", "facts"], parts=_parts(ran)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out {out / name}: refusing to write it" in err
    assert "not a GPU check report" in err and "nothing was changed" in err
    assert ran == [] and _tree(out) == before


def test_a_rerun_replaces_its_own_report_and_keeps_the_earlier_work_aside(
    tmp_path: Path, no_cuda: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rerun must not find the earlier run's datasets, checkpoints or probe.json in work/ (build-arc refuses
    an existing dataset; the probe would report the earlier probe.json): it gets an empty work/."""
    out = tmp_path / "out"
    argv = ["--out", str(out), "--only", "facts", "collect"]
    ran: list[str] = []
    assert cli.main(argv, parts=_parts(ran)) == 0
    (out / "work" / "resume").mkdir()  # what a part leaves: a dataset the next run would trip over
    first = json.loads((out / "report.json").read_text())["started_unix"]
    seen: dict[str, list[str]] = {}
    assert cli.main(argv, parts=_parts(ran, seen)) == 0
    assert ran == ["facts", "collect"] * 2
    assert seen["facts"] == [".trm-created"]  # a fresh work/, the check's marker alone
    assert json.loads((out / "report.json").read_text())["started_unix"] > first
    assert (out / "work.earlier-1" / "resume").is_dir() and (out / "work.earlier-1" / "facts.log").is_file()
    assert "the earlier run's work/ is kept as " + str(out / "work.earlier-1") in capsys.readouterr().out
    assert cli.main(argv, parts=_parts(ran)) == 0
    assert (out / "work.earlier-2" / "collect.log").is_file() and (out / "work.earlier-1" / "resume").is_dir()


def test_a_work_folder_the_check_did_not_write_is_refused_and_an_interrupted_runs_is_not(
    tmp_path: Path, no_cuda: None, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    (out / "work").mkdir(parents=True)
    (out / "work" / "notes.txt").write_text("mine")
    ran: list[str] = []
    assert cli.main(["--out", str(out), "--only", "facts"], parts=_parts(ran)) == 2
    assert f"refusing to use {out / 'work'}: it holds no marker of the check" in capsys.readouterr().err
    assert ran == [] and _tree(out) == {"work/notes.txt": "mine"}
    # A run killed in its first part (no report yet) left its marked work/: the rerun goes on.
    cut = tmp_path / "cut"
    from tools.gpu.check.outdir import fresh_work

    cut.mkdir()
    work, _ = fresh_work(cut)
    (work / "kit.log").write_text("$ pip install\n")
    assert cli.main(["--out", str(cut), "--only", "facts"], parts=_parts(ran)) == 0
    assert (cut / "work.earlier-1" / "kit.log").is_file() and ran == ["facts"]
    # A run killed while it wrote the marker of its new work/ left the marker's temp alone there: the rerun goes on.
    torn = tmp_path / "torn"
    (torn / "work").mkdir(parents=True)
    (torn / "work" / f"{MARKER}.{host_tag()}-{ended_pid()}.x1.tmp").write_text('{"tool": ')
    assert cli.main(["--out", str(torn), "--only", "facts"], parts=_parts(ran)) == 0
    assert (torn / "report.json").is_file() and not (torn / "work.earlier-1").exists()


def test_a_users_folder_as_extension_dir_is_refused_before_any_part_runs(
    tmp_path: Path, no_cuda: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A new build used to delete `site/`, `build.json` and `result.json` in --extension-dir, whoever wrote them."""
    mine = tmp_path / "mine"
    (mine / "site").mkdir(parents=True)
    (mine / "site" / "package.py").write_text("x = 1\n")
    (mine / "result.json").write_text('{"my": 1}\n')
    ran: list[str] = []
    argv = ["--out", str(tmp_path / "out"), "--only", "extension-build", "--extension-dir", str(mine)]
    assert cli.main(argv, parts=_parts(ran)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--extension-dir {mine}: refusing to build the extension there" in err
    assert ran == [] and not (tmp_path / "out").exists()
    with pytest.raises(TRMError, match=r"no build\.json of an earlier extension build; nothing was changed"):
        ext.ExtensionBuild.start(mine, [sys.executable, "-c", "pass"], dict(os.environ), ROOT)
    (mine / "notes.md").write_text("mine")
    with pytest.raises(TRMError, match=r"it holds notes\.md, which no extension build wrote"):
        ext.ExtensionBuild.start(mine, [sys.executable, "-c", "pass"], dict(os.environ), ROOT)
    assert _tree(mine) == {"notes.md": "mine", "result.json": '{"my": 1}\n', "site/package.py": "x = 1\n"}


def test_an_earlier_builds_folder_is_rebuilt_in_place(tmp_path: Path) -> None:
    folder = tmp_path / "extension"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first = ext.ExtensionBuild.start(folder, [sys.executable, "-c", "print('one')"], env, ROOT)
    assert first.wait(30)[0]
    (folder / "site").mkdir()
    (folder / "site" / "adam_atan2_backend.so").write_bytes(b"old")
    assert ext.refusal(folder) is None
    second = ext.ExtensionBuild.start(folder, [sys.executable, "-c", "print('two')"], env, ROOT)
    assert second.wait(30)[0] and not (folder / "site").exists()
    assert "two" in (folder / "build.log").read_text()
    assert ext.refusal(tmp_path / "new") is None and ext.refusal(folder / "build.log") is not None


def test_leftovers_of_a_killed_build_do_not_block_the_next_one(tmp_path: Path) -> None:
    """A wrapper killed while writing result.json leaves `.result.json.*.tmp`; a build killed before it
    recorded itself leaves build.log alone. Neither is a user's: the next build starts and clears them."""
    folder = tmp_path / "extension"
    folder.mkdir()
    (folder / "build.log").write_text("$ pip install ...\n")
    assert ext.refusal(folder) is None
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first = ext.ExtensionBuild.start(folder, [sys.executable, "-c", "print('one')"], env, ROOT)
    assert first.wait(30)[0]
    (folder / ".result.json.abc123.tmp").write_text('{"ok": tr')
    (folder / ".build.json.def456.tmp").write_text("")
    assert ext.refusal(folder) is None
    second = ext.ExtensionBuild.start(folder, [sys.executable, "-c", "print('two')"], env, ROOT)
    assert second.wait(30)[0] and not list(folder.glob(".*.tmp"))
    (folder / ".notes.tmp").write_text("mine")  # a hidden file that is not a record's temp file is a user's
    assert "it holds .notes.tmp" in (ext.refusal(folder) or "")
