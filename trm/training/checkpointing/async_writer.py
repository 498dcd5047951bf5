"""Asynchronous checkpoint saves: snapshot the state to host memory, write it on one background thread.

The training thread only copies what a checkpoint holds into host memory (`snapshot`: on CUDA into
pinned buffers reused from save to save, with non-blocking copies and one synchronize; on CPU a copy,
because training goes on mutating the parameters) and hands the copy to `CheckpointWriter`. Its single
thread runs the rest (torch.save, fsync, sha256, manifest, COMPLETE, rename, prune). At most one save is
in flight: a second `submit` first waits for the first. A failure of the writer is kept and raised in
the training thread (`raise_if_failed`, `wait`), never lost; the partial folder is removed first, so the
previous checkpoint stays the newest complete one.

Tensors are copied storage by storage, with their offsets and strides, so views and tensors sharing a
storage stay shared: `torch.save` of the snapshot writes exactly the bytes it writes for the live state.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any

import torch

from trm.training.accumulation import tree_map


class HostBuffers:
    """Host memory for snapshots, reused from one save to the next (pinned when the source is on CUDA)."""

    def __init__(self) -> None:
        self._buffers: list[torch.Tensor] = []

    def get(self, index: int, nbytes: int, pinned: bool) -> torch.Tensor:
        """A uint8 host tensor of `nbytes` for the `index`-th storage of a snapshot."""
        while len(self._buffers) <= index:
            self._buffers.append(torch.empty(0, dtype=torch.uint8))
        buf = self._buffers[index]
        if buf.numel() != nbytes or buf.is_pinned() != pinned:
            buf = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
            self._buffers[index] = buf
        return buf


def _bytes_of(storage: torch.UntypedStorage) -> torch.Tensor:
    """A uint8 tensor over the whole of `storage` (no copy)."""
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


def snapshot(obj: Any, buffers: HostBuffers | None = None) -> Any:
    """A host copy of `obj` (nested dicts, lists, tuples, dataclasses; other leaves deep-copied).

    Every distinct tensor storage is copied once (to `buffers` when given, else fresh memory); CUDA
    copies are non-blocking, followed by one synchronize, so the snapshot is complete on return.
    """
    tensors: list[torch.Tensor] = []
    tree_map(lambda t: tensors.append(t) or t, obj)
    copies: dict[int, torch.UntypedStorage] = {}
    memo: dict[int, Any] = {}
    on_cuda = False
    for t in tensors:
        if id(t) in memo:
            continue
        storage = t.untyped_storage()
        key = storage.data_ptr() if storage.nbytes() else -1 - len(memo)
        if key not in copies:
            pinned = storage.device.type == "cuda"
            on_cuda = on_cuda or pinned
            if buffers is not None:
                host = buffers.get(len(copies), storage.nbytes(), pinned)
            else:
                host = torch.empty(storage.nbytes(), dtype=torch.uint8, pin_memory=pinned)
            host.copy_(_bytes_of(storage), non_blocking=pinned)
            copies[key] = host.untyped_storage()
        view = torch.empty(0, dtype=t.dtype).set_(copies[key], t.storage_offset(), t.size(), t.stride())
        memo[id(t)] = view.requires_grad_(t.requires_grad)
    if on_cuda:
        torch.cuda.synchronize()
    return copy.deepcopy(obj, memo)


def snapshot_bytes(obj: Any) -> int:
    """Bytes of the distinct tensor storages in `obj` (what a checkpoint of it takes, about)."""
    sizes: dict[int, int] = {}

    def count(t: torch.Tensor) -> torch.Tensor:
        sizes[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    tree_map(count, obj)
    return sum(sizes.values())


class CheckpointWriter:
    """One background thread that runs save jobs one at a time; `asynchronous=False` runs them inline.

    Either way a job's failure is kept and raised by `wait` in the caller's thread.
    """

    def __init__(self, asynchronous: bool = True) -> None:
        self.asynchronous = asynchronous
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def submit(self, job: Callable[[], None], name: str = "checkpoint-writer") -> None:
        """Start `job` after the previous one finished (whose failure is raised here first)."""
        self.wait()

        def run() -> None:
            try:
                job()
            except BaseException as err:
                self._error = err

        if not self.asynchronous:
            run()  # inline; its failure is raised by `wait` like a background one's
            return
        # Not a daemon: an interpreter that exits while a save is in flight finishes the save first.
        self._thread = threading.Thread(target=run, name=name, daemon=False)
        self._thread.start()

    @property
    def busy(self) -> bool:
        """A save is in flight."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def error(self) -> BaseException | None:
        """The failure of the last finished save, not raised yet."""
        return None if self.busy else self._error

    @property
    def failed(self) -> bool:
        """The last save failed and its error was not raised yet (never blocks)."""
        return self.error is not None

    def join(self) -> None:
        """Wait for the save in flight (its failure stays in `error`)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def wait(self) -> None:
        """Wait for the save in flight; raise its failure in this thread (once)."""
        self.join()
        error, self._error = self._error, None
        if error is not None:
            raise error
