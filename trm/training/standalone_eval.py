"""Evaluate one checkpoint outside training: ours (step_N/ folder) or upstream's (step_N weight file).

The config is the checkpoint's stored one (ours) or the defaults (upstream), with `key=value` overrides
on top (data_paths, arch.*, global_batch_size, micro_batch_size, device…). Writes
`<output>/evaluator_ARC_step_N/submission.json` and `metrics.json` next to it.
"""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from typing import Any

import torch

from trm.distributed import DistInfo, initialize
from trm.errors import TRMError
from trm.io import atomic_write_json
from trm.model.registry import spec_of
from trm.training import config as config_mod
from trm.training.accumulation import MicroBatchSplit
from trm.training.builder import build_model, compiled_if_wanted
from trm.training.checkpointing.initial_weights import load_initial_weights
from trm.training.checkpointing.layout import STATE, load_torch, verified_manifest
from trm.training.config import TrainConfig

log = logging.getLogger(__name__)


def resolve_config(
    checkpoint: Path, overrides: list[str], use: str = "trm.eval"
) -> tuple[TrainConfig, int, bool]:
    """(config, step, is_ours) for a checkpoint path plus overrides; our step_N/ folder is verified against
    its manifest's sha256s first (`use` names the command in the error)."""
    ours = checkpoint.is_dir()
    if ours:
        verified_manifest(checkpoint, use)
        state = load_torch(checkpoint / STATE)
        base = config_mod.from_dict(state["config"])
        step = int(state["progress"]["step"])
        arch = spec_of(base.arch).name
        if config_mod.selected_arch(overrides, arch) != arch:
            raise TRMError(f"{checkpoint} is an arch={arch} checkpoint: drop the arch= override.")
    elif checkpoint.is_file():
        arch = config_mod.selected_arch(overrides)
        base = config_mod.train_config(arch)
        match = re.search(r"step_(\d+)", checkpoint.name)
        step = int(match.group(1)) if match else 0
    else:
        raise TRMError(
            f"checkpoint {checkpoint} does not exist: pass a step_N folder or an upstream step_N file."
        )
    return config_mod.with_overrides(base, overrides, arch), step, ours


def evaluate_checkpoint(
    checkpoint: Path,
    overrides: list[str],
    output_dir: Path | None,
    use_ema: bool,
    *,
    puzzle_ids: str = "trained",
    source: dict[str, Any] | None = None,
    warnings: list[str] | None = None,
) -> int:
    """Build the test loader and model, load the weights, evaluate; rank 0 writes the results.

    `puzzle_ids` other than "trained" (trm.evaluation.ablation) evaluates with blank or shuffled puzzle
    identifiers, into `<output>/puzzle_ids-<mode>/`; `source` (where a Hub checkpoint came from, with its
    commit) and `warnings` (what makes the score mean less than it seems) are recorded in metrics.json.
    """
    from trm.evaluation.ablation import TRAINED

    cfg, step, ours = resolve_config(checkpoint, overrides)
    out = output_dir or checkpoint.parent
    if puzzle_ids != TRAINED:
        out = out / f"puzzle_ids-{puzzle_ids}"
    with initialize(cfg.device) as info:
        metrics = _evaluate(cfg, info, checkpoint, step, ours, use_ema, out, puzzle_ids)
        extra = {
            "puzzle_ids": puzzle_ids,
            **({"source": source} if source else {}),
            **({"warnings": list(warnings)} if warnings else {}),
        }
        _report(info, out, step, metrics, extra)
    return 0


def full_metrics(checkpoint: Path, output_dir: Path) -> dict[str, float]:
    """One of our checkpoints evaluated on its run's full test set as the run evaluates (its EMA weights
    when it trained with ema=True), with fresh evaluators; outputs under `output_dir`; rank 0's metrics."""
    cfg, step, ours = resolve_config(checkpoint, [])
    with initialize(cfg.device) as info:
        return _evaluate(cfg, info, checkpoint, step, ours, cfg.ema, output_dir, "trained")


def _evaluate(
    cfg: TrainConfig,
    info: DistInfo,
    checkpoint: Path,
    step: int,
    ours: bool,
    use_ema: bool,
    out: Path,
    puzzle_ids: str,
) -> dict[str, float]:
    """Build the test loader and model, load the weights, evaluate every pass; the metrics (rank 0)."""
    from trm.data.loader import PuzzleLoader
    from trm.evaluation.ablation import ablated
    from trm.evaluation.arc import build_evaluators
    from trm.evaluation.runner import evaluate
    from trm.training.eval_passes import evaluate_passes

    plan = MicroBatchSplit.create(cfg.global_batch_size, info.world_size, info.rank, cfg.micro_batch_size)
    test = PuzzleLoader(
        cfg.data_paths_test or cfg.data_paths,
        "test",
        global_batch_size=cfg.global_batch_size,
        rank=info.rank,
        world_size=info.world_size,
        seed=cfg.seed,
    )
    torch.manual_seed(cfg.seed)
    model, loss_head = build_model(cfg, test.metadata, plan, info.device)
    data_paths = cfg.data_paths_test or cfg.data_paths
    _load(checkpoint, ours, use_ema, model, test.metadata.num_puzzle_identifiers, data_paths)
    evaluators = build_evaluators(cfg.evaluators, test)
    meta = test.metadata
    head = ablated(loss_head, puzzle_ids, meta.num_puzzle_identifiers, meta.blank_identifier_id, cfg.seed)
    step_module = compiled_if_wanted(cfg, info.device, head)  # compile=auto: on CUDA
    return evaluate_passes(  # URM: also with loops + 8 ACT steps (arch.loop_deltas), as in training
        cfg.arch,
        model.config,
        out,
        lambda save_dir: evaluate(
            step_module,
            test,
            evaluators,
            info,
            chunk_size=plan.micro_batch_size,
            save_dir=save_dir,
            step=step,
        ),
    )


def _load(
    checkpoint: Path, ours: bool, use_ema: bool, model: torch.nn.Module, num_ids: int, data_paths: list[str]
) -> None:
    if ours and not use_ema:
        state = load_torch(checkpoint / STATE)
        model.load_state_dict(state["model"])
        return
    # An upstream file must match the data's identifiers row for row: stop rather than resize or misuse rows.
    load_initial_weights(str(checkpoint), model, num_ids, upstream_data_paths=list(data_paths))


def _report(info: DistInfo, out: Path, step: int, metrics: dict[str, float], extra: dict[str, Any]) -> None:
    if not info.is_main:
        return
    folder = out / f"evaluator_ARC_step_{step}"
    atomic_write_json(folder / "metrics.json", {"step": step, **metrics, **extra})
    for key, value in sorted(metrics.items()):
        print(f"{key}: {value:.4f}")
    print(f"submission: {folder / 'submission.json'}")
    for line in extra.get("warnings", []):
        print(f"WARNING: {line}", file=sys.stderr)
