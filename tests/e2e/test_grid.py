"""Sudoku and Maze end to end on CPU: build from generated CSVs, train a tiny model with the task's recipe
(`evaluators=[]`: exact accuracy only), resume, evaluate the checkpoint standalone; and the recipes themselves."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.data.grid_fixtures import maze_source, sudoku_source
from tests.e2e.test_train import ROOT, TINY, env, rows
from tests.helpers import FIXTURES
from trm.launch.config.settings import LaunchSettings
from trm.launch.host.nvidia_smi import parse_query_csv
from trm.launch.plan.plan import build_plan
from trm.training.checkpointing import layout as ckpt
from trm.training.config import compose
from trm.training.recipes import RECIPES

# End to end: out of the default `make test`, run by `make test-e2e` (CI runs both).
pytestmark = pytest.mark.e2e

BUILDS = {
    "sudoku-mlp": ["build-sudoku", "--num-aug", "2", "--subsample-size", "8"],
    "maze": ["build-maze", "--aug", "--subsample-size", "3"],
}


def plan_for(task: str):
    settings = LaunchSettings.from_env({"TASK": task})
    return build_plan(settings, parse_query_csv((FIXTURES / "h100x4" / "query.csv").read_text()), {})


@pytest.mark.parametrize(
    ("task", "builder", "mlp_t", "l_cycles"),
    [
        ("sudoku-mlp", "build-sudoku", True, 6),
        ("sudoku-att", "build-sudoku", False, 6),
        ("maze", "build-maze", False, 4),
    ],
)
def test_recipes_follow_upstreams_readme(task, builder, mlp_t, l_cycles):
    plan = plan_for(task)
    build = plan.build_command()
    assert build[3:5] == ["data", builder] and build[6].endswith(RECIPES[task].dataset)
    cfg = compose(plan.overrides)
    assert cfg.evaluators == [] and cfg.ema is True
    assert (cfg.epochs, cfg.eval_interval, cfg.lr, cfg.puzzle_emb_lr) == (50000, 5000, 1e-4, 1e-4)
    assert (cfg.weight_decay, cfg.puzzle_emb_weight_decay) == (1.0, 1.0)
    assert (cfg.arch.mlp_t, cfg.arch.L_layers, cfg.arch.H_cycles, cfg.arch.L_cycles) == (
        mlp_t,
        2,
        3,
        l_cycles,
    )
    assert cfg.arch.pos_encodings == ("none" if mlp_t else "rope")
    assert cfg.global_batch_size == 768


@pytest.mark.parametrize("task", list(BUILDS))
def test_build_train_and_evaluate_with_exact_accuracy(task: str, tmp_path: Path) -> None:
    source = (sudoku_source if task.startswith("sudoku") else maze_source)(tmp_path / "csv")
    data = tmp_path / "data"
    subprocess.run(
        [sys.executable, "-m", "trm", "data", *BUILDS[task], "--source-dir", str(source), "--output-dir", str(data)],
        check=True, env=env(), cwd=ROOT, capture_output=True,
    )  # fmt: skip
    run = tmp_path / "run"
    # The task's recipe, shrunk to a tiny CPU model and two epochs (later overrides win).
    recipe = [o for o in RECIPES[task].overrides if not o.startswith("arch.")]
    command = [
        *(sys.executable, "-m", "trm.train", *recipe, *TINY),
        *(f"data_paths=[{data}]", f"+checkpoint_path={run}", "epochs=2", "eval_interval=1"),
        *(("arch.mlp_t=True", "arch.pos_encodings=none") if task == "sudoku-mlp" else ()),
    ]
    result = subprocess.run(command, env=env(), cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    logged = rows(run)
    evals = [r for r in logged if "eval/all/exact_accuracy" in r]
    assert len(evals) == 2 and all(0.0 <= r["eval/all/exact_accuracy"] <= 1.0 for r in evals)
    assert evals[-1]["eval/all/count"] == (5 if task.startswith("sudoku") else 3)  # every test puzzle, once
    assert not any(k.startswith("ARC/") for r in logged for k in r)  # no ARC evaluator ran
    assert json.loads((run / "run.json").read_text())["config"]["evaluators"] == []

    # Stopped after the first evaluation's checkpoint, the same command resumes to the same numbers.
    steps = [c.step for c in ckpt.find_complete(run)]
    split = tmp_path / "split"
    shutil.copytree(run, split)
    shutil.rmtree(split / f"step_{steps[-1]}")
    command[command.index(f"+checkpoint_path={run}")] = f"+checkpoint_path={split}"
    result = subprocess.run(command, env=env(), cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert f"resumed from {split / f'step_{steps[0]}'}" in result.stderr
    assert rows(split) == logged

    newest = ckpt.find_complete(run)[-1]
    out = tmp_path / "eval"
    result = subprocess.run(
        [sys.executable, "-m", "trm.eval", str(newest.path), "--output-dir", str(out)],
        env=env(), cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (metrics_file,) = out.glob(f"*_step_{newest.step}/metrics.json")
    metrics = json.loads(metrics_file.read_text())
    assert metrics["eval/all/exact_accuracy"] == evals[-1]["eval/all/exact_accuracy"]
    assert metrics["eval/all/lm_loss"] == pytest.approx(evals[-1]["eval/all/lm_loss"], rel=1e-6)
