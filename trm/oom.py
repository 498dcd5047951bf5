"""CUDA out-of-memory: recognising one (an exception, or a log's text) and the error that ends training on one.

The trainer turns an out-of-memory error of a training step or an in-run evaluation into `OutOfMemory`: one
line naming the step, the micro-batch and the next one down, and exit OUT_OF_MEMORY (trm.exit_codes). The
launcher (trm.launch.supervision.stepdown) and adaptation (trm.adapt.batch) answer it by halving the
micro-batch and doubling the gradient accumulation (`trm.batching.halved_micro_batch`), which keeps the
global batch and so the training math.
"""

from __future__ import annotations

import gc
import re

from trm import exit_codes
from trm.errors import TRMError

# What an out-of-memory error of CUDA prints (torch's allocator, cuBLAS's workspace, cuDNN).
OOM_TEXT = re.compile(
    r"out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED", re.IGNORECASE
)
DETAIL_CHARS = 160


def is_out_of_memory(err: BaseException) -> bool:
    """Whether `err` is a GPU out-of-memory error (torch's OutOfMemoryError, or a RuntimeError saying so)."""
    import torch

    if isinstance(err, torch.cuda.OutOfMemoryError):
        return True
    return isinstance(err, RuntimeError) and bool(OOM_TEXT.search(str(err)))


def detail(err: BaseException) -> str:
    """The first sentences of the error (torch's message goes on about the allocator for many lines)."""
    text = " ".join(str(err).split())
    first = ". ".join(text.split(". ")[:2]).rstrip(".")
    return first if len(first) <= DETAIL_CHARS else first[: DETAIL_CHARS - 3] + "..."


def free_cached_memory() -> None:
    """Drop unreachable tensors and give CUDA's cached blocks back before a smaller attempt in-process."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class OutOfMemory(TRMError):
    """Training ran out of GPU memory; exit OUT_OF_MEMORY. `micro_batch_size` is the one that did not fit."""

    exit_code = exit_codes.OUT_OF_MEMORY

    def __init__(self, message: str, *, micro_batch_size: int, step: int) -> None:
        super().__init__(message)
        self.micro_batch_size = micro_batch_size
        self.step = step


def training_out_of_memory(
    err: BaseException, *, step: int, micro_batch_size: int, accumulation: int, global_batch_size: int,
    world_size: int, smaller: int | None,
) -> OutOfMemory:  # fmt: skip
    """The one-line error of a training run that ran out of memory after optimizer step `step` (in the
    next step, or in the evaluation after it)."""
    where = (
        f"CUDA out of memory after step {step} with micro_batch_size={micro_batch_size} ({accumulation} "
        f"accumulation step(s), global_batch_size={global_batch_size} over {world_size} process(es)): "
        f"{detail(err)}. Nothing of this step was saved; the newest complete checkpoint is intact (exit "
        f"{exit_codes.OUT_OF_MEMORY})."
    )
    if smaller is None:
        fix = (
            " Even micro_batch_size=1 does not fit: train on a GPU with more memory (the tiers of "
            "trm/launch/host/hardware.toml), or a smaller model"
        )
    else:
        fix = (
            f" The launcher restarts it with micro_batch_size={smaller} (same global batch); by hand, run the "
            f"same command with micro_batch_size={smaller}: it resumes from that checkpoint"
        )
    return OutOfMemory(where + fix, micro_batch_size=micro_batch_size, step=step)
