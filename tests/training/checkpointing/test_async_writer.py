"""Host snapshots (byte-identical torch.save, isolated from later in-place updates, storages shared as in
the original) and the checkpoint writer (one save in flight, failures raised in the caller's thread)."""

from __future__ import annotations

import hashlib
import io
import threading
import time

import numpy as np
import pytest
import torch

from trm.training.checkpointing.async_writer import CheckpointWriter, HostBuffers, snapshot, snapshot_bytes


def saved_sha(obj) -> str:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return hashlib.sha256(buf.getvalue()).hexdigest()


def training_state() -> dict:
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    table = torch.randn(6, 4)
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "table": table,
        "row_view": table[2:4],  # a view: torch.save writes the whole storage once
        "loader": {"position": np.arange(3), "pass": 1},
        "empty": torch.empty(0),
    }


@pytest.mark.parametrize("buffers", [None, HostBuffers()])
def test_snapshot_writes_the_same_bytes_and_is_isolated(buffers) -> None:
    state = training_state()
    before = saved_sha(state)
    copy = snapshot(state, buffers)
    assert saved_sha(copy) == before
    assert copy["row_view"].untyped_storage().data_ptr() == copy["table"].untyped_storage().data_ptr()
    assert copy["table"].untyped_storage().data_ptr() != state["table"].untyped_storage().data_ptr()
    with torch.no_grad():  # the next optimizer step
        state["table"].add_(1.0)
        state["model"]["weight"].mul_(2.0)
    state["loader"]["position"][0] = 99
    assert saved_sha(copy) == before
    assert (
        snapshot_bytes(state)
        == snapshot_bytes(copy)
        == sum(t.untyped_storage().nbytes() for t in (*state["model"].values(), state["table"]))
        + sum(t.untyped_storage().nbytes() for s in state["optimizer"]["state"].values() for t in s.values())
    )


def test_host_buffers_are_reused_when_the_sizes_match() -> None:
    buffers = HostBuffers()
    first = snapshot({"a": torch.ones(8)}, buffers)["a"]
    second = snapshot({"a": torch.zeros(8)}, buffers)["a"]
    assert first.untyped_storage().data_ptr() == second.untyped_storage().data_ptr()
    assert torch.equal(second, torch.zeros(8))


def test_one_save_in_flight_a_second_waits() -> None:
    writer = CheckpointWriter()
    events: list[str] = []
    release = threading.Event()

    def first() -> None:
        release.wait(5)
        events.append("first done")

    writer.submit(first)
    assert writer.busy and not writer.failed
    threading.Timer(0.2, release.set).start()
    start = time.perf_counter()
    writer.submit(lambda: events.append("second"))
    assert time.perf_counter() - start >= 0.15  # waited for the first
    writer.wait()
    assert events == ["first done", "second"]


@pytest.mark.parametrize("asynchronous", [True, False])
def test_a_failure_is_kept_and_raised_once_in_the_callers_thread(asynchronous: bool) -> None:
    writer = CheckpointWriter(asynchronous)

    def fail() -> None:
        raise OSError(5, "Input/output error")

    writer.submit(fail)
    writer.join()
    assert writer.failed and isinstance(writer.error, OSError)
    with pytest.raises(OSError, match="Input/output error"):
        writer.wait()
    writer.wait()  # raised once
    assert not writer.failed
    with pytest.raises(OSError):  # a submit after an unraised failure raises it first
        writer.submit(fail)
        writer.submit(lambda: None)
