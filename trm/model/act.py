"""The ACT / deep-supervision wrapper: a carry of per-slot latents, step counts and the examples in flight."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from trm.model.core import TRMCore
from trm.model.sparse_embedding import SparsePuzzleEmbedding


@dataclass
class ACTCarry:
    """State kept across supervision steps: latents, steps taken, halted flags and each slot's example."""

    inner_carry: Any  # the core's latents (InnerCarry for TRM)
    steps: torch.Tensor  # int32 [B]
    halted: torch.Tensor  # bool [B]
    current_data: dict[str, torch.Tensor]


@dataclass
class HaltExploration:
    """Precomputed training exploration: slots with explore=True may halt only once steps >= min_steps."""

    explore: torch.Tensor  # bool [B]
    min_steps: torch.Tensor  # int [B], drawn from [2, halt_max_steps]

    @staticmethod
    def draw(batch_size: int, config: Any, generator: torch.Generator | None = None) -> HaltExploration:
        """Draw an exploration decision per slot from `generator` (CPU tensors)."""
        explore = torch.rand(batch_size, generator=generator) < config.halt_exploration_prob
        min_steps = torch.randint(2, config.halt_max_steps + 1, (batch_size,), generator=generator)
        return HaltExploration(explore=explore, min_steps=min_steps.to(torch.int32))


class TinyRecursiveModel(nn.Module):
    """TRM with adaptive computation time; one call is one supervision step for every carry slot.

    The recursion core is `core_class`; other architectures reuse this wrapper with their own core.
    """

    core_class: type[nn.Module] = TRMCore

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.config = config
        self.inner = self.core_class(config)

    @property
    def puzzle_emb(self) -> SparsePuzzleEmbedding | None:
        """The sparse puzzle-embedding table, or None when puzzle_emb_ndim is 0."""
        return self.inner.puzzle_emb

    def initial_carry(self, batch: dict[str, torch.Tensor]) -> ACTCarry:
        """A carry whose slots are all halted, so the first call loads every sample of `batch`."""
        size = batch["inputs"].shape[0]
        device = batch["inputs"].device
        return ACTCarry(
            inner_carry=self.inner.empty_carry(size, device),
            steps=torch.zeros(size, dtype=torch.int32, device=device),
            halted=torch.ones(size, dtype=torch.bool, device=device),
            current_data={k: torch.zeros_like(v) for k, v in batch.items()},
        )

    def forward(
        self, carry: ACTCarry, batch: dict[str, torch.Tensor], exploration: HaltExploration | None = None
    ) -> tuple[ACTCarry, dict[str, torch.Tensor]]:
        """One supervision step: halted slots load `batch`'s sample at their index, then all slots step."""
        cfg = self.config
        early_eval = cfg.eval_early_halt and not self.training
        halted = carry.halted
        # Evaluation with early halting: a slot that halted while others still run stays frozen (its
        # answer is kept) until every slot has halted; only then do all slots take the new batch.
        frozen = halted & ~halted.all() if early_eval else None
        reset = halted if frozen is None else halted & ~frozen

        inner = self.inner.reset_carry(reset, carry.inner_carry)
        steps = torch.where(reset, 0, carry.steps)
        data = {
            k: torch.where(reset.view((-1,) + (1,) * (v.ndim - 1)), batch[k], v)
            for k, v in carry.current_data.items()
        }
        new_inner, logits, q_halt, q_continue = self.inner(inner, data)
        if frozen is not None:
            new_inner, logits, q_halt, q_continue = self._keep_frozen(
                frozen, inner, (new_inner, logits, q_halt, q_continue)
            )
        outputs = {"logits": logits, "q_halt_logits": q_halt, "q_continue_logits": q_continue}

        with torch.no_grad():
            steps = steps + 1 if frozen is None else torch.where(frozen, steps, steps + 1)
            is_last = steps >= cfg.halt_max_steps
            halted = is_last
            # Halting on the Q head: in training (unless act_enabled=False); in evaluation only with the
            # baseline's act_inference (else evaluation runs every step, or freezes with eval_early_halt).
            adaptive = (
                getattr(cfg, "act_enabled", True) if self.training else getattr(cfg, "act_inference", False)
            )
            if cfg.halt_max_steps > 1 and adaptive:
                versus_continue = getattr(cfg, "halt_on_q_continue", not cfg.no_ACT_continue)
                halted = halted | (q_halt > q_continue if versus_continue else q_halt > 0)
                if self.training:
                    halted = halted & (steps >= self._min_halt_steps(q_halt, steps, exploration))
                if self.training and not cfg.no_ACT_continue:
                    # Bootstrapped Q-learning target from one more (gradient-free) step on the new carry.
                    _, _, next_halt, next_continue = self.inner(new_inner, data)
                    target = torch.where(is_last, next_halt, torch.maximum(next_halt, next_continue))
                    outputs["target_q_continue"] = torch.sigmoid(target)
            elif frozen is not None:
                halted = halted | frozen | (q_halt > 0)
        return ACTCarry(new_inner, steps.to(torch.int32), halted, data), outputs

    def eval_act_steps(self) -> int | None:
        """The ACT steps every slot of a fresh carry takes in evaluation when none can halt early
        (halt_max_steps: neither arch.eval_early_halt nor the baseline's arch.act_inference); else None.
        Read at every evaluation: URM's extra-loops pass raises it for its duration."""
        cfg = self.config
        if cfg.eval_early_halt or (cfg.halt_max_steps > 1 and getattr(cfg, "act_inference", False)):
            return None
        return int(cfg.halt_max_steps)

    def _min_halt_steps(
        self, q_halt: torch.Tensor, steps: torch.Tensor, exploration: HaltExploration | None
    ) -> torch.Tensor:
        """Per-slot minimum halting step: min_steps where exploring, else 0."""
        if exploration is None:
            explore = torch.rand_like(q_halt) < self.config.halt_exploration_prob
            min_steps = torch.randint_like(steps, low=2, high=self.config.halt_max_steps + 1)
        else:
            explore = exploration.explore.to(steps.device)
            min_steps = exploration.min_steps.to(device=steps.device, dtype=steps.dtype)
        return explore * min_steps

    def _keep_frozen(
        self,
        frozen: torch.Tensor,
        old: Any,
        stepped: tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor],
    ) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Frozen slots keep their latents, and their outputs are re-read from those latents."""
        new, logits, q_halt, q_continue = stepped
        old_logits, old_halt, old_continue = self.inner.heads(self.inner.answer_state(old))
        flag = frozen.view(-1, 1, 1)
        kept = {
            f.name: torch.where(flag, getattr(old, f.name), getattr(new, f.name))
            for f in dataclasses.fields(new)
        }
        return (
            type(new)(**kept),
            torch.where(flag, old_logits, logits),
            torch.where(frozen, old_halt, q_halt),
            torch.where(frozen, old_continue, q_continue),
        )
