"""A rank's CUDA RNG state is its own device's generator: a checkpoint resumes with fewer visible GPUs.

CUDA is simulated: torch.cuda's RNG functions are replaced by a stand-in with one CPU generator per
"visible GPU" that behaves as torch's does (`set_rng_state_all` indexes the generators of the devices
visible now, so a longer list fails with IndexError, as torch's `default_generators[i]` does).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from trm.training.accumulation import MicroBatchSplit
from trm.training.checkpointing.state import rank_shard, read_rng, rng_state, set_rng_state, write_rank_shard


class FakeCuda:
    """`n` visible GPUs, the current one `current`, each with its own generator."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, n: int, current: int) -> None:
        self.generators = [torch.Generator().manual_seed(1000 + i) for i in range(n)]
        self.current = current
        for name in (
            "is_available",
            "device_count",
            "current_device",
            "get_rng_state",
            "set_rng_state",
            "get_rng_state_all",
            "set_rng_state_all",
        ):
            monkeypatch.setattr(torch.cuda, name, getattr(self, name))

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return len(self.generators)

    def current_device(self) -> int:
        return self.current

    def _index(self, device: int | str | torch.device) -> int:
        device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
        return self.current if device.index is None else device.index

    def get_rng_state(self, device: int | str | torch.device = "cuda") -> torch.Tensor:
        return self.generators[self._index(device)].get_state()

    def set_rng_state(self, new_state: torch.Tensor, device: int | str | torch.device = "cuda") -> None:
        self.generators[self._index(device)].set_state(new_state)

    def get_rng_state_all(self) -> list[torch.Tensor]:
        return [self.get_rng_state(i) for i in range(self.device_count())]

    def set_rng_state_all(self, new_states: list[torch.Tensor]) -> None:
        for i, state in enumerate(new_states):
            self.set_rng_state(state, i)

    def draw(self, index: int) -> torch.Tensor:
        return torch.rand(4, generator=self.generators[index])


def saved_by_rank(tmp_path: Path, rank: int, world_size: int) -> Path:
    """Write rank `rank`'s shard (carry-free) as the trainer does; returns the checkpoint folder."""
    folder = tmp_path / "step_1"
    folder.mkdir(exist_ok=True)
    plan = MicroBatchSplit.create(8 * world_size, world_size, rank, None)
    write_rank_shard(folder, rank, rank_shard(plan, None))
    return folder


def test_a_rank_resumes_its_own_generator_with_fewer_visible_gpus(tmp_path, monkeypatch):
    """8 GPUs at save, 4 at resume (a narrower CUDA_VISIBLE_DEVICES): rank 2 gets its cuda:2 state back.
    torch's set_rng_state_all of the 8 saved states raised IndexError here."""
    before = FakeCuda(monkeypatch, n=8, current=2)
    folder = saved_by_rank(tmp_path, rank=2, world_size=8)
    expected = before.draw(2)  # what cuda:2 draws next in the uninterrupted run

    after = FakeCuda(monkeypatch, n=4, current=2)
    untouched = [g.get_state() for g in after.generators]
    saved = read_rng(folder, rank=2, world_size_saved=8)
    assert saved is not None
    set_rng_state(saved)
    assert torch.equal(after.draw(2), expected)
    for i in (0, 1, 3):  # other ranks' devices are theirs to restore
        assert torch.equal(after.generators[i].get_state(), untouched[i])


def test_the_state_round_trips_on_the_same_gpus_and_cpu_rngs_too(monkeypatch):
    fake = FakeCuda(monkeypatch, n=2, current=1)
    state = rng_state()
    expected = (fake.draw(1), torch.rand(3))
    fake.draw(1), torch.rand(3)  # move on, then go back
    set_rng_state(state)
    got = (fake.draw(1), torch.rand(3))
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))


def test_checkpoints_holding_the_old_per_gpu_list_still_resume(monkeypatch, caplog):
    """Checkpoints written before hold `get_rng_state_all()`: the rank takes the entry of its device."""
    old = FakeCuda(monkeypatch, n=8, current=3)
    listed = {**rng_state(), "cuda": old.get_rng_state_all()}
    expected = old.draw(3)

    now = FakeCuda(monkeypatch, n=4, current=3)
    set_rng_state(listed)
    assert torch.equal(now.draw(3), expected)

    short = {**listed, "cuda": listed["cuda"][:2]}  # no entry for cuda:3: keep the seeded state, warn
    seeded = now.generators[3].get_state()
    with caplog.at_level(logging.WARNING, logger="trm.training.checkpointing.state"):
        set_rng_state(short)
    assert torch.equal(now.generators[3].get_state(), seeded)
    assert "none for cuda:3" in caplog.text
