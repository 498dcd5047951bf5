"""The paper runs' hours and $ per GPU tier: generated from the estimator, kept identical in docs/cost.md."""

from __future__ import annotations

import pytest

from tests.launch.plan.test_plan import ROOT
from trm.commands import main
from trm.launch.cost.estimate import RunEstimate
from trm.launch.plan.paper_runs import BEGIN, END, expected_run, kind, markdown_table

COST_DOC = ROOT / "docs" / "cost.md"


@pytest.mark.e2e  # about 30 s on one core: every recipe on every tier (CI runs the e2e tests too)
def test_docs_cost_table_is_the_generated_one(capsys: pytest.CaptureFixture[str]) -> None:
    text = COST_DOC.read_text(encoding="utf-8")
    assert BEGIN in text and END in text, f"{COST_DOC} lost its table markers"
    committed = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert committed == markdown_table(), (
        "docs/cost.md 'paper runs' table is stale: regenerate it with python -m trm launch --markdown-cost"
    )
    assert main(["launch", "--markdown-cost"]) == 0
    assert capsys.readouterr().out.strip() == committed


@pytest.mark.e2e  # tens of seconds: out of the default suite, run by make test-e2e
def test_the_table_covers_the_paper_tasks_and_says_what_each_figure_is() -> None:
    rows = [line.split(" | ") for line in markdown_table().splitlines()[2:]]
    assert {row[0].lstrip("| ") for row in rows} == {"arc1", "arc2", "sudoku-mlp", "sudoku-att", "maze"}
    arc2_4xh100 = next(r for r in rows if r[0] == "| arc2" and r[1] == "4x H100")
    assert arc2_4xh100[2:6] == ["45.5 h", "2.3 h (5 %)", "47.8 h", "$478"]
    assert arc2_4xh100[6:] == ["derived", "derived |"]
    assert {r[6] for r in rows if r[1] == "4x A100-80G"} == {"estimate"}
    assert {r[6] for r in rows if r[0] == "| arc1" and r[1] == "1x H100"} == {"measured"}


def test_the_dry_run_example_in_the_docs_is_what_the_estimator_prints() -> None:
    est = expected_run("arc2", "H100", 4, hourly_usd=2.5)
    assert isinstance(est, RunEstimate)
    text = COST_DOC.read_text(encoding="utf-8")
    for line in est.describe().splitlines():
        if not line.lstrip().startswith("dataset"):
            assert line in text, f"docs/cost.md's example lacks {line!r}"
    assert kind(est.step_source) == "derived" and kind("measured (probe)") == "measured"


def test_a_recipe_without_recorded_sizes_has_no_estimate() -> None:
    est = expected_run("arc2-smoke", "H100", 1)
    assert isinstance(est, str) and "unknown until" in est
