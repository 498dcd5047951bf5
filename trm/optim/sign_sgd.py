"""SignSGD with decoupled weight decay for the sparse puzzle-embedding table (rows touched this step only).

The update never waits for the device: the table hands out its rows in fixed-shape slots (empty ones carry
an id past the table's end), duplicate ids are summed through a stable sort and fixed-size segments instead
of `unique` (whose output size the host must read), and when every rank is known to hold the same number
of slots (the trainer's fixed micro-batches) they are gathered without first exchanging counts. Per id,
the gradient rows are added in their original order, as `unique` + `index_add_` does.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch.optim import Optimizer

from trm.errors import TRMError
from trm.model.sparse_embedding import SparsePuzzleEmbedding

OVERFLOW = (
    "the puzzle embedding handed out more gradient rows than its {rows} slots before this optimizer step "
    "(more forwards than micro-batches per step?): build the optimizer with rows_per_rank = the rows of one step"
)


class SparseEmbeddingSignSGD(Optimizer):
    """Updates touched rows: w ← w·(1 − lr·wd) − lr·sign(Σ grads of that id over every rank and micro-batch)."""

    def __init__(
        self,
        puzzle_emb_module: SparsePuzzleEmbedding,
        lr: float,
        weight_decay: float,
        rows_per_rank: int | None = None,
    ) -> None:
        """`rows_per_rank`: the rows every rank hands out per optimizer step, when the caller guarantees one
        number for all ranks: the table's slots are sized to it and the gather exchanges no counts. None
        keeps the table's own slot count (its batch size), which ranks may hold differently."""
        if not lr >= 0.0:
            raise TRMError(f"puzzle_emb_lr={lr} must be >= 0.")
        if not weight_decay >= 0.0:
            raise TRMError(f"puzzle_emb_weight_decay={weight_decay} must be >= 0.")
        self.module = puzzle_emb_module
        self.rows_per_rank = rows_per_rank
        if rows_per_rank is not None:
            puzzle_emb_module.reserve_rows(rows_per_rank)
        super().__init__([puzzle_emb_module.weight], {"lr": lr, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """Apply one update from the gradients gathered since the last step, then forget them."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        module = self.module
        torch._assert_async(~module.overflowed(), OVERFLOW.format(rows=module.rows))
        ids, grads = module.local_ids(), module.local_grads()
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            if self.rows_per_rank is None:
                ids, grads = _all_gather_rows(ids, grads)
            else:
                ids, grads = _all_gather_equal_rows(ids, grads, self.rows_per_rank)
        module.clear_local()
        end = module.weight.shape[0]
        slot_ids, summed, touched = _sum_per_id(ids, grads, end)
        group = self.param_groups[0]
        lr, wd = float(group["lr"]), float(group["weight_decay"])
        weight = module.weight
        # In range even when no slot was handed out (every slot then holds `end`, and is written unchanged).
        rows = slot_ids.clamp(max=end - 1)
        old = weight[rows]
        weight[rows] = torch.where(touched, old * (1.0 - lr * wd) - lr * torch.sign(summed), old)
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop gradients of rows handed out since the last step."""
        self.module.clear_local()


def _sum_per_id(
    ids: torch.Tensor, grads: torch.Tensor, end: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(slot_ids [N], summed [N, dim], touched []): the gradient rows of each distinct id summed, without a
    host sync; ids equal to `end` mark empty slots and are left out.

    Slots beyond the number of distinct handed-out ids repeat the last one (same id, same sum), so writing
    every slot writes each touched row once with one value. `touched` is False when no slot was handed out
    (then every slot holds `end`).
    """
    order = torch.argsort(ids, stable=True)
    sorted_ids = ids[order]  # the empty slots (id `end`) sort last
    first = torch.ones_like(sorted_ids, dtype=torch.bool)
    first[1:] = sorted_ids[1:] != sorted_ids[:-1]
    segment = torch.cumsum(first, 0) - 1
    summed = torch.zeros(ids.shape[0], grads.shape[1], dtype=grads.dtype, device=grads.device)
    summed.index_add_(0, segment, grads[order])
    slot_ids = torch.zeros_like(sorted_ids).scatter_(0, segment, sorted_ids)
    handed_out = (ids < end).sum()
    last = segment.index_select(0, (handed_out - 1).clamp(min=0).view(1))  # the last handed-out id's segment
    used = torch.minimum(torch.arange(ids.shape[0], device=ids.device), last)
    return slot_ids[used], summed[used], handed_out > 0


def _all_gather_equal_rows(
    ids: torch.Tensor, grads: torch.Tensor, rows: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every rank's (ids, grads) when each holds `rows` slots: one gather each, no count exchange."""
    if ids.shape[0] != rows:
        raise TRMError(
            f"the puzzle-embedding optimizer expected {rows} gradient rows on every rank but this rank's table "
            f"holds {ids.shape[0]} (resized after the optimizer was built?): build it with rows_per_rank=None "
            "when ranks may differ"
        )
    world = dist.get_world_size()
    all_ids = torch.empty(world * rows, dtype=torch.long, device=grads.device)
    all_grads = torch.empty(world * rows, grads.shape[1], dtype=grads.dtype, device=grads.device)
    dist.all_gather_into_tensor(all_ids, ids.to(grads.device).contiguous())
    dist.all_gather_into_tensor(all_grads, grads.contiguous())
    return all_ids, all_grads


def _all_gather_rows(ids: torch.Tensor, grads: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate every rank's (ids, grads); ranks may hold different slot counts."""
    world = dist.get_world_size()
    device = grads.device
    count = torch.tensor([ids.shape[0]], dtype=torch.long, device=device)
    counts = [torch.zeros_like(count) for _ in range(world)]
    dist.all_gather(counts, count)
    sizes = [int(c.item()) for c in counts]
    longest = max(sizes)
    padded_ids = torch.zeros(longest, dtype=torch.long, device=device)
    padded_grads = torch.zeros(longest, grads.shape[1], dtype=grads.dtype, device=device)
    padded_ids[: ids.shape[0]] = ids.to(device)
    padded_grads[: ids.shape[0]] = grads
    all_ids = [torch.empty_like(padded_ids) for _ in range(world)]
    all_grads = [torch.empty_like(padded_grads) for _ in range(world)]
    dist.all_gather(all_ids, padded_ids)
    dist.all_gather(all_grads, padded_grads)
    return (
        torch.cat([t[:n] for t, n in zip(all_ids, sizes, strict=True)]),
        torch.cat([t[:n] for t, n in zip(all_grads, sizes, strict=True)]),
    )
