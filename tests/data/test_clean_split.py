"""The clean evaluation split `python -m trm data audit` writes: the test tasks that overlap no training task."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.data.test_audit import build, planted  # noqa: F401  (planted: the module fixture, reused)
from trm.adapt.tasks import default_solutions, select_tasks
from trm.commands import main
from trm.data.audit import audit, write_report
from trm.data.clean_split import select_clean
from trm.kaggle.testset import read_challenges
from trm.safe_remove import MARKER


def _audit(planted: dict, tmp_path: Path, *extra: str) -> Path:  # noqa: F811
    out = tmp_path / "report"
    argv = ["data", "audit", str(build(planted, "ds-clean")), "--out", str(out), "--quiet"]
    assert main([*argv, "--input-file-prefix", str(planted["prefix"]), *extra]) == 0
    return out


def test_clean_tasks_are_those_without_overlap_copied_verbatim_as_a_kaggle_pair(
    planted: dict,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    out = _audit(planted, tmp_path)
    listing = json.loads((out / "clean_tasks.json").read_text())
    # e0-e3 leak a test pair, input or output from another task; e4 matches only its own demonstrations.
    assert [(t["task"], t["trained_rows"]) for t in listing["tasks"]] == [("e4", True), ("e5", True)]
    why = {e["task"]: e["why"] for e in listing["excluded"]}
    assert sorted(why) == ["e0", "e1", "e2", "e3"]
    assert "test pair 0: exact in a0 (training)" in why["e0"]
    assert why["e2"] == ["test input 0: augmented in a2 (training)"]
    assert why["e3"] == ["test output 0: exact in a5 (training)"]
    assert listing["counts"] == {"test_tasks": 6, "clean": 2, "clean_without_trained_rows": 0}
    # The pair is the source files' tasks, byte for byte as JSON values.
    source_dir = Path(planted["prefix"]).parent
    source = json.loads((source_dir / "arc-agi_evaluation_challenges.json").read_text())
    answers = json.loads((source_dir / "arc-agi_evaluation_solutions.json").read_text())
    challenges = json.loads((out / "clean_challenges.json").read_text())
    assert challenges == {t: source[t] for t in ("e4", "e5")}
    assert json.loads((out / "clean_solutions.json").read_text()) == {t: answers[t] for t in ("e4", "e5")}
    # trm.eval --adapt-challenges finds the solutions beside it and takes both tasks; infer reads it.
    assert default_solutions(out / "clean_challenges.json") == out / "clean_solutions.json"
    selected = select_tasks(out / "clean_challenges.json", out / "clean_solutions.json")
    assert sorted(selected.tasks) == ["e4", "e5"] and not selected.skipped
    assert sorted(read_challenges(out / "clean_challenges.json")) == ["e4", "e5"]
    said = capsys.readouterr().out
    assert "clean test tasks (no overlap with another training task): 2 of 6, 0 of them without" in said
    assert "| e3 | evaluation | test output 0: exact in a5 (training) |" in (out / "audit.md").read_text()
    assert json.loads((out / "audit.json").read_text())["summary"]["clean_test_tasks"]["clean"] == 2


def test_against_a_training_set_without_the_test_subset_the_clean_tasks_have_no_trained_rows(
    planted: dict,  # noqa: F811
) -> None:
    ours = build(planted, "ds-clean-ours")
    other = build(planted, "ds-no-eval", subsets=["training", "concept"], test_set_name="concept")
    clean = audit(ours, against=other, progress=False)["clean_split"]
    assert [(t["task"], t["trained_rows"]) for t in clean["tasks"]] == [("e4", False), ("e5", False)]
    assert clean["counts"]["clean_without_trained_rows"] == 2


def test_a_test_task_duplicating_another_task_is_excluded_with_the_other_named() -> None:
    group = {
        "match": "augmented",
        "tasks": [
            {"task": "t1", "subset": "evaluation", "side": "dataset", "test": True},
            {"task": "x9", "subset": "concept", "side": "dataset", "test": False},
        ],
    }
    clean = select_clean([("t1", "evaluation"), ("t2", "evaluation")], {}, [group], {"t1"})
    assert clean["excluded"] == [
        {"task": "t1", "subset": "evaluation", "why": ["whole task: augmented duplicate of x9 (concept)"]}
    ]
    assert clean["tasks"] == [{"task": "t2", "subset": "evaluation", "trained_rows": False}]


def test_input_files_other_than_the_datasets_are_refused_and_nothing_is_written(
    planted: dict,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    dataset = build(planted, "ds-clean-prefix")
    # The shipped data is not what the planted dataset was built from: its recorded sha256s differ.
    assert main(["data", "audit", str(dataset), "--out", str(tmp_path / "r"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "differs from the one" in err and "--input-file-prefix" in err
    assert not (tmp_path / "r").exists()


def test_a_rerun_replaces_its_own_report_but_never_a_folder_holding_other_files(
    planted: dict,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    out = _audit(planted, tmp_path)
    assert json.loads((out / MARKER).read_text())["kind"] == "data-audit"
    _audit(planted, tmp_path)  # the earlier report is ours: replaced
    (out / "notes.txt").write_text("mine")
    before = sorted(p.name for p in out.iterdir())
    argv = ["data", "audit", str(build(planted, "ds-clean")), "--out", str(out), "--quiet"]
    assert main([*argv, "--input-file-prefix", str(planted["prefix"])]) == 2
    assert "notes.txt, which trm-stack did not write" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == before and (out / "notes.txt").read_text() == "mine"


def test_a_dataset_without_recorded_inputs_gets_the_list_and_a_note(
    planted: dict,  # noqa: F811
    tmp_path: Path,
) -> None:
    report = audit(build(planted, "ds-clean-noinputs"), progress=False)
    manifest_path = Path(report["dataset"]["path"]) / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["inputs"] = {}  # what `data import-upstream` records
    manifest_path.write_text(json.dumps(manifest))
    written, note = write_report(report, tmp_path / "r", planted["prefix"])
    assert [p.name for p in written] == ["audit.json", "audit.md", "clean_tasks.json"]
    assert note is not None and "records no input files" in note


@pytest.mark.slow
def test_shipped_data_clean_counts(tmp_path: Path) -> None:
    """The figures runbook 07 states: ARC-AGI-1 evaluation against arc2concept, evaluation2 against arc1concept."""
    from trm.data.build_arc import build_arc_dataset

    def ds(name: str, subsets: list[str], test: str) -> Path:
        build_arc_dataset(tmp_path / name, subsets=subsets, test_set_name=test, num_aug=0)
        return tmp_path / name

    arc2 = ds("arc2", ["training2", "evaluation2", "concept"], "evaluation2")
    arc1 = ds("arc1", ["training", "evaluation", "concept"], "evaluation")
    arc1_eval = ds("arc1-eval", ["evaluation"], "evaluation")
    counts = audit(arc1_eval, against=arc2, progress=False)["summary"]["clean_test_tasks"]
    assert counts == {"test_tasks": 400, "clean": 18, "clean_without_trained_rows": 18}
    counts = audit(arc2, against=arc1, progress=False)["summary"]["clean_test_tasks"]
    assert counts == {"test_tasks": 120, "clean": 114, "clean_without_trained_rows": 114}
    counts = audit(arc2, progress=False)["summary"]["clean_test_tasks"]
    assert counts == {"test_tasks": 120, "clean": 120, "clean_without_trained_rows": 0}
