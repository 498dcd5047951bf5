"""Puzzle-embedding table: an fp32 buffer (not a Parameter) trained by SignSGD on the rows a batch touched."""

from __future__ import annotations

import torch
from torch import nn


class SparsePuzzleEmbedding(nn.Module):
    """Zero-initialised `[num_identifiers, dim]` fp32 table stored as a persistent buffer `weight`.

    In training with gradients enabled, each forward copies the batch's rows into a fresh leaf tensor
    (`local_weights`, ids in `local_ids`) whose `.grad` the SignSGD optimizer consumes; several forwards
    before one optimizer step (gradient accumulation) are all kept. Otherwise it is a plain lookup.
    """

    def __init__(self, num_identifiers: int, dim: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype
        self.register_buffer(
            "weight", torch.zeros(num_identifiers, dim, dtype=torch.float32), persistent=True
        )
        self._local: list[tuple[torch.Tensor, torch.Tensor]] = []

    @torch.compiler.disable
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Embeddings of `ids` [B] as [B, dim] in the forward dtype."""
        if not (self.training and torch.is_grad_enabled()):
            return self.weight[ids].to(self.dtype)
        local = self.weight[ids].detach().requires_grad_(True)
        self._local.append((ids.detach().clone(), local))
        return local.to(self.dtype)

    @property
    def local_ids(self) -> torch.Tensor:
        """Ids of every row handed out for gradient since the last `clear_local()` (int64)."""
        if not self._local:
            return torch.zeros(0, dtype=torch.long, device=self.weight.device)
        return torch.cat([ids.long() for ids, _ in self._local])

    @property
    def local_weights(self) -> list[torch.Tensor]:
        """The leaf copies handed out since the last `clear_local()`, in order."""
        return [w for _, w in self._local]

    def local_grads(self) -> torch.Tensor:
        """Gradients of the handed-out rows [N, dim] fp32 (zero rows where no backward reached them)."""
        if not self._local:
            return torch.zeros(0, self.weight.shape[1], dtype=torch.float32, device=self.weight.device)
        return torch.cat([torch.zeros_like(w) if w.grad is None else w.grad for _, w in self._local])

    def clear_local(self) -> None:
        """Forget the handed-out rows (done by the optimizer's step and zero_grad)."""
        self._local.clear()
