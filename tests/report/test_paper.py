"""The paper's published numbers, and which runs count as a published recipe."""

from __future__ import annotations

from trm.report.paper import PUBLISHED, published_recipe
from trm.training.recipes import RECIPES

from .runs import recipe_config


def test_published_rows_are_the_papers_headline_numbers():
    rows = {(p.recipe, p.benchmark, p.model, p.metric, p.percent, p.test_count) for p in PUBLISHED}
    assert rows == {
        ("arc1", "ARC-AGI-1", "TRM-Att (7M)", "pass@2", 44.6, 400),
        ("arc2", "ARC-AGI-2", "TRM-Att (7M)", "pass@2", 7.8, 120),
        ("sudoku-mlp", "Sudoku-Extreme", "TRM-MLP (5M)", "exact accuracy", 87.4, 423_000),
        ("sudoku-att", "Sudoku-Extreme", "TRM-Att (7M)", "exact accuracy", 74.7, 423_000),
        ("maze", "Maze-Hard", "TRM-Att (7M)", "exact accuracy", 85.3, 1000),
    }
    assert {p.recipe for p in PUBLISHED} <= set(RECIPES)


def test_a_run_of_an_unchanged_recipe_is_recognised_whatever_its_paths_name_and_seed():
    for recipe in ("arc1", "arc2", "sudoku-mlp", "sudoku-att", "maze"):
        config = recipe_config(recipe, "seed=7", "micro_batch_size=64", "arch.forward_dtype=float32")
        assert published_recipe(config).recipe == recipe


def test_a_changed_recipe_is_not_the_papers():
    assert published_recipe(recipe_config("arc1", "arch.L_cycles=6")) is None
    assert published_recipe(recipe_config("sudoku-mlp", "epochs=100", "eval_interval=10")) is None
    assert published_recipe(recipe_config("debug-tiny")) is None
    # arc1 and arc2 share their config: the dataset tells them apart (a dataset of another name is neither)
    assert published_recipe(recipe_config("arc1", "data_paths=[x/arc2concept-aug-1000]")).recipe == "arc2"
    assert published_recipe(recipe_config("arc1", "data_paths=[data/my-arc]")) is None
    assert published_recipe(None) is None
