"""The subset-ranking bench's statistics: Spearman with ties, the later step on a tie, the comparison table."""

from __future__ import annotations

import numpy as np
import pytest

from tools.bench.subset import compare, write_sudoku_csv
from tools.bench.subset_stats import FRACTIONS, best_index, spearman, top_k


def test_spearman_handles_ties_and_constants() -> None:
    assert spearman(np.array([1.0, 2, 3]), np.array([10.0, 20, 30])) == pytest.approx(1.0)
    assert spearman(np.array([1.0, 2, 3]), np.array([3.0, 2, 1])) == pytest.approx(-1.0)
    assert spearman(np.array([1.0, 1, 2]), np.array([1.0, 2, 3])) == pytest.approx(0.8660, abs=1e-4)
    assert np.isnan(spearman(np.array([1.0, 1]), np.array([1.0, 2])))


def test_ties_go_to_the_later_checkpoint() -> None:
    scores = np.array([0.5, 0.7, 0.7, 0.1])
    assert best_index(scores) == 2 and top_k(scores, 3) == [2, 1, 0]


def test_compare_finds_a_perfect_subset_when_every_row_agrees() -> None:
    # 4 checkpoints, 200 rows; checkpoint i solves the first 50*i rows: any subset ranks them the same.
    outcomes = np.arange(200)[None, :] < 50 * np.arange(4)[:, None]
    layout = [("all", np.arange(201), np.arange(201))]
    table = compare(outcomes, layout)
    assert set(table) == {str(f) for f in FRACTIONS}
    big = table["0.5"]
    assert big["rows"] == 100 and big["same_best"] == 1.0 and big["full_best_in_top1"] == 1.0
    assert big["spearman_min"] > 0.9 and big["regret_top2_max"] == 0.0


def test_generated_sudoku_rows_are_solved_grids_with_the_asked_blanks(tmp_path) -> None:
    write_sudoku_csv(tmp_path / "t.csv", 5, 0, (3, 4))
    lines = (tmp_path / "t.csv").read_text().splitlines()
    assert lines[0] == "source,question,answer,rating" and len(lines) == 6
    for line in lines[1:]:
        _src, question, answer, rating = line.split(",")
        grid = np.array(list(answer), dtype=int).reshape(9, 9)
        assert all(sorted(r) == list(range(1, 10)) for r in (*grid, *grid.T))
        assert question.count(".") == 3 == int(rating)
        assert all(q in (".", a) for q, a in zip(question, answer, strict=True))
