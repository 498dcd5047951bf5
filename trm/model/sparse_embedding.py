"""Puzzle-embedding table: an fp32 buffer (not a Parameter) trained by SignSGD on the rows a batch touched.

The rows a training forward hands out for gradient live in one fixed-shape leaf tensor (`grad_rows`), so
the forward is a handful of tensor operations that torch.compile traces into the model's graph: no graph
break, no host synchronisation, and the same values and gradients as a fresh leaf per forward.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from trm.errors import TRMError


class SparsePuzzleEmbedding(nn.Module):
    """Zero-initialised `[num_identifiers, dim]` fp32 table stored as a persistent buffer `weight`.

    In training with gradients enabled, a forward of B ids copies their rows into the next B slots of the
    leaf `grad_rows` (`[rows, dim]` fp32, the ids in `slot_ids`, the next free slot in `cursor`) and returns
    those slots, so a backward accumulates the rows' gradient in `grad_rows.grad`. `rows` is the number of
    rows one optimizer step consumes: the micro-batch size times the forwards before each step (gradient
    accumulation); the optimizer's step (or zero_grad) empties the slots again. Handing out more than
    `rows` before that wraps round to slot 0, where ids are replaced and gradients keep adding up per
    slot; the optimizer refuses such a step. Otherwise (evaluation, no_grad) the forward is a plain lookup.

    The slots are non-persistent buffers: checkpoints hold `weight` only, as before.
    """

    # the buffers, registered below (declared for the type checker: nn.Module's attribute lookup is untyped)
    weight: torch.Tensor
    grad_rows: torch.Tensor
    slot_ids: torch.Tensor
    cursor: torch.Tensor

    def __init__(self, num_identifiers: int, dim: int, dtype: torch.dtype, rows: int) -> None:
        super().__init__()
        self.dtype = dtype
        self.register_buffer(
            "weight", torch.zeros(num_identifiers, dim, dtype=torch.float32), persistent=True
        )
        self._allocate_slots(rows)

    def _allocate_slots(self, rows: int) -> None:
        """(Re)create the empty slots: `grad_rows` [rows, dim] (a leaf requiring grad, in the table's dtype),
        `slot_ids` and `cursor`, on the table's device."""
        if rows < 1:
            raise TRMError(f"the puzzle embedding needs at least one gradient row per step, not {rows}.")
        like = self.weight
        rows_buffer = torch.zeros(rows, like.shape[1], dtype=like.dtype, device=like.device)
        self.register_buffer("grad_rows", rows_buffer.requires_grad_(True), persistent=False)
        self.register_buffer(
            "slot_ids", torch.zeros(rows, dtype=torch.long, device=like.device), persistent=False
        )
        self.register_buffer(
            "cursor", torch.zeros((), dtype=torch.long, device=like.device), persistent=False
        )

    @property
    def rows(self) -> int:
        """Gradient rows one optimizer step consumes (the slots' count)."""
        return self.grad_rows.shape[0]

    def reserve_rows(self, rows: int) -> None:
        """Resize the slots to `rows` per optimizer step (emptying them); call before the first forward."""
        if rows != self.rows:
            self._allocate_slots(rows)

    def _apply(
        self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True
    ) -> SparsePuzzleEmbedding:
        """`.to()` & co. move the table; the slots are recreated empty beside it (a moved copy of the leaf
        would be a non-leaf tensor whose gradient nobody could read)."""
        super()._apply(fn, recurse)
        self._allocate_slots(self.rows)
        return self

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Embeddings of `ids` [B] as [B, dim] in the forward dtype."""
        if not (self.training and torch.is_grad_enabled()):
            return self.weight[ids].to(self.dtype)
        count = ids.shape[0]
        if count > self.rows:
            raise TRMError(
                f"a training forward of {count} puzzle ids exceeds the embedding's {self.rows} gradient rows "
                "per step: build the model with batch_size >= the micro-batch (or reserve_rows)."
            )
        slots = torch.remainder(self.cursor + torch.arange(count, device=ids.device), self.rows)
        with torch.no_grad():
            self.grad_rows.index_copy_(0, slots, self.weight[ids])
            self.slot_ids.index_copy_(0, slots, ids.long())
            self.cursor.add_(count)
        return self.grad_rows.index_select(0, slots).to(self.dtype)

    def local_ids(self) -> torch.Tensor:
        """[rows] int64: the id in each slot, or `num_identifiers` (past the table's end) in a slot not handed
        out since the last `clear_local()`. Computed on the device, without reading the cursor."""
        filled = torch.arange(self.rows, device=self.slot_ids.device) < self.cursor
        return torch.where(filled, self.slot_ids, self.weight.shape[0])

    def local_grads(self) -> torch.Tensor:
        """[rows, dim] fp32: the gradient accumulated in each slot (zeros where no backward reached it)."""
        grad = self.grad_rows.grad
        return torch.zeros_like(self.grad_rows, requires_grad=False) if grad is None else grad

    def overflowed(self) -> torch.Tensor:
        """Bool scalar on the device: more rows were handed out than the slots hold since `clear_local()`."""
        return self.cursor > self.rows

    def clear_local(self) -> None:
        """Empty the slots (done by the optimizer's step and zero_grad)."""
        self.cursor.zero_()
        self.grad_rows.grad = None
