"""Process group setup and the few collectives training and evaluation share (gloo on CPU, NCCL on CUDA).

A run is distributed when torchrun set WORLD_SIZE > 1. On CUDA a second gloo group carries Python
objects (evaluator predictions), as NCCL cannot gather them.
"""

from __future__ import annotations

import datetime
import logging
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from trm.errors import TRMError

log = logging.getLogger(__name__)

STOP_TOGETHER_TIMEOUT = datetime.timedelta(seconds=120)  # how long a stopping rank waits for the others
_EVERY_RANK = "_trm_raised_on_every_rank"


@dataclass
class DistInfo:
    """Where this process sits: rank, world size, device, and the group for object collectives."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")  # noqa: RUF009 (immutable default)
    object_group: Any = None

    @property
    def is_main(self) -> bool:
        """True on rank 0 (the process that writes files and logs)."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """True when a process group with more than one rank exists."""
        return self.world_size > 1


def resolve_device(requested: str) -> torch.device:
    """`auto` → CUDA when present, else CPU; `cuda` without a GPU is an error with the fix."""
    if requested == "cuda" and not torch.cuda.is_available():
        raise TRMError(
            "device=cuda but torch sees no CUDA GPU: use device=cpu (or auto), or check nvidia-smi."
        )
    if requested == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))


@contextmanager
def initialize(requested_device: str = "auto") -> Iterator[DistInfo]:
    """Set up the process group from torchrun's environment (if any) and tear it down at the end."""
    device = resolve_device(requested_device)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        if device.type == "cuda":
            torch.cuda.set_device(device)
        yield DistInfo(device=device)
        return
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    timeout = datetime.timedelta(minutes=30)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", timeout=timeout, device_id=device)
        object_group = dist.new_group(backend="gloo", timeout=timeout)
    else:
        dist.init_process_group("gloo", timeout=timeout)
        object_group = dist.group.WORLD
    try:
        yield DistInfo(rank, world_size, local_rank, device, object_group)
    except BaseException as err:
        if getattr(err, _EVERY_RANK, False):
            _stop_together(object_group)
        raise
    finally:
        dist.destroy_process_group()


def raised_on_every_rank(err: BaseException) -> BaseException:
    """Mark `err` as raised by every rank at the same point (after a collective agreed on it, e.g. a full
    disk): on its way out of `initialize` the ranks then stop together (`_stop_together`)."""
    setattr(err, _EVERY_RANK, True)
    return err


def _stop_together(group: Any) -> None:
    """Every rank stops with the same error: let each end with its exit code, none killed on the way.

    As soon as one rank exits, torchrun SIGTERMs the others (its process group), so a rank still tearing
    down (closing its sinks, the process group) would die of that signal (-15) instead of exiting with the
    error's code; and a rank that exits while a peer still uses the process group can make the peer's gloo
    abort (SIGABRT). So each rank ignores SIGTERM from here on, then waits for the others at a barrier
    (out-of-band of the training collectives: gloo, `STOP_TOGETHER_TIMEOUT`): no rank exits before every
    rank has stopped using the group and ignores the signal. A rank that never arrives is logged and the
    stop goes on; torchrun's SIGKILL still bounds a rank that would not exit.
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        dist.monitored_barrier(group=group, timeout=STOP_TOGETHER_TIMEOUT, wait_all_ranks=True)
    except RuntimeError as err:
        log.warning("stopping without the other ranks: %s", str(err).splitlines()[0] if str(err) else err)


def all_reduce_sum_(tensors: list[torch.Tensor], info: DistInfo) -> None:
    """Sum tensors over ranks in place (one flat buffer, one collective)."""
    if not info.distributed or not tensors:
        return
    flat = torch.cat([t.reshape(-1) for t in tensors])
    dist.all_reduce(flat)
    offset = 0
    for t in tensors:
        t.copy_(flat[offset : offset + t.numel()].view_as(t))
        offset += t.numel()


def any_rank(flags: list[bool], info: DistInfo, extra: torch.Tensor | None = None) -> list[bool]:
    """Element-wise OR of boolean flags over ranks; the 0/1 values of `extra` (a tensor already on the
    device, e.g. a step's non-finite flags) join the same all-reduce and follow `flags` in the result."""
    if not info.distributed and extra is None:
        return flags
    t = torch.tensor([int(f) for f in flags], dtype=torch.int32, device=info.device)
    if extra is not None:
        t = torch.cat([t, extra.reshape(-1).to(device=info.device, dtype=torch.int32)])
    if info.distributed:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [bool(v) for v in t.tolist()]


def barrier(info: DistInfo) -> None:
    """Wait for every rank (no-op in one process)."""
    if info.distributed:
        dist.barrier(group=info.object_group)


def broadcast_params_(module: torch.nn.Module, info: DistInfo) -> None:
    """Make every rank start from rank 0's parameters and buffers."""
    if not info.distributed:
        return
    with torch.no_grad():
        for t in [*module.parameters(), *module.buffers()]:
            dist.broadcast(t.data, src=0)


def gather_objects(obj: Any, info: DistInfo) -> list[Any] | None:
    """Gather a picklable object from every rank to rank 0 (None elsewhere); works without a group too."""
    if not info.distributed:
        return [obj]
    out: list[Any] | None = [None] * info.world_size if info.is_main else None
    dist.gather_object(obj, out, dst=0, group=info.object_group)
    return out


def broadcast_object(obj: Any, info: DistInfo) -> Any:
    """Rank 0's object on every rank."""
    if not info.distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0, group=info.object_group)
    return box[0]
