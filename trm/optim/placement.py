"""Optimizer state after a resume: every tensor on its parameter's device, in the dtype the step kernels read.

Checkpoints load with map_location="cpu". `torch.optim.Optimizer.load_state_dict` then moves the moment
buffers to each parameter's device and dtype, but leaves `state["step"]` where it was loaded (the CPU)
unless the optimizer's param group says fused/capturable. The compiled adam-atan2 extension declares
neither, yet its kernel reads `step` through a device pointer as a 0-d float32; a CPU or float64/int64
`step` there is a crash or garbage. `place_state` restores the layout both AdamATan2 backends create:
`step` a 0-d float32 tensor on the parameter's device, every other floating tensor in the parameter's
dtype on its device.
"""

from __future__ import annotations

import torch
from torch.optim import Optimizer

from trm.errors import TRMError

STEP_DTYPE = torch.float32


def place_state(optimizer: Optimizer, *, source: str = "the loaded optimizer state") -> None:
    """Move/cast every state tensor of `optimizer` in place; a buffer whose shape differs is a TRMError."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            state = optimizer.state.get(param)
            if not state:
                continue
            for key, value in list(state.items()):
                if key == "step":
                    state[key] = _step_tensor(value, param.device, source)
                elif isinstance(value, torch.Tensor):
                    if value.dim() > 0 and value.shape != param.shape:
                        raise TRMError(
                            f"{source}: optimizer state {key!r} has shape {tuple(value.shape)} but its "
                            f"parameter has {tuple(param.shape)}; the checkpoint belongs to another "
                            "model. Resume with the architecture it was saved with, or use a new checkpoint_path."
                        )
                    dtype = param.dtype if value.is_floating_point() and param.is_floating_point() else None
                    state[key] = value.to(device=param.device, dtype=dtype)


def _step_tensor(value: object, device: torch.device, source: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise TRMError(f"{source}: optimizer state 'step' has {value.numel()} elements, expected one.")
        return value.detach().reshape(()).to(device=device, dtype=STEP_DTYPE)
    if isinstance(value, (int, float)):  # older torch optimizers stored a Python number
        return torch.tensor(float(value), dtype=STEP_DTYPE, device=device)
    raise TRMError(f"{source}: optimizer state 'step' is a {type(value).__name__}, expected a number.")


def state_problems(optimizer: Optimizer) -> list[str]:
    """Every state tensor that breaks the layout `place_state` establishes (empty when all is well)."""
    problems = []
    for gi, group in enumerate(optimizer.param_groups):
        for pi, param in enumerate(group["params"]):
            for key, value in optimizer.state.get(param, {}).items():
                where = f"group {gi} param {pi} state {key!r}"
                if not isinstance(value, torch.Tensor):
                    problems.append(f"{where} is a {type(value).__name__}, not a tensor")
                    continue
                if value.device != param.device:
                    problems.append(f"{where} is on {value.device}, its parameter on {param.device}")
                want = (
                    STEP_DTYPE if key == "step" else param.dtype if value.is_floating_point() else value.dtype
                )
                if value.dtype != want:
                    problems.append(f"{where} is {value.dtype}, expected {want}")
                if key == "step" and value.dim() != 0:
                    problems.append(f"{where} has shape {tuple(value.shape)}, expected a 0-d tensor")
    return problems
