"""AdamATan2 with the update rule of the `adam-atan2` 0.0.3 CUDA extension, in PyTorch foreach ops.

Per element, in the extension's order (scalars computed in Python double, math in fp32 or fp64):
    p ← p·(1 − lr·wd);  m ← lerp(m, g, 1−β1);  v ← lerp(v, g², 1−β2)
    p ← p − (lr / (1−β1^t)) · atan2(m, sqrt(v) / sqrt(1−β2^t))
The state layout equals the extension's (0-d fp32 `step` on the param's device, `exp_avg`/`exp_avg_sq` in the
param dtype), so optimizer state dicts move between the two backends.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.optim import Optimizer

from trm.errors import TRMError

_LOW_PRECISION = (torch.float16, torch.bfloat16)


class AdamATan2(Optimizer):
    """Pure-PyTorch AdamATan2 (0.0.3 rule: β1 bias correction outside atan2, a = b = 1, no epsilon)."""

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        weight_decay: float = 1e-2,
    ) -> None:
        if not lr >= 0.0:
            raise TRMError(f"AdamATan2 lr={lr} must be >= 0 (0 is allowed: the schedule sets it each step).")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise TRMError(f"AdamATan2 betas={betas} must lie in [0, 1) (e.g. beta1=0.9 beta2=0.95).")
        if not weight_decay >= 0.0:
            raise TRMError(f"AdamATan2 weight_decay={weight_decay} must be >= 0.")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "weight_decay": weight_decay})
        # Host copy of each param's step so no device sync is needed to compute the scalars.
        self._host_step: dict[torch.Tensor, int] = {}

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """One update of every param that has a gradient."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr = float(group["lr"])
            beta1, beta2 = group["betas"]
            # Bucket by (device, dtype, step count): one foreach chain per bucket, normally a single one.
            buckets: dict[tuple[torch.device, torch.dtype, int], list[torch.Tensor]] = defaultdict(list)
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise TRMError("AdamATan2 does not support sparse gradients; use dense parameters.")
                t = self._advance(p)
                buckets[(p.device, p.dtype, t)].append(p)
            for (_, dtype, t), params in buckets.items():
                states = [self.state[p] for p in params]
                torch._foreach_add_([s["step"] for s in states], 1.0)
                _update(
                    params,
                    [p.grad for p in params],
                    [s["exp_avg"] for s in states],
                    [s["exp_avg_sq"] for s in states],
                    t=t,
                    lr=lr,
                    beta1=beta1,
                    beta2=beta2,
                    weight_decay=float(group["weight_decay"]),
                    low_precision=dtype in _LOW_PRECISION,
                )
        return loss

    def _advance(self, p: torch.Tensor) -> int:
        """Initialise state lazily and return the step number t of this update (1 for the first)."""
        state = self.state[p]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            self._host_step[p] = 0
        elif p not in self._host_step:  # state loaded from a state dict: one sync per param, once
            self._host_step[p] = int(state["step"].item())
        self._host_step[p] += 1
        return self._host_step[p]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load state (ours or the extension's); host step counters are re-read lazily."""
        from trm.optim.placement import place_state

        super().load_state_dict(state_dict)
        self._host_step.clear()
        place_state(self)  # `step` a 0-d fp32 tensor on the param device, moments in the param dtype


def _update(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    exp_avgs: list[torch.Tensor],
    exp_avg_sqs: list[torch.Tensor],
    *,
    t: int,
    lr: float,
    beta1: float,
    beta2: float,
    weight_decay: float,
    low_precision: bool,
) -> None:
    """The 0.0.3 element update for one bucket of same-dtype tensors at step t."""
    bias_correction1 = 1.0 - beta1**t
    bias_correction2_sqrt = math.sqrt(1.0 - beta2**t)
    step_size = lr / bias_correction1
    wd_factor = 1.0 - lr * weight_decay

    if low_precision:  # fp32 working copies, like the kernel's opmath; rounded on store
        work_p = [p.float() for p in params]
        work_g = [g.float() for g in grads]
        work_m = [m.float() for m in exp_avgs]
        work_v = [v.float() for v in exp_avg_sqs]
    else:
        work_p, work_g, work_m, work_v = params, grads, exp_avgs, exp_avg_sqs

    if wd_factor != 1.0:
        torch._foreach_mul_(work_p, wd_factor)
    torch._foreach_lerp_(work_m, work_g, 1.0 - beta1)
    torch._foreach_lerp_(work_v, torch._foreach_mul(work_g, work_g), 1.0 - beta2)
    denom = torch._foreach_sqrt(work_v)
    torch._foreach_div_(denom, bias_correction2_sqrt)
    for m, d in zip(work_m, denom, strict=True):  # there is no foreach atan2: one kernel per tensor
        torch.atan2(m, d, out=d)
    torch._foreach_add_(work_p, denom, alpha=-step_size)

    if low_precision:
        torch._foreach_copy_(params, work_p)
        torch._foreach_copy_(exp_avgs, work_m)
        torch._foreach_copy_(exp_avg_sqs, work_v)
