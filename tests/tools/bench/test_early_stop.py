"""The early-stopping replay over committed evaluation series (tools.bench.early_stop)."""

from __future__ import annotations

import json
from pathlib import Path

from tools.bench.early_stop import analyse, markdown, replay

STEPS = [10, 20, 30, 40, 50, 60]
FULL = [0.0, 0.2, 0.5, 0.4, 0.45, 0.3]


def test_a_full_ranking_keeps_the_best_seen_before_the_stop() -> None:
    row = replay(STEPS, FULL, None, patience=2, min_evaluations=0)
    assert (row["stopped_after"], row["evaluations_saved"], row["kept_step"], row["lost"]) == (50, 1, 30, 0)
    # Patience 3 would stop at the last evaluation: that is the run's normal end, not an early stop.
    assert replay(STEPS, FULL, None, patience=3, min_evaluations=0)["stopped_after"] is None


def test_a_subset_ranking_keeps_the_best_full_score_of_its_top_k() -> None:
    subset = [0.0, 0.3, 0.2, 0.1, 0.25, 0.1]  # best by subset at step 20, so the stop comes early
    row = replay(STEPS, FULL, subset, patience=2, min_evaluations=0, top_k=2)
    assert row["stopped_after"] == 40  # 0.2 and 0.1 after the best 0.3
    assert (row["kept_step"], row["kept_full"]) == (30, 0.5)  # top 2 by subset: steps 20, 30; full: 30 wins
    assert replay(STEPS, FULL, subset, patience=2, min_evaluations=0, top_k=1)["lost"] == 0.3


def test_the_analysis_reads_the_figures_and_says_which_curves_hold_no_evaluations(tmp_path: Path) -> None:
    figures, curves = tmp_path / "figures", tmp_path / "curves"
    figures.mkdir(), curves.mkdir()
    for name, key in (
        ("subset-ranking.json", "full_exact_accuracy"),
        ("subset-ranking-arc.json", "full_pass@2"),
    ):
        (figures / name).write_text(
            json.dumps({"steps": STEPS, key: FULL, "example_subset_scores": {"0.1": FULL}})
        )
    (curves / "train-only.json").write_text(json.dumps({"runs": {"a": [{"train/lm_loss": {"1": 2.0}}]}}))
    result = analyse(figures, curves)
    assert len(result["rows"]) == 2 * 2 * 2 * 4  # sources x rankings x min_evaluations x patience
    assert result["curves"] == {"train-only.json": []}
    text = markdown(result)
    assert (
        "| exact accuracy (Sudoku) | full | 2 | 0 | 50 | 1 of 6 | step 30: 0.5 | step 30: 0.5 | 0 |" in text
    )
    assert "No evaluation series in train-only.json" in text
