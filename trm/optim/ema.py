"""Exponential moving average of a model's trainable parameters (not its buffers or puzzle table)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trm.errors import TRMError

COMPILE_PREFIX = "_orig_mod."


def _trainable(model: nn.Module) -> dict[str, torch.Tensor]:
    """Trainable parameters by name, with torch.compile's `_orig_mod.` removed so names are stable."""
    return {n.replace(COMPILE_PREFIX, ""): p for n, p in model.named_parameters() if p.requires_grad}


class EMA:
    """shadow ← (1−rate)·param + rate·shadow after every update; `copy_to` loads the shadow into a model."""

    def __init__(self, model: nn.Module, rate: float = 0.999) -> None:
        if not 0.0 <= rate <= 1.0:
            raise TRMError(f"ema_rate={rate} must lie in [0, 1] (upstream uses 0.999).")
        self.rate = rate
        self.shadow = {n: p.detach().clone() for n, p in _trainable(model).items()}

    def _pairs(self, model: nn.Module) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        params = _trainable(model)
        if params.keys() != self.shadow.keys():
            missing = sorted(params.keys() ^ self.shadow.keys())[:5]
            raise TRMError(f"EMA shadow does not match the model (differing parameters: {missing}).")
        names = list(self.shadow)
        return [self.shadow[n] for n in names], [params[n].detach() for n in names]

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """Move the shadow towards the model's current parameters."""
        shadow, params = self._pairs(model)
        torch._foreach_mul_(shadow, self.rate)
        torch._foreach_add_(shadow, params, alpha=1.0 - self.rate)

    @torch.no_grad()
    def copy_to(self, model: nn.Module) -> None:
        """Overwrite the model's trainable parameters with the shadow."""
        shadow, params = self._pairs(model)
        torch._foreach_copy_(params, shadow)

    def state_dict(self) -> dict[str, Any]:
        """Rate and shadow tensors."""
        return {"rate": self.rate, "shadow": dict(self.shadow)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore rate and shadow (copied into the existing tensors, keeping their device)."""
        if state["shadow"].keys() != self.shadow.keys():
            raise TRMError(
                "EMA state does not match the model's parameters: was it saved for another config?"
            )
        self.rate = float(state["rate"])
        with torch.no_grad():
            for name, value in state["shadow"].items():
                self.shadow[name].copy_(value)
