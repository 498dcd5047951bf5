"""trm.safe_remove: what a replace or removal refuses, and the list of every deleting call in trm/, tools/
and noxfile.py, and of every deleting command of the host's shell (scripts/, .ci/run, the Makefile)."""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from trm.errors import TRMError
from trm.io import atomic_directory
from trm.safe_remove import (
    MARKER,
    check_replaceable,
    read_marker,
    refusal,
    remove_owned,
    remove_retired_checkpoint,
)

ROOT = Path(__file__).resolve().parents[1]
OWNER = "trm/safe_remove.py"
# Calls that delete a file or a folder.
DELETING_FUNCTIONS = {
    ("shutil", "rmtree"),
    ("os", "remove"),
    ("os", "unlink"),
    ("os", "rmdir"),
    ("os", "removedirs"),
}
DELETING_METHODS = {"unlink", "rmdir", "rmtree"}
# Deleting calls left outside the owner module, each with why it is safe: {file: (count, why)}.
# file -> (deleting calls, why). Empty: a `docker build` stage script (standard library only) uses
# tempfile.TemporaryDirectory for its own folder.
ALLOWED: dict[str, tuple[int, str]] = {}


def deleting_calls(path: Path) -> list[int]:
    """Line numbers of the deleting calls in one file."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = node.func.value
        name = node.func.attr
        if isinstance(owner, ast.Name) and (owner.id, name) in DELETING_FUNCTIONS:
            lines.append(node.lineno)
        elif name in DELETING_METHODS and not (isinstance(owner, ast.Name) and owner.id in ("shutil", "os")):
            lines.append(node.lineno)  # Path.unlink / Path.rmdir (any receiver)
    return lines


def test_every_deleting_call_goes_through_the_owner_module() -> None:
    found: Counter[str] = Counter()
    python_files = [p for package in ("trm", "tools") for p in (ROOT / package).rglob("*.py")]
    for path in sorted([*python_files, ROOT / "noxfile.py"]):
        rel = path.relative_to(ROOT).as_posix()
        if rel != OWNER:
            found[rel] += len(deleting_calls(path))
    found = +found
    expected = {rel: count for rel, (count, _why) in ALLOWED.items()}
    assert dict(found) == expected, (
        "a deleting call outside trm/safe_remove.py: use remove_owned / remove_own_temp / "
        f"remove_retired_checkpoint, or justify it in ALLOWED. Found {dict(found)}"
    )


# Shell that deletes: rm, rmdir, find … -delete, shred, unlink (a command, not a word inside a longer one).
SHELL_DELETE = re.compile(r"(?:^|[;&|(`\s])(?:rm|rmdir|shred|unlink)\s|\s-delete\b")
# The host's shell (scripts/, the CI entry point, the Makefile's recipes): {file: (deleting lines, why)}.
ALLOWED_SHELL: dict[str, tuple[int, str]] = {
    "scripts/image_test.sh": (1, '`rm -rf "$work"` at exit: the folder its own `mktemp -d` made'),
}


def shell_deletions(path: Path) -> list[int]:
    """Line numbers of the deleting commands in a shell script or Makefile (comments left out)."""
    return [
        n
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if not line.lstrip().startswith("#") and SHELL_DELETE.search(line.split(" #", 1)[0])
    ]


def test_no_host_shell_deletes_what_it_did_not_make() -> None:
    files = [*sorted((ROOT / "scripts").glob("*.sh")), ROOT / ".ci" / "run", ROOT / "Makefile"]
    found = {f.relative_to(ROOT).as_posix(): len(shell_deletions(f)) for f in files}
    found = {rel: count for rel, count in found.items() if count}
    assert found == {rel: count for rel, (count, _why) in ALLOWED_SHELL.items()}, (
        "a deleting shell command in scripts/, .ci/run or the Makefile: do the deletion in Python through "
        f"trm/safe_remove.py, or justify it in ALLOWED_SHELL. Found {found}"
    )


def test_the_shell_scan_sees_each_kind_of_deleting_command(tmp_path: Path) -> None:
    sample = tmp_path / "sample.sh"
    sample.write_text(
        'rm -rf "$dir"\nfind . -name x -delete\ntrue && rmdir d\n# rm -rf /\necho "form rm"\n'
        "shred -u f\nls --remove-me\n(unlink f)\necho ok # rm x\n"
    )
    assert shell_deletions(sample) == [1, 2, 3, 6, 8]


def test_the_scan_sees_each_kind_of_deleting_call(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import os, shutil\nfrom pathlib import Path\n"
        "shutil.rmtree('a')\nos.remove('b')\nos.unlink('c')\nos.rmdir('d')\nPath('e').unlink()\n"
        "(Path('f') / 'g').rmdir()\nprint('unlink')\n"
    )
    assert deleting_calls(sample) == [3, 4, 5, 6, 7, 8]


def _published(target: Path, kind: str = "output", files: dict[str, str] | None = None) -> None:
    with atomic_directory(target, overwrite=True, kind=kind, flag="--out") as tmp:
        for name, text in (files or {"a.txt": "x"}).items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(text)


def test_a_published_folder_carries_the_marker_with_its_files(tmp_path: Path) -> None:
    _published(tmp_path / "out", files={"a.txt": "x", "sub/b.txt": "y"})
    record = read_marker(tmp_path / "out")
    assert record is not None and record["kind"] == "output" and record["files"] == ["a.txt", "sub/b.txt"]
    assert refusal(tmp_path / "out", kind="output") is None
    _published(tmp_path / "out", files={"c.txt": "z"})  # --overwrite of its own output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [MARKER, "c.txt"]


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        (lambda t: (t.mkdir(), (t / "mine.txt").write_text("user data")), "did not write"),
        (lambda t: t.write_text("a file"), "is a file"),
        (
            lambda t: (t.mkdir(), (t / "step_3").mkdir(), (t / "step_3" / "COMPLETE").write_text("3")),
            "checkpoint",
        ),
        (lambda t: (t.mkdir(), (t / "run.json").write_text("{}")), "run directory"),
        (lambda t: (t.mkdir(), (t / "manifest.json").write_text("{}"), (t / "train").mkdir()), "dataset"),
    ],
)
def test_what_is_not_ours_is_never_replaced(tmp_path: Path, setup, reason: str) -> None:
    target = tmp_path / "out"
    setup(target)
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    with (
        pytest.raises(TRMError, match=reason) as err,
        atomic_directory(target, overwrite=True, flag="--out") as tmp,
    ):
        (tmp / "new").write_text("x")
    assert "nothing was changed" in str(err.value) and "\n" not in str(err.value)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == before


def test_a_foreign_file_added_to_our_output_or_another_kind_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "out"
    _published(target)
    (target / "notes.md").write_text("mine")
    with pytest.raises(TRMError, match=r"notes\.md, which trm-stack did not write"):
        remove_owned(target, kind="output")
    (target / "notes.md").unlink()
    with pytest.raises(TRMError, match="not a 'report'"):
        check_replaceable(target, kind="report")
    remove_owned(target, kind="output")
    assert not target.exists()


def test_the_source_being_read_is_never_the_target(tmp_path: Path) -> None:
    source = tmp_path / "run"
    _published(source)
    for target in (source, source / "inner", tmp_path):
        assert "which this command reads" in (refusal(target, kind="output", sources=[source]) or "")


def test_a_marker_that_is_not_json_counts_as_no_marker(tmp_path: Path) -> None:
    target = tmp_path / "out"
    _published(target)
    (target / MARKER).write_text("{broken")
    assert "no .trm-created marker" in (refusal(target, kind="output") or "")
    (target / MARKER).write_text(json.dumps({"tool": "x", "kind": "output", "files": "a.txt"}))
    assert "no .trm-created marker" in (refusal(target, kind="output") or "")


def test_retired_checkpoint_removal_takes_checkpoint_folders_only(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    with pytest.raises(ValueError, match="not a checkpoint folder"):
        remove_retired_checkpoint(tmp_path / "data")
    assert (tmp_path / "data").is_dir()
    (tmp_path / "step_2").mkdir()
    remove_retired_checkpoint(tmp_path / "step_2")
    assert not (tmp_path / "step_2").exists()


def test_a_dataset_is_listed_by_its_own_manifest_and_carries_no_marker(tmp_path: Path) -> None:
    from trm.data.manifest import FORMAT, listed_files

    target = tmp_path / "ds"

    def build(extra: str) -> None:
        with atomic_directory(
            target, overwrite=True, kind="dataset", listed_by=listed_files, flag="--out"
        ) as tmp:
            (tmp / "train").mkdir()
            (tmp / "train" / "a.npy").write_text(extra)
            files = {"train/a.npy": {"bytes": len(extra), "sha256": "0" * 64}}
            (tmp / "manifest.json").write_text(json.dumps({"format": FORMAT, "files": files}))

    build("one")
    assert not (target / MARKER).exists()  # the files stay exactly the builder's
    build("two")  # a rebuild (--overwrite) replaces its own dataset
    assert (target / "train" / "a.npy").read_text() == "two"
    (target / "train" / "notes.md").write_text("mine")
    with pytest.raises(TRMError, match=r"train/notes\.md, which trm-stack did not write"):
        build("three")
    (target / "train" / "notes.md").unlink()
    (target / "manifest.json").write_text("{}")  # not a trm-stack dataset manifest
    with pytest.raises(TRMError, match="no manifest of a trm-stack dataset"):
        build("three")
    assert (target / "train" / "a.npy").read_text() == "two"
