"""Slot layout of gradient accumulation, carry slicing and the rank-independent exploration draw."""

from __future__ import annotations

import pytest
import torch

from trm.errors import TRMError
from trm.model import ACTCarry, InnerCarry
from trm.training.accumulation import MicroBatchSplit, cat_rows, exploration_draw, slice_rows


def test_plan_covers_the_global_batch_once_in_any_split() -> None:
    for world, micro in [(1, 8), (1, 2), (2, 4), (2, 1), (4, 2)]:
        slots = []
        for rank in range(world):
            plan = MicroBatchSplit.create(8, world, rank, micro)
            assert plan.accum_steps * plan.micro_batch_size * world == 8
            for k in range(plan.accum_steps):
                s = plan.micro_slots(k)
                slots.extend(range(s.start, s.stop))
        assert slots == list(range(8))


def test_plan_errors_name_the_fix() -> None:
    with pytest.raises(TRMError, match="not divisible by the 3 processes"):
        MicroBatchSplit.create(8, 3, 0, None)
    with pytest.raises(TRMError, match=r"valid: \[1, 2, 4\]"):
        MicroBatchSplit.create(8, 2, 0, 3)


def test_carry_rows_round_trip() -> None:
    carry = ACTCarry(
        inner_carry=InnerCarry(z_H=torch.arange(12.0).view(4, 3), z_L=-torch.arange(12.0).view(4, 3)),
        steps=torch.tensor([1, 2, 3, 4], dtype=torch.int32),
        halted=torch.tensor([True, False, True, False]),
        current_data={"inputs": torch.arange(8).view(4, 2)},
    )
    parts = [slice_rows(carry, slice(0, 1)), slice_rows(carry, slice(1, 4))]
    assert parts[1].steps.tolist() == [2, 3, 4] and isinstance(parts[1].inner_carry, InnerCarry)
    whole = cat_rows(parts)
    assert torch.equal(whole.inner_carry.z_L, carry.inner_carry.z_L)
    assert torch.equal(whole.current_data["inputs"], carry.current_data["inputs"])


def test_exploration_depends_on_seed_and_step_only() -> None:
    state = torch.get_rng_state()
    a = exploration_draw(0, 5, 64, 0.5, 16)
    assert torch.equal(torch.get_rng_state(), state)  # the global RNG is not touched
    b = exploration_draw(0, 5, 64, 0.5, 16)
    c = exploration_draw(0, 6, 64, 0.5, 16)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])
    assert 10 < int(a[0].sum()) < 54 and int(a[1].min()) >= 2 and int(a[1].max()) <= 16
