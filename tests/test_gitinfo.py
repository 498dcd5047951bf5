"""trm.gitinfo.code_git_sha: the one lookup of the running code's commit (images and checkouts)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tools.images import context
from trm import gitinfo
from trm.images import entrypoint
from trm.launch.handoff import handoff
from trm.training.checkpointing import layout as checkpoint

ROOT = Path(__file__).resolve().parents[1]


def _git(repo: Path, *args: str) -> str:
    cmd = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args]
    return subprocess.run(cmd, cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    _git(tmp_path, "init", "-q")
    (tmp_path / "f.txt").write_text("a\n")
    _git(tmp_path, "add", "f.txt")
    _git(tmp_path, "commit", "-qm", "first")
    return tmp_path


def test_image_variable_wins(repo):
    assert gitinfo.code_git_sha({"TRM_IMAGE_GIT_SHA": "abc123"}, repo) == "abc123"


def test_checkout_head_with_dirty_marker(repo):
    head = _git(repo, "rev-parse", "HEAD")
    for env in ({}, {"TRM_IMAGE_GIT_SHA": ""}, {"TRM_IMAGE_GIT_SHA": "unknown"}):
        assert gitinfo.code_git_sha(env, repo) == head
    (repo / "f.txt").write_text("b\n")
    assert gitinfo.code_git_sha({}, repo) == f"{head}-dirty"
    assert context.git_sha(repo) == f"{head}-dirty"  # what the image build bakes in


def test_outside_git_is_unknown(tmp_path):
    assert gitinfo.code_git_sha({}, tmp_path) == "unknown"
    assert context.git_sha(tmp_path) == "unknown"


def test_every_caller_reads_the_image_variable(monkeypatch):
    """The checkpoint manifest once read TRM_GIT_SHA, which no image sets: every caller now agrees."""
    monkeypatch.delenv("TRM_GIT_SHA", raising=False)
    sha = "feedc0ffee12345"  # pragma: allowlist secret
    monkeypatch.setenv("TRM_IMAGE_GIT_SHA", sha)
    assert checkpoint.git_sha() == sha
    assert handoff._git_sha() == sha
    monkeypatch.setattr("trm.versions.collect_versions", lambda: {})
    assert f"git {sha[:12]}" in entrypoint.banner({"TRM_IMAGE_GIT_SHA": sha})


def test_handoff_records_none_when_unknown(monkeypatch):
    monkeypatch.setattr(handoff, "code_git_sha", lambda: "unknown")
    assert handoff._git_sha() is None


def test_one_variable_set_by_the_dockerfile_and_read_by_one_function():
    dockerfile = (ROOT / "docker/Dockerfile").read_text()
    assert set(re.findall(r"\b(TRM_\w*GIT_SHA)=", dockerfile)) == {"TRM_IMAGE_GIT_SHA"}
    assert "TRM_IMAGE_GIT_SHA=${GIT_SHA}" in dockerfile
    readers = [
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "trm").rglob("*.py")
        # a read: env.get("…"), environ["…"], getenv("…") (lists of variable names are not reads)
        if re.search(
            r"(get|getenv)\(\s*[\"']TRM_(IMAGE_)?GIT_SHA[\"']|\[\s*[\"']TRM_(IMAGE_)?GIT_SHA[\"']\s*\]",
            path.read_text(),
        )
    ]
    assert readers == [], f"read the image's commit through trm.gitinfo.code_git_sha(), not {readers}"
    assert gitinfo.ENV_VAR == "TRM_IMAGE_GIT_SHA"
