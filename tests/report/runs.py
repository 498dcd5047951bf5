"""Synthetic run directories and batch results, written as the trainer and the batch runner write them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trm.training.config import as_dict, compose
from trm.training.recipes import get_recipe

T0 = 1_800_000_000.0  # a fixed wall clock: the same inputs every time


def recipe_config(recipe: str, *overrides: str, run_name: str = "run") -> dict[str, Any]:
    """run.json's `config` of a run of `recipe` (+ overrides), resolved as the trainer resolves it."""
    dataset = f"data/{get_recipe(recipe).dataset}"
    cfg = compose(
        [*get_recipe(recipe).overrides, f"data_paths=[{dataset}]", f"run_name={run_name}", *overrides]
    )
    return as_dict(cfg)


def write_run(
    run_dir: Path,
    config: dict[str, Any],
    *,
    steps: int = 20,
    log_every: int = 5,
    eval_every: int = 10,
    params: int = 1000,
    eval_values: dict[str, list[float]] | None = None,
    step_seconds: float = 0.5,
    step_limit: int | None = None,
) -> Path:
    """run.json + metrics.jsonl: num_params at step 0, train rows every `log_every` steps (loss falling),
    eval rows every `eval_every` steps with `eval_values[name][i]` for the i-th evaluation."""
    run_dir.mkdir(parents=True)
    limit = steps if step_limit is None else step_limit
    (run_dir / "run.json").write_text(
        json.dumps({"config": config, "step_limit": limit, "total_steps": limit})
    )
    rows: list[dict[str, Any]] = [{"step": 0, "wall_time": T0, "num_params": float(params)}]
    evals = eval_values or {"eval/all/exact_accuracy": [0.1 * (i + 1) for i in range(steps // eval_every)]}
    clock = T0
    for step in range(log_every, steps + 1, log_every):
        clock += log_every * step_seconds
        rows.append({"step": step, "wall_time": clock, "train/lm_loss": 2.0 / step, "train/lr": 1e-4})
        if step % eval_every == 0:
            i = step // eval_every - 1
            clock += 3.0
            row = {"step": step, "wall_time": clock, "eval/seconds": 3.0}
            row.update({name: values[i] for name, values in evals.items() if i < len(values)})
            rows.append(row)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / f"step_{steps}").mkdir()
    (run_dir / f"step_{steps}" / "COMPLETE").write_text("")
    return run_dir


def batch_entry(
    name: str, run_dir: Path | None, *, status: str = "finished", **fields: Any
) -> dict[str, Any]:
    """One `runs[]` entry of batch_results.json (schema_version 1)."""
    entry: dict[str, Any] = {
        "name": name,
        "suite": "size",
        "swept": {},
        "status": status,
        "exit_code": 0 if status == "finished" else 1,
        "started": "2026-11-23T10:00:00Z",
        "ended": "2026-11-23T10:05:00Z",
        "wall_seconds": 300.0,
        "run_dir": None if run_dir is None else str(run_dir),
        "final_metrics": {},
        "best_metrics": {},
        "best_checkpoint": None,
        "command": ["python", "-m", "trm.train"],
        "log_tail": "",
    }
    entry.update(fields)
    return entry


def write_batch(path: Path, runs: list[dict[str, Any]]) -> Path:
    data = {
        "schema_version": 1,
        "batch": {
            "id": "b1",
            "started": "2026-11-23T10:00:00Z",
            "host": {"hostname": "test-host", "gpus": []},
            "command": "python -m trm experiment batch --pattern size",
        },
        "runs": runs,
    }
    path.write_text(json.dumps(data, indent=2))
    return path


def size_batch(root: Path) -> Path:
    """A 3-run model-size suite: two finished runs (hidden 16, 32) and one that failed before logging."""
    runs = []
    for hidden, params, accuracy in ((16, 5000, [0.2, 0.3]), (32, 20000, [0.4, 0.35])):
        config = get_recipe("debug-tiny").with_changes(arch={"hidden_size": hidden, "num_heads": 2})
        run_dir = write_run(
            root / f"h{hidden}",
            as_dict(compose([*config.overrides, "data_paths=[data/x]", f"run_name=h{hidden}"])),
            params=params,
            eval_values={"eval/all/exact_accuracy": accuracy, "eval/all/count": [50.0, 50.0]},
        )
        runs.append(batch_entry(f"size-h{hidden}", run_dir, swept={"arch.hidden_size": hidden}))
    runs.append(
        batch_entry(
            "size-h64", root / "h64", status="failed", swept={"arch.hidden_size": 64}, wall_seconds=2.5,
            log_tail="RuntimeError: out of memory",
        )
    )  # fmt: skip
    return write_batch(root / "batch_results.json", runs)
