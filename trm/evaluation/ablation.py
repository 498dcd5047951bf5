"""Puzzle-id ablation: evaluate with the model's puzzle identifiers blanked or shuffled.

TRM conditions every example on a learned embedding row per puzzle identifier (the task and its
augmentation). How much a checkpoint relies on that row is measured by evaluating it with the rows taken
away: `blank` gives every example the blank identifier (the row no puzzle trained), `shuffled` gives each
identifier another puzzle's identifier (a fixed permutation of the non-blank ones, from a seed). Only the
model's input changes: the evaluators still see the true identifiers, so votes and the submission stay
attached to the right task and augmentation.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

TRAINED, BLANK, SHUFFLED = "trained", "blank", "shuffled"
MODES = (TRAINED, BLANK, SHUFFLED)


def identifier_map(mode: str, num_identifiers: int, blank_id: int, seed: int) -> torch.Tensor | None:
    """int64 [num_identifiers]: the identifier the model sees for each true one (None: unchanged)."""
    if mode == TRAINED:
        return None
    if mode == BLANK:
        return torch.full((num_identifiers,), blank_id, dtype=torch.int64)
    if mode != SHUFFLED:
        raise ValueError(f"puzzle-id ablation {mode!r}: use one of {', '.join(MODES)}")
    mapping = torch.arange(num_identifiers, dtype=torch.int64)
    others = mapping[mapping != blank_id]
    generator = torch.Generator().manual_seed(seed)
    if len(others) > 1:
        # A derangement (no identifier keeps its own row): a random cyclic shift of a random order.
        order = others[torch.randperm(len(others), generator=generator)]
        shift = int(torch.randint(1, len(others), (1,), generator=generator))
        mapping[order] = torch.roll(order, shift)
    return mapping


class PuzzleIdAblation(nn.Module):
    """Wraps a loss head: every batch reaches the model with its identifiers mapped by `mapping`."""

    def __init__(self, loss_head: nn.Module, mapping: torch.Tensor) -> None:
        super().__init__()
        self.loss_head = loss_head
        self.register_buffer("mapping", mapping, persistent=False)

    def _mapped(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        ids = batch["puzzle_identifiers"]
        mapped = self.mapping.to(ids.device)[ids.long()].to(ids.dtype)
        return {**batch, "puzzle_identifiers": mapped}

    def initial_carry(self, batch: dict[str, torch.Tensor]) -> Any:
        """The wrapped head's initial carry for the mapped batch."""
        return self.loss_head.initial_carry(self._mapped(batch))

    def eval_act_steps(self) -> int | None:
        """The wrapped head's fixed number of evaluation ACT steps (None: slots may halt early)."""
        from trm.evaluation.runner import fixed_act_steps

        return fixed_act_steps(self.loss_head)

    def forward(self, carry: Any, batch: dict[str, torch.Tensor], *args: Any, **kwargs: Any) -> Any:
        """One step of the wrapped head on the mapped batch."""
        return self.loss_head(carry, self._mapped(batch), *args, **kwargs)


def ablated(loss_head: nn.Module, mode: str, num_identifiers: int, blank_id: int, seed: int) -> nn.Module:
    """`loss_head` itself for `trained`, else wrapped so the model sees blank or shuffled identifiers."""
    mapping = identifier_map(mode, num_identifiers, blank_id, seed)
    return loss_head if mapping is None else PuzzleIdAblation(loss_head, mapping)
