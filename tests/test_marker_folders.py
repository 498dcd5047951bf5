"""The launch, kaggle, kube and runbooks sessions collect only their markers' folders (noxfile's
MARKER_FOLDERS): a test carrying one of those markers anywhere else would never run in its session. And a
mark sits only on tests: on a helper it does nothing."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def marker_folders_table() -> dict[str, tuple[str, ...]]:
    """noxfile.py's MARKER_FOLDERS, read without importing nox."""
    tree = ast.parse((ROOT / "noxfile.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "MARKER_FOLDERS" for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise AssertionError("noxfile.py has no MARKER_FOLDERS table")


def misplaced(files: dict[str, str], table: dict[str, tuple[str, ...]]) -> list[str]:
    """'path: marker' for each file (path relative to the root -> its text) that uses `pytest.mark.<marker>`
    for a marker of `table` outside that marker's folders."""
    found = []
    for path, text in sorted(files.items()):
        for marker in sorted(set(re.findall(r"\bmark\.(\w+)\b", text)) & set(table)):
            if not any(path.startswith(folder.rstrip("/") + "/") for folder in table[marker]):
                found.append(f"{path}: {marker}")
    return found


def test_every_marked_test_lives_in_its_sessions_folders() -> None:
    table = marker_folders_table()
    assert set(table) == {"launch", "kaggle", "kube", "runbooks"}
    files = {
        p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8")
        for p in (ROOT / "tests").rglob("*.py")
        if p != Path(__file__).resolve()  # this file names the markers in its examples
    }
    marked = {m: [p for p, text in files.items() if f"mark.{m}" in text] for m in table}
    assert all(marked.values()), f"a marker with no test at all: {marked}"  # the scan sees the markers
    found = misplaced(files, table)
    assert found == [], (
        "move these tests into the folders noxfile.py's MARKER_FOLDERS gives their marker (or add the folder "
        "there): their session would not collect them:\n" + "\n".join(found)
    )


def test_a_marked_test_outside_the_folders_is_found() -> None:
    table = {"launch": ("tests/e2e", "tests/launch"), "kaggle": ("tests/kaggle",)}
    files = {
        "tests/launch/supervision/test_a.py": "pytestmark = [pytest.mark.e2e, pytest.mark.launch]",
        "tests/training/test_b.py": "@pytest.mark.launch\ndef test_b(): ...",
        "tests/kaggle_extra/test_c.py": "pytestmark = pytest.mark.kaggle",
        "tests/model/test_d.py": "@pytest.mark.slow\ndef test_d(): ...",
    }
    assert misplaced(files, table) == [
        "tests/kaggle_extra/test_c.py: kaggle",
        "tests/training/test_b.py: launch",
    ]


def marks_on_helpers(files: dict[str, str]) -> list[str]:
    """'path: name' for each function or class that is no test (pytest collects neither) yet carries a
    `pytest.mark.*` decorator or a name bound to one (`needs_rclone = pytest.mark.skipif(...)`): the mark does
    nothing there, and the tests it was meant for run without it."""
    trees = {path: ast.parse(text) for path, text in files.items()}
    mark_names = {
        target.id
        for tree in trees.values()
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and "mark." in ast.unparse(node.value)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    found = []
    for path, tree in sorted(trees.items()):
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            if node.name.startswith(("test", "Test")):
                continue
            for decorator in node.decorator_list:
                source = ast.unparse(decorator.func if isinstance(decorator, ast.Call) else decorator)
                if "mark." in source or source in mark_names:
                    found.append(f"{path}: {node.name}")
    return sorted(found)


def test_no_mark_sits_on_a_helper() -> None:
    files = {
        p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in (ROOT / "tests").rglob("*.py")
    }
    assert marks_on_helpers(files) == [], "move these marks onto the tests they were meant for"


def test_a_mark_on_a_helper_is_found() -> None:
    files = {
        "tests/helpers.py": "needs_tool = pytest.mark.skipif(True, reason='x')",
        "tests/a/test_a.py": (
            "@needs_tool\ndef run_it(): ...\n@pytest.mark.skipif(True, reason='x')\ndef helper(): ...\n"
            "@needs_tool\ndef test_ok(): ...\n@pytest.fixture\ndef fixture(): ...\n@pytest.mark.slow\nclass TestOk: ...\n"
        ),
    }
    assert marks_on_helpers(files) == ["tests/a/test_a.py: helper", "tests/a/test_a.py: run_it"]
