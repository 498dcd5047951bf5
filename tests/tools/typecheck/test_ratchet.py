"""The type-check ratchet: mypy's errors per file against the recorded baseline."""

from __future__ import annotations

import json
import textwrap
import tomllib
from pathlib import Path

import pytest

from tools.typecheck import ratchet
from trm.errors import TRMError

ROOT = Path(__file__).resolve().parents[3]
OUTPUT = """\
trm/a.py:3: error: Incompatible return value type (got "int", expected "str")  [return-value]
trm/a.py:9: note: Error code "assignment" not covered by "type: ignore" comment
trm/a.py:12: error: Name "x" is not defined  [name-defined]
tools/b.py:1: error: Module has no attribute "y"  [attr-defined]
Found 3 errors in 2 files (checked 10 source files)
"""


def test_errors_are_counted_per_file_and_notes_are_not_errors():
    assert ratchet.count_errors(OUTPUT) == {"tools/b.py": 1, "trm/a.py": 2}
    assert ratchet.count_errors("Success: no issues found in 10 source files\n") == {}


def test_a_file_with_more_errors_than_recorded_fails_and_its_errors_are_printed():
    code, lines = ratchet.check(OUTPUT, {"trm/a.py": 2})
    assert code == 1
    assert lines[0] == "tools/b.py: 1 type error(s), the baseline allows 0:"
    assert lines[1].startswith("  tools/b.py:1: error: Module has no attribute")
    assert "trm/a.py" not in "\n".join(lines[:2])


def test_fewer_errors_than_recorded_ask_for_the_update_and_equal_counts_pass():
    code, lines = ratchet.check(OUTPUT, {"trm/a.py": 3, "tools/b.py": 1, "trm/gone.py": 4})
    assert code == 1 and "trm/a.py 3 -> 2, trm/gone.py 4 -> 0" in lines[-1] and "--update" in lines[-1]
    assert ratchet.check(OUTPUT, {"trm/a.py": 2, "tools/b.py": 1}) == (
        0,
        ["type check: 3 recorded error(s) in 2 file(s), none new"],
    )


def test_update_records_lower_counts_and_never_higher_ones(tmp_path):
    baseline = tmp_path / "baseline.json"
    code, lines = ratchet.update(OUTPUT, {"trm/a.py": 2}, baseline)
    assert code == 1 and lines[-1] == f"{baseline} not updated" and not baseline.exists()
    assert ratchet.update(OUTPUT, {"trm/a.py": 5, "tools/b.py": 1}, baseline)[0] == 0
    assert json.loads(baseline.read_text()) == {"tools/b.py": 1, "trm/a.py": 2}
    assert ratchet.update(OUTPUT, {}, baseline, allow_more=True)[0] == 0  # starting the ratchet
    assert ratchet.read_baseline(baseline) == {"tools/b.py": 1, "trm/a.py": 2}


@pytest.mark.parametrize("text", ["{not json", '{"trm/a.py": 0}', '["trm/a.py"]'])
def test_a_damaged_baseline_is_named_with_the_fix(tmp_path, text):
    baseline = tmp_path / "baseline.json"
    baseline.write_text(text)
    with pytest.raises(TRMError, match=str(baseline)):
        ratchet.read_baseline(baseline)


def test_the_strict_modules_have_no_recorded_error():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    strict = [o for o in config["overrides"] if o.get("disallow_untyped_defs")]
    modules = {m.replace(".", "/") + ".py" for o in strict for m in o["module"]}
    assert "trm/safe_remove.py" in modules
    assert all((ROOT / m).is_file() for m in modules), "a strict module was moved: rename it in pyproject"
    assert modules.isdisjoint(ratchet.read_baseline(ratchet.BASELINE))


def test_every_recorded_file_exists():
    # a file moved or deleted leaves its count behind: the check's fewer-errors message asks for --update
    assert all((ROOT / path).is_file() for path in ratchet.read_baseline(ratchet.BASELINE))


def test_mypy_runs_with_the_projects_settings_and_its_errors_are_counted(tmp_path, monkeypatch):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "bad.py").write_text("def f() -> str:\n    return 1\n")
    (tmp_path / "pyproject.toml").write_text(
        textwrap.dedent("""
        [tool.mypy]
        files = ["pkg"]
        cache_dir = "cache"
        """)
    )
    monkeypatch.chdir(tmp_path)
    assert ratchet.count_errors(ratchet.run_mypy(tmp_path)) == {"pkg/bad.py": 1}
    (tmp_path / "pyproject.toml").write_text('[tool.mypy]\nfiles = ["nowhere"]\n')
    with pytest.raises(TRMError, match="mypy could not run"):
        ratchet.run_mypy(tmp_path)
