"""The weights a run or an evaluation starts from (`load_checkpoint`): our step_N/ folder (EMA weights if
present) or a reference step_N file (upstream TRM or URM), converted to our keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from trm.errors import TRMError
from trm.training.checkpointing.layout import STATE, load_torch, verified_manifest

UPSTREAM_KIND = "upstream weights"


def read_checkpoint_weights(path: str, arch: str | None = None) -> tuple[dict[str, torch.Tensor], str]:
    """(state dict in our keys, description) of our step_N/ folder (EMA weights if present) or a reference
    step_N file (upstream TRM or URM, recognised by its keys; must be `arch` when given)."""
    from trm.model.upstream import convert_upstream_state_dict, detect_arch

    p = Path(path)
    if p.is_dir():
        verified_manifest(p, f"load_checkpoint={path}")
        state = load_torch(p / STATE)
        weights = dict(state["model"])
        if state.get("ema") is not None:
            weights.update(state["ema"]["shadow"])
        kind = "trm checkpoint" + (" (EMA weights)" if state.get("ema") is not None else "")
    elif p.is_file():
        try:
            raw = torch.load(p, map_location="cpu", weights_only=True)
        except Exception as err:
            raise TRMError(f"load_checkpoint={path}: cannot read it as a torch state dict ({err}).") from None
        if not isinstance(raw, dict):
            raise TRMError(f"load_checkpoint={path}: not a state dict (a {type(raw).__name__}).")
        found = detect_arch(raw)
        if arch is not None and found != arch:
            raise TRMError(
                f"load_checkpoint={path} holds arch={found} weights but the run is arch={arch}: "
                f"pass arch={found} (with the run's arch.* sizes)."
            )
        weights = convert_upstream_state_dict(raw, found)
        kind = UPSTREAM_KIND if found == "trm" else f"reference {found} weights"
    else:
        raise TRMError(
            f"load_checkpoint={path} does not exist: pass a step_N folder or upstream step_N file."
        )
    return weights, kind


def load_initial_weights(
    path: str, model: Any, num_identifiers: int, upstream_data_paths: list[str] | None = None
) -> str:
    """`load_checkpoint`: our step_N/ folder (EMA weights if present) or a reference step_N file.

    With `upstream_data_paths` (evaluation), an upstream file must fit those datasets' identifiers exactly
    (`require_upstream_identifiers`) instead of having its puzzle table resized.
    """
    from trm.model.registry import spec_of
    from trm.model.upstream import PUZZLE_EMB_KEY, resize_puzzle_embedding

    weights, kind = read_checkpoint_weights(path, spec_of(model.config).name)
    if upstream_data_paths is not None and kind == UPSTREAM_KIND and PUZZLE_EMB_KEY in weights:
        from trm.data.manifest import require_upstream_identifiers

        require_upstream_identifiers(upstream_data_paths, int(weights[PUZZLE_EMB_KEY].shape[0]), path)
    weights = resize_puzzle_embedding(weights, num_identifiers)
    try:
        model.load_state_dict(weights, strict=True)
    except RuntimeError as err:
        first = str(err).splitlines()[0]
        raise TRMError(
            f"load_checkpoint={path}: weights do not fit this arch ({first}). Match arch.*."
        ) from None
    return kind
