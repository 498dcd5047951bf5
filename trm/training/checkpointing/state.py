"""What a checkpoint holds and how it is put back: the TrainState payload and per-rank carry shards."""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trm.training.accumulation import MicroBatchSplit, cat_rows, slice_rows, tree_map
from trm.training.checkpointing.layout import STATE, load_torch, rank_file, save_torch

log = logging.getLogger(__name__)


@dataclass
class Progress:
    """Where the run is: optimizer steps done, loader pass index, and whether that pass is finished."""

    step: int = 0
    iteration: int = 0
    pass_done: bool = False
    finished: bool = False
    # The best ranking metric so far and the evaluations since (trm.training.early_stop.EarlyStopState, as a
    # plain dict); empty in checkpoints written before early stopping existed.
    early_stop: dict[str, Any] = field(default_factory=dict)


def rng_state() -> dict[str, Any]:
    """Every RNG this process uses: on CUDA, the generator of this rank's own device (the current one,
    which `trm.distributed.initialize` set), so the state fits any number of visible GPUs on resume."""
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what `rng_state` captured (the CUDA state into the current device's generator).

    Checkpoints written before hold a list, one state per GPU visible then; the rank's own is the entry of
    its device (cuda:LOCAL_RANK, the current device again on resume). When the list has no such entry the
    generator keeps its seeded state, with a warning: resuming with fewer GPUs must not fail.
    """
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    saved = state.get("cuda")
    if saved is None or not torch.cuda.is_available():
        return
    if isinstance(saved, (list, tuple)):
        index = torch.cuda.current_device()
        if index >= len(saved):
            log.warning(
                "the checkpoint holds CUDA RNG states for %d GPU(s), none for cuda:%d; that generator keeps "
                "its seeded state (the run goes on, not bit-identical to an uninterrupted one)",
                len(saved),
                index,
            )
            return
        saved = saved[index]
    torch.cuda.set_rng_state(saved)


def rank_shard(plan: MicroBatchSplit, carries: list[Any] | None) -> dict[str, Any]:
    """This rank's ACT carry (all its micro-batches, as global slot rows, on its device) and RNG states."""
    return {
        "slot_start": plan.slot_start,
        "slot_end": plan.slot_start + plan.local_batch_size,
        "carry": None if carries is None else tree_map(lambda t: t.detach(), cat_rows(carries)),
        "rng": rng_state(),
    }


def write_rank_shard(folder: Path, rank: int, shard: dict[str, Any]) -> None:
    """Write a `rank_shard` (a host snapshot of it) as this rank's file."""
    save_torch(shard, folder / rank_file(rank))


def read_carries(
    folder: Path, world_size_saved: int, plan: MicroBatchSplit, device: torch.device
) -> list[Any] | None:
    """This rank's micro-batch carries rebuilt from the saved shards (any saved world size / micro split)."""
    shards = [load_torch(folder / rank_file(r)) for r in range(world_size_saved)]
    if any(s["carry"] is None for s in shards):
        return None
    whole = cat_rows([s["carry"] for s in sorted(shards, key=lambda s: s["slot_start"])])
    mine = slice_rows(whole, slice(plan.slot_start, plan.slot_start + plan.local_batch_size))
    mine = tree_map(lambda t: t.to(device).clone(), mine)
    return [slice_rows(mine, plan.micro_rows(k)) for k in range(plan.accum_steps)]


def read_rng(folder: Path, rank: int, world_size_saved: int) -> dict[str, Any] | None:
    """This rank's saved RNG states (None when the run had fewer ranks)."""
    if rank >= world_size_saved:
        return None
    return load_torch(folder / rank_file(rank))["rng"]


def write_main_state(folder: Path, payload: dict[str, Any]) -> None:
    """Rank 0's part: model, EMA, optimizers, loader, progress, config."""
    save_torch(payload, folder / STATE)


def read_main_state(folder: Path) -> dict[str, Any]:
    """Load `state.pt`."""
    return load_torch(folder / STATE)
