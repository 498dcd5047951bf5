"""The subset-ranking bench's runs, shared by its Sudoku and ARC modes (tools.bench.subset): train with a
checkpoint every N steps and no in-run evaluation, and load a checkpoint's EMA weights for one evaluation."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def train(data: Path, run_dir: Path, recipe: Any, steps: int, every: int) -> Path:
    """Train `recipe` on the dataset `data` for `steps` optimizer steps on the CPU, keeping a checkpoint
    every `every` steps; returns `run_dir`."""
    from trm.distributed import DistInfo
    from trm.training.config import compose, fill_run_defaults
    from trm.training.loop import Trainer

    cfg = compose([
        *recipe.overrides, f"data_paths=[{data}]", f"checkpoint_path={run_dir}", "device=cpu",
        "compile=false", "evaluate=false", f"max_steps={steps}", f"checkpoint.every_steps={every}",
        "checkpoint.every_minutes=0", "checkpoint.keep=0", "checkpoint.asynchronous=false", "log_interval=50",
    ])  # fmt: skip
    fill_run_defaults(cfg)
    trainer = Trainer.create(cfg, DistInfo())
    try:
        trainer.train()
    finally:
        trainer.close()
    return run_dir


def load_for_evaluation(checkpoint: Path, batch_size: int = 512) -> tuple[int, Any, Any]:
    """(step, loss head with the checkpoint's EMA weights, test loader of its dataset)."""
    from trm.data.loader import PuzzleLoader
    from trm.distributed import DistInfo
    from trm.training.accumulation import MicroBatchSplit
    from trm.training.builder import build_model
    from trm.training.checkpointing.initial_weights import load_initial_weights
    from trm.training.standalone_eval import resolve_config

    cfg, step, _ = resolve_config(checkpoint, [])
    plan = MicroBatchSplit.create(cfg.global_batch_size, 1, 0, None)
    test = PuzzleLoader(cfg.data_paths, "test", global_batch_size=batch_size)
    model, head = build_model(cfg, test.metadata, plan, DistInfo().device)
    load_initial_weights(str(checkpoint), model, test.metadata.num_puzzle_identifiers)  # EMA weights
    return step, head, test


def shown(argv: list[str]) -> list[str]:
    """The arguments without `--work DIR` (a local path, not part of the setup)."""
    out, skip = [], False
    for arg in argv:
        if skip or arg.startswith("--work="):
            skip = False
            continue
        skip = arg == "--work"
        if not skip:
            out.append(arg)
    return out
