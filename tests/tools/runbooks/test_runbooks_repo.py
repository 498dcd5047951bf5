"""The repository's runbooks: versioned, referencing only what exists, and covering every known pitfall."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tools.cli import task_parsers
from tools.runbooks.check import check_runbooks
from tools.runbooks.pages import reference_pages
from tools.runbooks.run import run_cpu_blocks
from tools.runbooks.runbook import Runbook, load_all
from trm.commands import build_parser

pytestmark = pytest.mark.runbooks

ROOT = Path(__file__).resolve().parents[3]
REQUIRED = {
    "provision",
    "first-smoke",
    "production-run",
    "monitoring",
    "preemption-resume",
    "handoff",
    "kaggle",
    "troubleshooting",
}
# Every pitfall our users reported (what went wrong in their guides), by a phrase its entry must contain.
PITFALLS = {
    "adam-atan2 without its CUDA backend": "adam_atan2_backend",
    "setuptools >= 70 vs antlr4": "canonicalize_version",
    "user installs not on PATH": "~/.local/bin",
    "PermissionError creating the data dir": "PermissionError",
    "what a complete dataset looks like": "two** `dataset.json`",
    "cost timer started too early": "cost timer",
    "Hydra + / no + keys": "+ema=True",
    "/dev/shm bus errors": "Bus error",
    "evaluator crash after hours": "Inplace update to inference tensor outside InferenceMode",
    "WANDB_DISABLED=false still disables": "WANDB_DISABLED=false",
    "a W&B key pasted into YAML": "secretKeyRef",
    "RWO vs RWX volumes": "ReadWriteMany",
    "PVC mounted over the image's code": "subPath",
    "registry layer limit": "10 GB layer limit",
    "checkpoints lost with the pod": "Checkpoints lost with the pod",
    "eval cadence in epochs": "epochs, not steps",
    "a node fault found by the preflight": "exit 76: a faulty node",
}


def _sections(text: str) -> list[str]:
    return re.split(r"^## ", text, flags=re.M)[1:]


@pytest.fixture(scope="module")
def books() -> list[Runbook]:
    """Parsed when a test runs, not at collection (hosts without the dev extra collect this module)."""
    return load_all(ROOT / "runbooks")


def test_repository_runbooks_pass_every_static_check():
    assert check_runbooks(ROOT, build_parser(), task_parsers()) == []


def test_every_procedure_exists_and_is_indexed(books: list[Runbook]):
    assert {b.name for b in books} >= REQUIRED
    index = (ROOT / "runbooks" / "README.md").read_text(encoding="utf-8")
    for book in books:
        assert f"]({book.path.relative_to(ROOT / 'runbooks').as_posix()})" in index, book.path
        assert book.blocks_of("cpu") or book.blocks_of("gpu") or book.blocks_of("cloud"), book.path


@pytest.mark.parametrize("pitfall", sorted(PITFALLS))
def test_troubleshooting_has_symptom_cause_fix_for_each_pitfall(pitfall: str, books: list[Runbook]):
    book = next(b for b in books if b.name == "troubleshooting")
    phrase = PITFALLS[pitfall]
    matching = [s for s in _sections(book.body) if phrase in s]
    assert matching, f"no troubleshooting entry mentions {phrase!r} ({pitfall})"
    assert any(all(f"**{k}:**" in s for k in ("Symptom", "Cause", "Fix")) for s in matching), pitfall


def test_every_troubleshooting_entry_is_complete(books: list[Runbook]):
    book = next(b for b in books if b.name == "troubleshooting")
    for section in _sections(book.body):
        title = section.splitlines()[0]
        assert all(f"**{k}:**" in section for k in ("Symptom", "Cause", "Fix")), title


def test_fast_cpu_blocks_run_against_the_project(tmp_path: Path):
    timings = dict(run_cpu_blocks(ROOT, names=["provision", "production-run"], workdir=tmp_path))
    assert set(timings) == {"provision", "production-run"}
    plan = (tmp_path / "workspace" / "plan-h200x8.txt").read_text()
    assert "global batch      768" in plan and "world size        8" in plan


@pytest.mark.parametrize(
    "doc",
    [
        p.relative_to(ROOT).as_posix()
        for p in reference_pages(ROOT)
        if "```bash" in p.read_text(encoding="utf-8")
    ],
)
def test_documented_docker_runs_of_the_trainer_wait_for_its_save(doc: str):
    from tools.runbooks.journey import stop_timeout_problems

    text = (ROOT / doc).read_text(encoding="utf-8")
    blocks = re.findall(r"^```(?:bash|sh|console)[^\n]*\n(.*?)^```", text, re.S | re.M)
    assert blocks, doc
    assert [p for code in blocks for p in stop_timeout_problems(code, doc)] == []


def test_the_journey_table_names_the_runbooks_in_order_and_the_result():
    text = (ROOT / "runbooks" / "README.md").read_text()
    table = text.split("## Journeys", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| journey")]
    rows = [r for r in rows if not r.startswith("| ---")]
    assert len(rows) >= 6, "one row per journey: laptop, Vast.ai, Prime Intellect, Kubernetes, URM, suites"
    linked = set()
    for row in rows:
        journey, steps, result = (cell.strip() for cell in row.strip("|").split(" | "))
        targets = re.findall(r"\]\((v1/[\w-]+\.md)", steps)
        assert targets and result, f"{journey}: name the runbooks in order and what the user has at the end"
        for target in targets:
            assert (ROOT / "runbooks" / target).is_file(), target
        linked.update(targets)
    runbooks = {f"v1/{p.name}" for p in (ROOT / "runbooks" / "v1").glob("*.md")}
    assert runbooks <= linked, f"runbooks in no journey: {sorted(runbooks - linked)}"
    suites = next(r for r in rows if "09-experiments.md" in r)
    assert "trm report" in suites
