"""Build the next train batches in a background thread while the device runs the current step.

`prefetched(items, depth, pin_memory=...)` yields what `items` yields, in the same order, with up to `depth`
items built ahead by one daemon thread. With `pin_memory` the tensors of each item are copied to
page-locked host memory in that thread, so the trainer's `.to(device, non_blocking=True)` is an
asynchronous copy instead of a copy the host waits for. An exception raised while building an item is
raised in the consumer at that item; closing the consumer's generator (a loop that leaves early) stops the
thread, which closes `items` itself (a generator is only ever run by one thread).

The items are the very objects `items` yields (or pinned copies of their tensors): the batches, their order
and so the training are unchanged; only when they are built moves.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

import torch

T = TypeVar("T")

_POLL_S = 0.05  # how often a thread waiting for room in the queue checks whether it was stopped
_JOIN_S = 30.0  # a consumer that stops waits this long for the item being built (a hung source: not longer)


class _End:
    """The source is exhausted."""


class _Failure:
    """Building an item raised `error`."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


def pinned(item: Any) -> Any:
    """`item` with every tensor (also inside tuples, lists and dicts) copied to page-locked memory."""
    if isinstance(item, torch.Tensor):
        return item.pin_memory()
    if isinstance(item, dict):
        return {k: pinned(v) for k, v in item.items()}
    if isinstance(item, tuple | list):
        return type(item)(pinned(v) for v in item)
    return item


def prefetched(items: Iterable[T], depth: int, *, pin_memory: bool = False) -> Iterator[T]:
    """`items`, up to `depth` ahead, built in a background thread (see the module docstring)."""
    if depth < 1:
        raise ValueError(f"depth={depth}: prefetch at least one item ahead")
    ready: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stopped = threading.Event()

    def offer(value: Any) -> bool:
        """Queue `value` once there is room; False when the consumer stopped first."""
        while not stopped.is_set():
            try:
                ready.put(value, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def build() -> None:
        source = iter(items)
        try:
            for item in source:
                if not offer(pinned(item) if pin_memory else item):
                    return
            offer(_End())
        except BaseException as err:  # handed to the consumer, raised there
            offer(_Failure(err))
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()

    worker = threading.Thread(target=build, name="trm-batch-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            value = ready.get()
            if isinstance(value, _End):
                return
            if isinstance(value, _Failure):
                raise value.error
            yield value
    finally:
        stopped.set()
        worker.join(timeout=_JOIN_S)
