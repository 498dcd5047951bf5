"""Muon for matrices with an AdamW rule for everything else, as URM's ARC-AGI-2 recipe (`use_muon=True`) uses.

Matrix parameters (2-D), per step, with momentum μ, learning rate lr and weight decay λ:
    b ← μ·b + g;  u ← g + μ·b (Nesterov) or b
    O ← NS(bf16(u))             quintic Newton–Schulz orthogonalisation in fp32, a coefficient schedule
    p ← p·(1 − lr·λ) − lr·ρ·√max(rows, cols)·O      (ρ = 0.2: Moonlight's match of AdamW's update RMS)
NS normalises X = u / max(‖u‖_F, 1e-7) (transposed when rows > cols) and applies, for step i with
coefficients (a, b, c)_i, X ← a·X + (b·XXᵀ + c·(XXᵀ)²)·X.

Other parameters (biases, the convolution), per step t of their group:
    m ← lerp(m, g, 1−β1);  v ← lerp(v, g², 1−β2)
    p ← p·(1 − lr·λ) − lr·√(1−β2^t)/(1−β1^t) · m / (ε + √v)
The torch version pinned here has a Muon with a single set of NS coefficients and another momentum form,
so it does not reproduce the reference's numbers; this one does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.optim import Optimizer

from trm.errors import TRMError

# (a, b, c) per Newton–Schulz step; later steps reuse the last triple.
NS_COEFFICIENTS = (
    (7.2086, -15.5131, 9.0178),
    (3.9623, -2.5813, 0.4542),
    (3.9466, -2.5765, 0.4544),
    (3.8991, -2.5671, 0.4566),
    (3.7186, -2.5308, 0.4653),
    (3.1390, -2.3073, 0.4733),
    (2.1715, -1.5246, 0.3885),
    (1.8648, -1.2224, 0.3577),
)


def orthogonalize(update: torch.Tensor, steps: int) -> torch.Tensor:
    """Approximate U·Vᵀ of `update` (2-D) by `steps` quintic Newton–Schulz iterations, in fp32."""
    x = update.float()
    transpose = x.shape[-2] > x.shape[-1]
    if transpose:
        x = x.mT
    x = x / x.norm(dim=(-2, -1), keepdim=True).clamp_min(1e-7)
    for i in range(steps):
        a, b, c = NS_COEFFICIENTS[min(i, len(NS_COEFFICIENTS) - 1)]
        gram = x @ x.mT
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.mT if transpose else x


class Muon(Optimizer):
    """Muon on groups with `use_muon=True` (2-D parameters), the AdamW rule above on the other groups."""

    def __init__(
        self,
        param_groups: Iterable[dict[str, Any]],
        lr: float = 1e-4,
        weight_decay: float = 0.1,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_steps: int = 5,
        matched_adamw_rms: float = 0.2,
        adamw_betas: tuple[float, float] = (0.9, 0.95),
        adamw_eps: float = 1e-8,
    ) -> None:
        defaults = dict(
            lr=lr,
            weight_decay=weight_decay,
            momentum=momentum,
            nesterov=nesterov,
            ns_steps=ns_steps,
            matched_adamw_rms=matched_adamw_rms,
            adamw_betas=tuple(adamw_betas),
            adamw_eps=adamw_eps,
            use_muon=False,
        )
        super().__init__(list(param_groups), defaults)
        for group in self.param_groups:
            if group["use_muon"] and any(p.ndim != 2 for p in group["params"]):
                raise TRMError(
                    "Muon orthogonalises matrices only: put non-2-D parameters in a use_muon=False group."
                )

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """One update of every parameter that has a gradient."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            if group["use_muon"]:
                self._muon(group)
            else:
                self._adamw(group)
        return loss

    def _muon(self, group: dict[str, Any]) -> None:
        lr, wd, mu = group["lr"], group["weight_decay"], group["momentum"]
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.zeros_like(p.grad)
            buf = state["momentum_buffer"]
            buf.mul_(mu).add_(p.grad)
            update = p.grad.add(buf, alpha=mu) if group["nesterov"] else buf
            ortho = orthogonalize(update.bfloat16(), group["ns_steps"])
            scale = lr * group["matched_adamw_rms"] * math.sqrt(max(p.shape[0], p.shape[1]))
            p.mul_(1 - lr * wd)
            p.add_(ortho.to(p.dtype), alpha=-scale)

    def _adamw(self, group: dict[str, Any]) -> None:
        group["step"] = group.get("step", 0) + 1
        t, lr, wd = group["step"], group["lr"], group["weight_decay"]
        beta1, beta2 = group["adamw_betas"]
        step_size = lr * math.sqrt(1 - beta2**t) / (1 - beta1**t)
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if "exp_avg" not in state:
                state["exp_avg"] = torch.zeros_like(p.grad)
                state["exp_avg_sq"] = torch.zeros_like(p.grad)
            m, v = state["exp_avg"], state["exp_avg_sq"]
            m.lerp_(p.grad, 1 - beta1)
            v.lerp_(p.grad.square(), 1 - beta2)
            p.mul_(1 - lr * wd)
            p.add_(m / (group["adamw_eps"] + v.sqrt()), alpha=-step_size)


def build_muon(
    model: torch.nn.Module, lr: float, weight_decay: float, betas: tuple[float, float] = (0.9, 0.95)
) -> Muon:
    """URM's grouping: every 2-D parameter under Muon, the rest under the AdamW rule, same lr and decay.

    (The reference fixes the decay at 0.1 and the AdamW betas at (0.9, 0.95), the trainer's defaults; here
    they follow `weight_decay`, `beta1`, `beta2`.)"""
    params = [p for p in model.parameters() if p.requires_grad]
    return Muon(
        [
            {"params": [p for p in params if p.ndim == 2], "use_muon": True},
            {"params": [p for p in params if p.ndim != 2], "use_muon": False},
        ],
        lr=lr,
        weight_decay=weight_decay,
        adamw_betas=betas,
    )
