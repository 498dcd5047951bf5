"""A tiny trained run (real dataset, a few optimizer steps, one evaluation checkpoint), built once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import SEEN_TASKS, TINY, train_in_process
from trm.data.build_arc import build_arc_dataset


@dataclass(frozen=True)
class TrainedRun:
    root: Path
    dataset: Path
    run_dir: Path


TINY_BUILD = {"subsets": ["training", "evaluation"], "test_set_name": "evaluation", "max_puzzles": SEEN_TASKS}


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory) -> TrainedRun:
    """debug-tiny for 2 epochs with a large puzzle-embedding lr (rows that differ), no EMA; the
    evaluation at the end writes an evaluation checkpoint carrying ARC/pass@2 as its best metric."""
    root = tmp_path_factory.mktemp("hub")
    dataset = root / "ds"
    build_arc_dataset(dataset, num_aug=3, **TINY_BUILD)
    overrides = ["device=cpu", "compile=false", f"data_paths=[{dataset}]", f"checkpoint_path={root / 'run'}"]
    extra = ["epochs=2", "eval_interval=2", "lr=1e-2", "puzzle_emb_lr=1e-1", "ema=false"]
    train_in_process([*TINY.overrides, *overrides, *extra])
    return TrainedRun(root, dataset, root / "run")
