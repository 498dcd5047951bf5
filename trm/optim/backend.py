"""Choosing the AdamATan2 backend: the compiled `adam_atan2` CUDA extension or our PyTorch implementation."""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Iterable
from typing import Any

import torch
from torch.optim import Optimizer

from trm.errors import TRMError
from trm.optim.adam_atan2 import AdamATan2

BACKENDS = ("auto", "ext", "torch")
# How to build the extension where torch is CUDA and nvcc is present: our patched build (this GPU's SM
# only, offline, ninja when present) of the sdist that `make gpu-kit` puts in the GPU kit.
EXTENSION_INSTALL = (
    "python -m trm.images.buildtools install-adam-atan2 --sdist build/gpu-kit/adam_atan2-0.0.3.tar.gz "
    "(needs CUDA torch + nvcc; builds for the visible GPUs' SM only, offline)"
)

# Set to 1 by the GPU check in every child once it has built the extension: "auto" on CUDA parameters then
# means "ext" (an unusable extension is an error, never a silent fallback to the torch backend).
REQUIRE_EXTENSION_ENV = "TRM_REQUIRE_ADAM_EXT"

log = logging.getLogger("trm.optim")
_logged: set[str] = set()


def _extension_class() -> type[Optimizer] | None:
    """The extension's optimizer class, or None when it (or its compiled backend) does not import."""
    try:
        module = importlib.import_module("adam_atan2")
    except ImportError:
        return None
    return getattr(module, "AdamATan2", None)


def _extension_runs(cls: type[Optimizer], device: torch.device) -> str | None:
    """Run one tiny step on `device`; None if it works, else why not (e.g. no kernel for this GPU arch)."""
    try:
        probe = torch.zeros(4, device=device, requires_grad=True)
        probe.grad = torch.ones_like(probe)
        cls([probe], lr=1e-3).step()
        torch.cuda.synchronize(device)
    except Exception as exc:  # a missing arch surfaces as RuntimeError from the kernel launch
        return f"{type(exc).__name__}: {exc}"
    return None


def _extension_problem(cls: type[Optimizer], devices: set[torch.device]) -> str | None:
    """None when the extension can step parameters on every one of `devices`, else the reason."""
    if any(d.type != "cuda" for d in devices):
        return "the extension runs on CUDA only and some parameters are not on a CUDA device"
    for device in devices:
        problem = _extension_runs(cls, device)
        if problem is not None:
            return f"the extension fails on {device} ({problem})"
    return None


def _log_once(backend: str, reason: str) -> None:
    if backend not in _logged:
        _logged.add(backend)
        log.info("AdamATan2 backend: %s (%s)", backend, reason)


def build_adam_atan2(
    params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
    *,
    lr: float,
    betas: tuple[float, float],
    weight_decay: float,
    backend: str = "auto",
) -> Optimizer:
    """AdamATan2 from the extension ("ext"), ours ("torch"), or the extension when usable ("auto").

    The returned optimizer has `trm_backend` set to "ext" or "torch".
    """
    if backend not in BACKENDS:
        raise TRMError(f"optimizer backend {backend!r} is unknown: use one of {', '.join(BACKENDS)}.")
    params = list(params)
    tensors = [p for item in params for p in (item["params"] if isinstance(item, dict) else [item])]
    devices = {p.device for p in tensors}
    if (
        backend == "auto"
        and os.environ.get(REQUIRE_EXTENSION_ENV) == "1"
        and any(d.type == "cuda" for d in devices)
    ):
        backend = "ext"  # the extension was built for this run: falling back would hide that it does not work
    reason = "requested"
    if backend != "torch":
        cls = _extension_class()
        problem = (
            f"the adam_atan2 extension does not import; install it with {EXTENSION_INSTALL}"
            if cls is None
            else _extension_problem(cls, devices)
        )
        if problem is None:
            optimizer = cls(params, lr=lr, betas=betas, weight_decay=weight_decay)
            optimizer.trm_backend = "ext"  # type: ignore[attr-defined]
            _log_once("ext", "compiled adam_atan2 extension")
            return optimizer
        if backend == "ext":
            raise TRMError(
                f"optimizer backend 'ext' is not usable: {problem}. Or set the backend to auto/torch"
                f" (and unset {REQUIRE_EXTENSION_ENV})."
            )
        reason = problem
    optimizer = AdamATan2(params, lr=lr, betas=betas, weight_decay=weight_decay)
    optimizer.trm_backend = "torch"  # type: ignore[attr-defined]
    _log_once("torch", reason)
    return optimizer
