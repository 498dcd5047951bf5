"""The documentation pages every check reads (tools/runbooks/pages.py): the READMEs and docs/ besides the
runbooks, so a stale figure or a broken command in a docs/ page fails `python -m tools.runbooks check`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.runbooks import measured
from tools.runbooks.check import check_runbooks, stamp
from tools.runbooks.pages import reference_pages
from trm.commands import build_parser

pytestmark = pytest.mark.runbooks

ROOT = Path(__file__).resolve().parents[3]
STALE = "Build: <!-- measured:build -->15 minutes<!-- /measured -->.\n"


def _repo(tmp_path: Path, page: str) -> Path:
    """A checkout with one stamped runbook, one docs/ page and a run record under docs/gpu-runs/."""
    (tmp_path / "runbooks" / "v1").mkdir(parents=True)
    (tmp_path / "runbooks" / "v1" / "01-smoke.md").write_text(
        "---\nrunbook: smoke\ntitle: Smoke\nversion: 1\ndate: 2026-01-01\nimage_variant: cpu\n"
        f"image: unreleased\nimage_digest: unreleased\nprocedure_sha256: {'0' * 64}\n---\n# Smoke\n\nProse.\n"
    )
    (tmp_path / "runbooks" / "measured.toml").write_text(
        '[build]\nvalue = "3 s"\nhow = "python -m trm data build-arc, wall"\ndate = 2026-11-23\n'
    )
    (tmp_path / "Makefile").write_text("test:\n\t@true\n")
    (tmp_path / "README.md").write_text("# x\n\nSee [data](docs/data.md).\n")
    (tmp_path / "docs" / "gpu-runs" / "run1").mkdir(parents=True)
    (tmp_path / "docs" / "gpu-runs" / "run1" / "README.md").write_text(STALE + "[gone](nowhere.md)\n")
    (tmp_path / "docs" / "data.md").write_text(page)
    assert stamp(tmp_path, "first version") == ["smoke v1"]
    return tmp_path


def test_reference_pages_are_the_readmes_and_docs_without_the_run_records(tmp_path: Path):
    repo = _repo(tmp_path, "# Data\n")
    (repo / "docs" / "sub").mkdir()
    (repo / "docs" / "sub" / "deep.md").write_text("# Deep\n")
    assert reference_pages(repo) == [
        repo / "README.md",
        repo / "docs" / "data.md",
        repo / "docs" / "sub" / "deep.md",
    ]
    pages = reference_pages(ROOT)
    assert ROOT / "docs" / "launch.md" in pages and ROOT / "docs" / "README.md" in pages
    assert not [p for p in pages if "gpu-runs" in p.parts]


def test_a_stale_figure_in_a_docs_page_fails_the_check(tmp_path: Path):
    repo = _repo(tmp_path, "# Data\n\n" + STALE)
    problems = check_runbooks(repo, build_parser())
    assert len(problems) == 1, problems
    assert "docs/data.md:3: measured:build says '15 minutes'" in problems[0]
    assert measured.write(repo) == [
        repo / "docs" / "data.md"
    ]  # the record under docs/gpu-runs/ stays as it was
    assert check_runbooks(repo, build_parser()) == []


def test_a_broken_command_in_a_docs_page_fails_the_check(tmp_path: Path):
    page = (
        "# Data\n\n```bash\nmake test\nmake no-such-target\n"
        'docker run -d --gpus all "$IMAGE" python -m trm launch\n```\n'
    )
    problems = check_runbooks(_repo(tmp_path, page), build_parser())
    assert len(problems) == 2, problems
    assert (
        problems[0].startswith("docs/data.md:4: ")
        and "make target 'no-such-target' is not defined" in problems[0]
    )
    assert problems[1].startswith("docs/data.md:4: ") and "--stop-timeout" in problems[1]


def test_a_docs_page_with_bad_shell_syntax_fails_the_check(tmp_path: Path):
    problems = check_runbooks(_repo(tmp_path, "```bash\nif true; then\n```\n"), build_parser())
    assert len(problems) == 1 and problems[0].startswith("docs/data.md:2: bash -n:"), problems


def test_a_broken_link_in_a_docs_page_fails_the_check(tmp_path: Path):
    repo = _repo(tmp_path, "# Data\n\n[launch](launch.md) and [data](#data), [gone](#nowhere)\n")
    problems = check_runbooks(repo, build_parser())
    assert [p.split(": ", 1)[0] for p in problems] == ["docs/data.md:3"] * 2, problems
    assert "'launch.md' points to a file that does not exist" in problems[0] and "#nowhere" in problems[1]
