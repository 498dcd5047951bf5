"""Importing the URM reference (TRM_URM checkout) on CPU for parity tests.

The reference imports FlashAttention, which has no CPU build; a stand-in module with the same call
(`flash_attn_func(q, k, v, causal)` on [B, S, H, K]) computes it with torch's SDPA. The reference and
upstream TRM both name their package `models`, so it is imported with a clean `models` namespace and
the previous one is put back afterwards.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from typing import Any

import torch
import torch.nn.functional as F

from tests.helpers import require_modules


def _flash_attn_func(q, k, v, causal=False, **_):
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal
    )
    return out.transpose(1, 2)


def import_reference(path: str) -> tuple[type, type]:
    """(URM model class, its ACTLossHead class) from the checkout at `path`."""
    require_modules("pydantic", "einops")
    saved = {name: mod for name, mod in sys.modules.items() if name == "models" or name.startswith("models.")}
    for name in saved:
        del sys.modules[name]
    shim = types.ModuleType("flash_attn_interface")
    shim.flash_attn_func = _flash_attn_func  # type: ignore[attr-defined]
    had_shim = "flash_attn_interface" in sys.modules
    sys.modules.setdefault("flash_attn_interface", shim)
    sys.path.insert(0, path)
    try:
        from models.losses import ACTLossHead
        from models.urm.urm import URM
    finally:
        sys.path.remove(path)
        for name in [n for n in sys.modules if n == "models" or n.startswith("models.")]:
            del sys.modules[name]
        sys.modules.update(saved)
        if not had_shim:
            del sys.modules["flash_attn_interface"]
    return URM, ACTLossHead


def reference_head(config: Any, path: str, loss_type: str = "stablemax_cross_entropy") -> torch.nn.Module:
    """The reference's loss head around its URM, built from our URMConfig's values."""
    urm, head = import_reference(path)
    values = dataclasses.asdict(config)
    for ours_only in ("conv_kernel", "conv_dtype", "halt_exploration_prob", "eval_early_halt"):
        values.pop(ours_only)
    values["pos_encodings"] = "rope"
    model = urm(values)
    if config.conv_dtype != "bfloat16":  # the reference hard-codes bfloat16 for its convolution
        dtype = getattr(torch, config.conv_dtype)
        for layer in model.inner.layers:
            layer.mlp.dwconv.to(dtype)
    return head(model, loss_type=loss_type)
