"""Adaptation lifts held-out exact accuracy: a tiny model trained on generated colour-permutation tasks
meets other tasks of the family (demonstrations identify each task's rule) with and without adaptation.

Slow: ARC sequences are 900 tokens whatever the grid size, so even the tiny model's steps take about a
second on 2 shared cores, and the base model needs a few hundred of them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.adapt.generated import write_tasks
from trm.adapt.run import AdaptSettings, adapt
from trm.adapt.source import source_from_checkpoint
from trm.data.build_arc import build_arc_dataset
from trm.distributed import DistInfo
from trm.training.config import compose, fill_run_defaults
from trm.training.loop import Trainer
from trm.training.standalone_eval import evaluate_checkpoint

COLOURS = 3  # grids of colours 0..2; a task's rule keeps or swaps 1 and 2
TRAIN_TASKS, HELD_OUT = 12, 8
BASE_STEPS, ADAPT_STEPS = 300, 60
MODEL = [
    "device=cpu",
    "compile=false",
    "arch.hidden_size=16",
    "arch.num_heads=1",
    "arch.L_layers=1",
    "arch.H_cycles=1",
    "arch.L_cycles=1",
    "arch.halt_max_steps=1",
    "arch.puzzle_emb_ndim=16",
    "arch.puzzle_emb_len=1",
    "arch.forward_dtype=float32",
    "global_batch_size=8",
    "epochs=100000",
    "eval_interval=null",
    "lr=1e-2",
    "lr_warmup_steps=20",
    "puzzle_emb_lr=1e-2",
    "weight_decay=0.0",
    "puzzle_emb_weight_decay=0.0",
    "evaluators=[]",
    "checkpoint_every_minutes=null",
    "hang_timeout_minutes=0",
]


def exact_accuracy(checkpoint: Path, out: Path) -> float:
    evaluate_checkpoint(checkpoint, [], out, use_ema=True)
    metrics = json.loads(next(out.glob("evaluator_ARC_step_*/metrics.json")).read_text())
    return metrics["eval/all/exact_accuracy"]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_adaptation_lifts_held_out_exact_accuracy(seed: int, tmp_path: Path) -> None:
    inputs = tmp_path / "inputs"
    write_tasks(inputs, "arc-agi_seen", TRAIN_TASKS, seed=seed, colours=COLOURS)
    held_out = write_tasks(tmp_path / "hidden", "hidden", HELD_OUT, seed=100 + seed, colours=COLOURS)
    build_arc_dataset(
        tmp_path / "seen",
        input_file_prefix=inputs / "arc-agi",
        subsets=["seen"],
        test_set_name="seen",
        num_aug=0,
    )
    cfg = compose([*MODEL, f"seed={seed}", f"max_steps={BASE_STEPS}", f"data_paths=[{tmp_path / 'seen'}]"])
    cfg.checkpoint_path = str(tmp_path / "base")
    fill_run_defaults(cfg)
    trainer = Trainer.create(cfg, DistInfo())
    try:
        assert trainer.train() == 0
    finally:
        trainer.close()
    source = source_from_checkpoint(tmp_path / "base" / f"step_{BASE_STEPS}")

    scores = {}
    for steps in (0, ADAPT_STEPS):
        settings = AdaptSettings(steps=steps, train="embeddings", num_aug=0, progress=False)
        result = adapt(source, held_out, tmp_path / f"adapt{steps}", settings)
        scores[steps] = exact_accuracy(result.checkpoint, tmp_path / f"eval{steps}")
    print(
        f"seed {seed}: held-out exact accuracy {scores[0]:.3f} unadapted, {scores[ADAPT_STEPS]:.3f} adapted"
    )
    assert scores[ADAPT_STEPS] >= scores[0] + 0.25, scores
