"""Gradient accumulation that keeps the math of the global batch: slot layout, carry slicing, exploration.

The global batch has `global_batch_size` slots. Rank r owns slots [r*L, (r+1)*L) with L = global/world,
and runs them as `accum` micro-batches of `micro` slots, each with its own ACT carry. Every slot sees the
same data, the same carry and the same halting exploration (derived from (seed, step, global slot)) in any
split, so the summed gradient of `loss / global_batch_size` is the same up to float summation order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from trm.batching import divisors
from trm.errors import TRMError


@dataclass(frozen=True)
class MicroBatchSplit:
    """How this rank's share of the global batch is split into micro-batches."""

    global_batch_size: int
    world_size: int
    rank: int
    micro_batch_size: int

    @classmethod
    def create(cls, global_batch_size: int, world_size: int, rank: int, micro: int | None) -> MicroBatchSplit:
        """Check divisibility (the errors name the keys to change) and build the plan."""
        if global_batch_size % world_size:
            raise TRMError(
                f"global_batch_size={global_batch_size} is not divisible by the {world_size} processes: "
                f"pick a multiple of {world_size} or change --nproc-per-node."
            )
        local = global_batch_size // world_size
        micro = local if micro is None else micro
        if micro > local or local % micro:
            raise TRMError(
                f"micro_batch_size={micro} must divide the per-process batch {local} "
                f"(= global_batch_size {global_batch_size} / {world_size} processes); valid: {divisors(local)}."
            )
        return cls(global_batch_size, world_size, rank, micro)

    @property
    def local_batch_size(self) -> int:
        """Slots on this rank."""
        return self.global_batch_size // self.world_size

    @property
    def accum_steps(self) -> int:
        """Micro-batches per optimizer step on this rank."""
        return self.local_batch_size // self.micro_batch_size

    @property
    def slot_start(self) -> int:
        """First global slot of this rank."""
        return self.rank * self.local_batch_size

    def micro_rows(self, k: int) -> slice:
        """Rows of the local batch in micro-batch k."""
        return slice(k * self.micro_batch_size, (k + 1) * self.micro_batch_size)

    def micro_slots(self, k: int) -> slice:
        """Global slots of micro-batch k."""
        start = self.slot_start + k * self.micro_batch_size
        return slice(start, start + self.micro_batch_size)


def tree_map(fn: Callable[[torch.Tensor], torch.Tensor], obj: Any) -> Any:
    """Apply `fn` to every tensor in nested dataclasses / dicts / lists / tuples (other leaves kept)."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(
            obj, **{f.name: tree_map(fn, getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init}
        )
    if isinstance(obj, dict):
        return type(obj)((k, tree_map(fn, v)) for k, v in obj.items())
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(tree_map(fn, v) for v in obj))
    if isinstance(obj, list | tuple):
        return type(obj)(tree_map(fn, v) for v in obj)
    return obj


def cat_rows(trees: list[Any]) -> Any:
    """Concatenate same-structured trees along dim 0 of every tensor."""
    first = trees[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(trees, dim=0)
    if dataclasses.is_dataclass(first) and not isinstance(first, type):
        fields = [f.name for f in dataclasses.fields(first) if f.init]
        return dataclasses.replace(first, **{n: cat_rows([getattr(t, n) for t in trees]) for n in fields})
    if isinstance(first, dict):
        return type(first)((k, cat_rows([t[k] for t in trees])) for k in first)
    if isinstance(first, tuple) and hasattr(first, "_fields"):
        return type(first)(*(cat_rows(list(parts)) for parts in zip(*trees, strict=True)))
    if isinstance(first, list | tuple):
        return type(first)(cat_rows(list(parts)) for parts in zip(*trees, strict=True))
    return first


def slice_rows(tree: Any, rows: slice) -> Any:
    """Rows `rows` of every tensor in the tree (a view; scalars are kept)."""
    return tree_map(lambda t: t[rows] if t.dim() > 0 else t, tree)


def exploration_draw(
    seed: int, step: int, global_batch_size: int, prob: float, halt_max_steps: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per global slot: explore (bool) with probability `prob`, and a min halting step in [2, halt_max_steps].

    Drawn from a generator seeded by (seed, step) alone, so it does not depend on the rank layout and does
    not touch the global torch RNG.
    """
    gen = torch.Generator().manual_seed((seed * 1_000_003 + step) % (2**63))
    explore = torch.rand(global_batch_size, generator=gen) < prob
    high = max(halt_max_steps + 1, 3)
    min_steps = torch.randint(2, high, (global_batch_size,), generator=gen, dtype=torch.int32)
    return explore, min_steps
