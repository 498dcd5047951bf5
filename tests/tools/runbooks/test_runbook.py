"""Runbook parsing, versioning (procedure hash + CHANGELOG), static checks and the cpu-tier runner."""

from __future__ import annotations

import datetime
import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from tools.runbooks.check import changelog_entries, check_runbooks, stamp
from tools.runbooks.run import run_cpu_blocks
from tools.runbooks.runbook import load_runbook, parse_blocks, procedure_hash
from trm.commands import build_parser
from trm.errors import TRMError

DIGEST = "sha256:" + "9d" * 32
BODY = textwrap.dedent(
    """\
    # SmokeCheckpoint

    ```bash cpu
    mkdir -p "$WORKSPACE/out"
    GREETING=hello
    ```

    Some prose.

    ```bash cpu
    echo "$GREETING" > "$WORKSPACE/out/greeting.txt"
    ```

    ```bash gpu env=image
    nvidia-smi
    ```

    ```text
    not a command (
    ```

    <!-- env-provides laptop: WORKSPACE -->
    """
)


def _repo(tmp_path: Path, body: str = BODY) -> Path:
    (tmp_path / "docker").mkdir()
    lock = {"images": {"sm90": {"reference": f"r.io/trm@{DIGEST}", "tags": ["0.1.0-cu130-sm90"]}}}
    (tmp_path / "docker" / "images.lock.json").write_text(json.dumps(lock))
    (tmp_path / "runbooks" / "v1").mkdir(parents=True)
    header = textwrap.dedent(
        f"""\
        ---
        runbook: smoke
        title: SmokeCheckpoint
        version: 1
        date: 2026-01-01
        image_variant: sm90
        image: r.io/trm:0.1.0-cu130-sm90
        image_digest: {DIGEST}
        procedure_sha256: {"0" * 64}
        ---
        """
    )
    (tmp_path / "runbooks" / "v1" / "01-smoke.md").write_text(header + body)
    (tmp_path / "runbooks" / "CHANGELOG.md").write_text("# Runbook changelog\n\nNewest first.\n")
    (tmp_path / "Makefile").write_text("all:\n\t@true\n")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    return tmp_path


def test_blocks_and_tiers_are_parsed():
    blocks = parse_blocks(BODY, Path("x.md"), first_line=10)
    assert [(b.language, b.tier) for b in blocks] == [
        ("bash", "cpu"),
        ("bash", "cpu"),
        ("bash", "gpu"),
        ("text", None),
    ]
    assert blocks[0].line == 12 and blocks[0].code.startswith("mkdir -p")


def test_untagged_shell_block_is_an_error():
    with pytest.raises(TRMError, match="tag it `bash cpu`, `bash gpu` or `bash cloud`"):
        parse_blocks("```bash\nls\n```\n", Path("x.md"))
    with pytest.raises(TRMError, match="never closed"):
        parse_blocks("```bash cpu\nls\n", Path("x.md"))


def test_blocks_are_found_as_commonmark_reads_them():
    body = textwrap.dedent(
        """\
        1. Copy the run:

            ```bash cpu
            cp -r a b
            ```

        <!--
        ```bash cpu
        echo commented out
        ```
        -->

        ~~~~bash cloud env=laptop
        cat <<'EOF'
        ```
        EOF
        ~~~~

        > ```bash gpu env=image
        > nvidia-smi
        > ```
        """
    )
    blocks = parse_blocks(body, Path("x.md"), first_line=5)
    # the list item's block, dedented; nothing from the HTML comment; a longer fence holds a shorter one;
    # a block in a quote
    assert [(b.line, b.end_line, b.tier, b.env, b.code) for b in blocks] == [
        (7, 9, "cpu", None, "cp -r a b\n"),
        (17, 21, "cloud", "laptop", "cat <<'EOF'\n```\nEOF\n"),
        (23, 25, "gpu", "image", "nvidia-smi\n"),
    ]
    with pytest.raises(TRMError, match=r"x.md:3: code block is never closed; add a closing ~~~"):
        parse_blocks("text\n\n~~~bash cpu\nls\n```\n", Path("x.md"))


def test_procedure_hash_ignores_trailing_whitespace_only():
    assert procedure_hash("a\nb\n") == procedure_hash("a  \nb\n\n")
    assert procedure_hash("a\nb\n") != procedure_hash("a\nc\n")


def test_stamp_then_check_then_edit_needs_a_bump(tmp_path: Path):
    repo = _repo(tmp_path)
    problems = check_runbooks(repo, build_parser())
    assert any("procedure changed" in p for p in problems) and any("no entry" in p for p in problems)
    assert stamp(repo, "first version", today=datetime.date(2026, 11, 22)) == ["smoke v1"]
    assert check_runbooks(repo, build_parser()) == []
    book = load_runbook(repo / "runbooks" / "v1" / "01-smoke.md")
    assert book.version == 1 and str(book.header["date"]) == "2026-11-22"
    changelog = (repo / "runbooks" / "CHANGELOG.md").read_text()
    assert changelog_entries(changelog) == {("smoke", 1): procedure_hash(book.body)}
    assert "- first version" in changelog and changelog.startswith("# Runbook changelog\n\nNewest first.\n")

    path = repo / "runbooks" / "v1" / "01-smoke.md"
    path.write_text(path.read_text().replace("GREETING=hello", "GREETING=bonjour"))
    assert any("procedure changed" in p for p in check_runbooks(repo, build_parser()))
    assert stamp(repo, "French greeting") == ["smoke v2"]
    assert check_runbooks(repo, build_parser()) == []
    entries = changelog_entries((repo / "runbooks" / "CHANGELOG.md").read_text())
    assert set(entries) == {("smoke", 1), ("smoke", 2)}
    assert stamp(repo, "nothing") == []


def test_a_new_image_needs_revalidation(tmp_path: Path):
    repo = _repo(tmp_path)
    stamp(repo, "first version")
    lock = json.loads((repo / "docker" / "images.lock.json").read_text())
    lock["images"]["sm90"]["reference"] = "r.io/trm@sha256:" + "1e" * 32
    (repo / "docker" / "images.lock.json").write_text(json.dumps(lock))
    problems = check_runbooks(repo, build_parser())
    assert len(problems) == 1 and "re-validate" in problems[0]
    assert stamp(repo, "validated on the new image") == ["smoke v2"]
    assert check_runbooks(repo, build_parser()) == []


def test_syntax_errors_and_missing_references_are_reported(tmp_path: Path):
    body = BODY + "\n```bash gpu env=image\nif true; then echo\n```\n\n```bash cloud\nmake deploy\n```\n"
    repo = _repo(tmp_path, body)
    stamp(repo, "first")
    problems = check_runbooks(repo, build_parser())
    assert len(problems) == 2
    assert "bash -n" in problems[0] and "01-smoke.md:" in problems[0]
    assert "make target 'deploy'" in problems[1]


def test_runner_executes_cpu_blocks_in_order_with_shared_state(tmp_path: Path):
    repo = _repo(tmp_path)
    work = tmp_path / "work"
    timings = run_cpu_blocks(repo, workdir=work)
    assert [name for name, _ in timings] == ["smoke"]
    assert (work / "workspace" / "out" / "greeting.txt").read_text() == "hello\n"
    assert (work / "project" / "runbooks" / "v1" / "01-smoke.md").exists()  # ran on a copy


def test_runner_reports_the_failing_block(tmp_path: Path, capfd):
    repo = _repo(tmp_path, BODY.replace("GREETING=hello", "false"))
    with pytest.raises(TRMError, match="a cpu block failed"):
        run_cpu_blocks(repo)
    assert (
        "runbook step failed: " + str(repo / "runbooks" / "v1" / "01-smoke.md") + ":13"
        in capfd.readouterr().err
    )


def test_unreleased_until_an_image_is_pushed(tmp_path: Path):
    repo = _repo(tmp_path)
    (repo / "docker" / "images.lock.json").unlink()  # nothing pushed yet
    assert stamp(repo, "first version") == ["smoke v1"]
    book = load_runbook(repo / "runbooks" / "v1" / "01-smoke.md")
    assert (book.header["image"], book.header["image_digest"]) == ("unreleased", "unreleased")
    assert "no `sm90` image pushed yet" in (repo / "runbooks" / "CHANGELOG.md").read_text()
    assert check_runbooks(repo, build_parser()) == []
    lock = {"images": {"sm90": {"reference": f"r.io/trm@{DIGEST}", "tags": ["0.1.0-cu130-sm90"]}}}
    (repo / "docker" / "images.lock.json").write_text(json.dumps(lock))
    problems = check_runbooks(repo, build_parser())
    assert len(problems) == 1 and f"r.io/trm:0.1.0-cu130-sm90@{DIGEST}" in problems[0]
    assert stamp(repo, "validated on the first pushed image") == ["smoke v2"]
    assert load_runbook(repo / "runbooks" / "v1" / "01-smoke.md").header["image_digest"] == DIGEST
