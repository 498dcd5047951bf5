"""trm.data.prefetch: the same items in the same order, built ahead in a thread that never runs away, fails
where the source failed and stops (closing the source) when the consumer stops."""

from __future__ import annotations

import itertools
import threading
import time

import pytest
import torch

from trm.data.prefetch import pinned, prefetched


def test_yields_the_source_items_in_order_as_the_same_objects():
    items = [{"x": torch.full((2,), float(i))} for i in range(7)]
    got = list(prefetched(iter(items), depth=2))
    assert len(got) == 7 and all(a is b for a, b in zip(got, items, strict=True))


def test_builds_at_most_depth_items_ahead_of_the_consumer():
    built = []

    def source():
        for i in itertools.count():
            built.append(i)
            yield i

    consumer = prefetched(source(), depth=3)
    assert next(consumer) == 0
    time.sleep(0.3)  # room for a runaway thread to build many more
    # one handed out, three queued, one more built and waiting for room in the queue
    assert len(built) <= 1 + 3 + 1
    consumer.close()


def test_an_error_while_building_is_raised_at_its_item():
    def source():
        yield 1
        yield 2
        raise ValueError("row 3 of the batch file is torn")

    consumer = prefetched(source(), depth=4)
    assert [next(consumer), next(consumer)] == [1, 2]
    with pytest.raises(ValueError, match="row 3 of the batch file is torn"):
        next(consumer)


def test_a_consumer_that_stops_early_stops_the_thread_and_closes_the_source():
    closed = threading.Event()

    def source():
        try:
            yield from itertools.count()
        finally:
            closed.set()

    before = {t.ident for t in threading.enumerate()}
    consumer = prefetched(source(), depth=2)
    assert next(consumer) == 0
    consumer.close()
    assert closed.is_set()  # by the thread itself, before close() returned
    assert all(t.ident in before for t in threading.enumerate() if t.name == "trm-batch-prefetch")


def test_depth_below_one_is_refused():
    with pytest.raises(ValueError, match="depth=0"):
        next(prefetched(iter([1]), depth=0))


def test_pinned_copies_every_tensor_of_nested_items(monkeypatch):
    copies = []

    def fake_pin(self):  # a CPU-only build cannot page-lock: record the call, copy as pin_memory does
        copies.append(self)
        return self.clone()

    monkeypatch.setattr(torch.Tensor, "pin_memory", fake_pin)
    a, b = torch.ones(2), torch.zeros(3)
    item = ("all", {"inputs": a, "ids": [b]}, 8)
    out = pinned(item)
    assert out[0] == "all" and out[2] == 8 and isinstance(out[1]["ids"], list)
    assert torch.equal(out[1]["inputs"], a) and out[1]["inputs"] is not a
    assert torch.equal(out[1]["ids"][0], b) and out[1]["ids"][0] is not b
    assert len(copies) == 2
    got = list(prefetched(iter([item]), depth=1, pin_memory=True))
    assert len(copies) == 4 and got[0][1]["inputs"] is not a


@pytest.mark.gpu
def test_pinned_batches_are_page_locked_on_a_cuda_host():
    batch = {"inputs": torch.arange(6, dtype=torch.int32).reshape(2, 3)}
    (got,) = list(prefetched(iter([batch]), depth=1, pin_memory=True))
    assert got["inputs"].is_pinned() and torch.equal(got["inputs"], batch["inputs"])
    on_device = got["inputs"].to("cuda", non_blocking=True)
    torch.cuda.synchronize()
    assert torch.equal(on_device.cpu(), batch["inputs"])
