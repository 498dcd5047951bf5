"""SignSGD with decoupled weight decay for the sparse puzzle-embedding table (rows touched this step only)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch.optim import Optimizer

from trm.errors import TRMError
from trm.model.sparse_embedding import SparsePuzzleEmbedding


class SparseEmbeddingSignSGD(Optimizer):
    """Updates touched rows: w ← w·(1 − lr·wd) − lr·sign(Σ grads of that id over every rank and micro-batch)."""

    def __init__(self, puzzle_emb_module: SparsePuzzleEmbedding, lr: float, weight_decay: float) -> None:
        if not lr >= 0.0:
            raise TRMError(f"puzzle_emb_lr={lr} must be >= 0.")
        if not weight_decay >= 0.0:
            raise TRMError(f"puzzle_emb_weight_decay={weight_decay} must be >= 0.")
        self.module = puzzle_emb_module
        super().__init__([puzzle_emb_module.weight], {"lr": lr, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """Apply one update from the gradients gathered since the last step, then forget them."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        ids, grads = self.module.local_ids, self.module.local_grads()
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            ids, grads = _all_gather_rows(ids, grads)
        self.module.clear_local()
        if ids.numel() == 0:
            return loss
        unique_ids, inverse = ids.unique(return_inverse=True)
        summed = torch.zeros(unique_ids.shape[0], grads.shape[1], dtype=grads.dtype, device=grads.device)
        summed.index_add_(0, inverse, grads)

        group = self.param_groups[0]
        lr, wd = float(group["lr"]), float(group["weight_decay"])
        weight = self.module.weight
        rows = weight[unique_ids] * (1.0 - lr * wd) - lr * torch.sign(summed)
        weight[unique_ids] = rows
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop gradients of rows handed out since the last step."""
        self.module.clear_local()


def _all_gather_rows(ids: torch.Tensor, grads: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate every rank's (ids, grads); ranks may hold different row counts."""
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
