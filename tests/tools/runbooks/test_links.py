"""Relative links of the documentation (tools/runbooks/links.py) point at files and headings that exist."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.runbooks.links import broken_links, link_problems, slug

pytestmark = pytest.mark.runbooks

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Checkpoints: rolling, asynchronous, best", "checkpoints-rolling-asynchronous-best"),
        ("ARC evaluation: upstream's numbers", "arc-evaluation-upstreams-numbers"),
        ("Comparing runs: `python -m trm report`", "comparing-runs-python--m-trm-report"),
        (
            "2a. Launch on a VM with Docker (Prime Intellect, 4×H100)",
            "2a-launch-on-a-vm-with-docker-prime-intellect-4h100",
        ),
        ("See [the docs](docs/x.md) now", "see-the-docs-now"),
    ],
)
def test_anchors_are_githubs(heading: str, anchor: str):
    assert slug(heading) == anchor


def test_broken_files_and_anchors_are_reported_and_good_links_pass(tmp_path: Path):
    (tmp_path / "docs" / "runs").mkdir(parents=True)
    (tmp_path / "other.md").write_text(
        "# Other page\n\n## Steps\n\n## Steps\n\n```bash\n# not a heading\n```\n"
    )
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "# Page\n\n"
        "[ok](../other.md) [ok](../other.md#other-page) [ok](../other.md#steps-1) [ok](runs/) [ok](#page)\n"
        "[web](https://example.com/x.md) `[code](nowhere.md)`\n\n"
        "```bash\necho '[also code](nowhere.md)'\n```\n\n"
        "[gone](../missing.md) ![img](pic.png)\n"
        "[bad anchor](../other.md#not-a-heading) [bad self](#nope)\n"
    )
    problems = link_problems(page, tmp_path)
    assert [p.split(": ", 1)[0] for p in problems] == ["docs/page.md:10"] * 2 + ["docs/page.md:11"] * 2
    assert "'../missing.md' points to a file that does not exist" in problems[0]
    assert "'pic.png' points to a file that does not exist" in problems[1]
    assert "other.md has no heading with the anchor #not-a-heading" in problems[2]
    assert "page.md has no heading with the anchor #nope" in problems[3]


def test_the_repository_links_resolve():
    assert broken_links(ROOT) == []
