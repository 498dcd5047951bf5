"""Building the URM reference model (a URM checkout) on CPU, for the model bench and the parity tests.

The reference imports FlashAttention, which has no CPU build; a stand-in module with the same call
(`flash_attn_func(q, k, v, causal)` on [B, S, H, K]) computes it with torch's SDPA. The reference and
upstream TRM both name their package `models`, so it is imported with a clean `models` namespace and
the previous one is put back afterwards. Nothing of the reference is copied here: it is imported.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
import types
from typing import Any

import torch
import torch.nn.functional as F

from trm.errors import TRMError

# Our URMConfig keys the reference's config has no field for (fixed or absent there).
OURS_ONLY = ("conv_kernel", "conv_dtype", "halt_exploration_prob", "eval_early_halt")


def flash_attn_func(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, **_: Any
) -> torch.Tensor:
    """FlashAttention's call on [batch, seq, heads, head_dim], computed with torch's SDPA."""
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal
    )
    return out.transpose(1, 2)


def import_reference(path: str) -> tuple[type, type]:
    """(URM model class, its ACTLossHead class) from the checkout at `path`."""
    if not os.path.isfile(os.path.join(path, "models", "urm", "urm.py")):
        raise TRMError(f"TRM_URM={path} is not a URM checkout (no models/urm/urm.py): point it at a clone.")
    missing = [name for name in ("pydantic", "einops") if importlib.util.find_spec(name) is None]
    if missing:
        raise TRMError(f"the URM reference needs {', '.join(missing)}: pip install -e '.[upstream]'")
    saved = {name: mod for name, mod in sys.modules.items() if name == "models" or name.startswith("models.")}
    for name in saved:
        del sys.modules[name]
    shim = types.ModuleType("flash_attn_interface")
    shim.flash_attn_func = flash_attn_func  # type: ignore[attr-defined]
    had_shim = "flash_attn_interface" in sys.modules
    sys.modules.setdefault("flash_attn_interface", shim)
    sys.path.insert(0, path)
    try:
        from models.losses import ACTLossHead
        from models.urm.urm import URM
    except ImportError as exc:
        raise TRMError(f"cannot import the URM reference from {path} ({exc})") from exc
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
    for ours_only in OURS_ONLY:
        values.pop(ours_only)
    values["pos_encodings"] = "rope"
    model = urm(values)
    if config.conv_dtype != "bfloat16":  # the reference hard-codes bfloat16 for its convolution
        dtype = getattr(torch, config.conv_dtype)
        for layer in model.inner.layers:
            layer.mlp.dwconv.to(dtype)
    return head(model, loss_type=loss_type)
