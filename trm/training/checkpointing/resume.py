"""Starting a run: from its newest complete checkpoint (bit-exactly), else from initial weights.

`resume` tries the complete step_N/ folders of the run directory newest first (rank 0 lists them, every
rank gets the list), skips one whose files fail their hashes, and puts the model, EMA, optimizers, loader,
evaluators' pooled votes, progress, ACT carries and RNG back. `load_initial` loads `load_checkpoint`
(or weights a caller provides) when there is nothing to resume.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import trm.training.checkpointing.layout as ckpt
from trm import distributed as dist_utils
from trm.distributed import DistInfo
from trm.errors import TRMError
from trm.optim.placement import place_state
from trm.training.builder import Components
from trm.training.checkpointing.initial_weights import load_initial_weights
from trm.training.checkpointing.state import Progress, read_carries, read_main_state, read_rng, set_rng_state
from trm.training.config import TrainConfig

log = logging.getLogger(__name__)

InitialWeights = Callable[[], tuple[dict[str, torch.Tensor], str]]


@dataclass
class Resumed:
    """Where a resumed run stands: the checkpoint it came from, its progress and this rank's carries."""

    folder: Path
    progress: Progress
    carries: list[Any] | None


def resume(run_dir: Path, info: DistInfo, comps: Components, facts: dict[str, Any]) -> Resumed | None:
    """Restore `comps` from the newest complete checkpoint under `run_dir` that passes its hashes;
    None when there is none. `facts`: this run's (checked against the checkpoint's manifest)."""
    found = None
    if info.is_main:
        found = [(i.step, str(i.path)) for i in ckpt.find_complete(run_dir)]
    found = dist_utils.broadcast_object(found, info)
    for _step, path in reversed(found or []):
        folder = Path(path)
        try:
            manifest = ckpt.check_folder(folder, verify_hashes=True)
        except ValueError as why:
            log.warning("skipping checkpoint %s: %s", folder, why)
            continue
        return _restore(folder, manifest, info, comps, facts)
    return None


def _restore(
    folder: Path, manifest: dict[str, Any], info: DistInfo, comps: Components, facts: dict[str, Any]
) -> Resumed:
    for warning in ckpt.check_compatible(manifest, facts, folder):
        if info.is_main:
            log.warning(warning)
    state = read_main_state(folder)
    comps.model.load_state_dict(state["model"])
    if comps.ema is not None:
        if state.get("ema") is None:
            raise TRMError(
                f"cannot resume from {folder} with ema=True: it was saved without EMA. Use ema=False."
            )
        comps.ema.load_state_dict(state["ema"])
    saved_opts = state["optimizers"]
    for o in comps.optimizers:
        if o.name not in saved_opts:
            raise TRMError(
                f"cannot resume from {folder}: it has no {o.name} optimizer state (freeze_weights?)."
            )
        o.optimizer.load_state_dict(saved_opts[o.name])
        # torch leaves `step` on the CPU it was loaded to; the adam-atan2 kernel reads it on the GPU.
        place_state(o.optimizer, source=f"{folder / ckpt.STATE} optimizer {o.name}")
    comps.train_loader.load_state_dict(state["train_loader"])
    # Pooled ARC votes of the evaluations before the interruption (aggregated_voting).
    for ev, saved in zip(comps.evaluators, state.get("evaluators") or [], strict=False):
        ev.load_state_dict(saved)
    if comps.subset is not None:  # the subset evaluation's own pooled votes (eval_subset.fraction < 1)
        for ev, saved in zip(comps.subset.evaluators, state.get("subset_evaluators") or [], strict=False):
            ev.load_state_dict(saved)
    progress = Progress(**state["progress"])
    world_saved = int(manifest["world_size"])
    carries = read_carries(folder, world_saved, comps.plan, info.device)
    rng = read_rng(folder, info.rank, world_saved)
    if rng is not None:
        set_rng_state(rng)
    if info.is_main:
        log.info("resumed from %s (step %d)", folder, progress.step)
    return Resumed(folder, progress, carries)


def load_initial(
    cfg: TrainConfig, info: DistInfo, comps: Components, initial_weights: InitialWeights | None
) -> None:
    """Load `initial_weights()` (a full state dict and its description) when given, else
    cfg.load_checkpoint when set; the EMA starts again from the loaded weights."""
    if initial_weights is None and not cfg.load_checkpoint:
        return
    if initial_weights is not None:
        weights, source = initial_weights()
        comps.model.load_state_dict(weights, strict=True)
    else:
        source = cfg.load_checkpoint
        kind = load_initial_weights(source, comps.model, comps.train_loader.metadata.num_puzzle_identifiers)
        source = f"{source} ({kind})"
    if comps.ema is not None:
        from trm.optim import EMA

        comps.ema = EMA(comps.model, cfg.ema_rate)
    if info.is_main:
        log.info("initial weights from %s", source)
