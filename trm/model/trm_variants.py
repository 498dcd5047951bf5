"""Upstream's other recursive models, on TRM's layers, heads and ACT wrapper.

- `hrm` (Hierarchical Reasoning Model): a low-level net (L_layers blocks) and a high-level net (H_layers).
  Per ACT step: H_cycles × (L_cycles × z_L ← L(z_L + z_H + x), then z_H ← H(z_H + z_L)), all without
  gradient but the last z_L and z_H updates. Halting by Q-learning: q_halt > q_continue, with the
  bootstrapped Q-continue target; its puzzle prefix is ceil(puzzle_emb_ndim / hidden_size) positions.
- `transformers_baseline`: no recursion inside an ACT step: z_H ← blocks(z_H + x) once, with gradient;
  halting on q_halt > q_continue without a Q-continue target (the reference's loss never asks for one).
Upstream's TRM ablations (same `arch.*` keys as TRM):

- `trm_singlez`: one latent z. Per outer cycle: L_cycles × z ← net(z + x), then z ← net(z) (no input);
  the heads read z.
- `trm_hier6`: z_H and six reasoning latents z_L1..z_L6. Inner step i of a cycle replaces z_L(i+1) by
  net(Σ z_L + z_H + x); the cycle ends with z_H ← net(z_H + Σ z_L). Needs L_cycles <= 6.
As in TRM, all but the last outer cycle run without gradient.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from trm.errors import TRMError
from trm.model.act import TinyRecursiveModel
from trm.model.config import TRMConfig
from trm.model.core import TRMCore
from trm.model.layers import Block
from trm.model.schema import HRMFields, TransformerBaselineFields

HIER_LATENTS = 6


@dataclass(kw_only=True)
class TRMSingleZConfig(TRMConfig):
    """A trm_singlez model's configuration (TRM's keys)."""


@dataclass(kw_only=True)
class TRMHier6Config(TRMConfig):
    """A trm_hier6 model's configuration (TRM's keys; L_cycles <= 6)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.L_cycles > HIER_LATENTS:
            raise TRMError(
                f"arch.L_cycles={self.L_cycles}: trm_hier6 updates one of its {HIER_LATENTS} latents per inner "
                f"step, so L_cycles must be <= {HIER_LATENTS}."
            )


@dataclass(kw_only=True)
class HRMConfig(TRMConfig, HRMFields):
    """An HRM model's configuration: HRM's keys plus the dataset sizes (TRM's checks apply).

    The two TRM settings HRM fixes: the ceil-rule puzzle prefix and Q-learning halting."""

    puzzle_emb_len: int = 0
    no_ACT_continue: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.H_layers < 1:
            raise TRMError(
                f"arch.H_layers={self.H_layers} is invalid: hrm's high-level net needs >= 1 block."
            )
        if self.puzzle_emb_len or self.no_ACT_continue:
            raise TRMError(
                "hrm fixes puzzle_emb_len=0 (ceil rule) and no_ACT_continue=False: drop those keys."
            )


@dataclass(kw_only=True)
class TransformerBaselineConfig(TRMConfig, TransformerBaselineFields):
    """A transformers_baseline model's configuration (TRM's checks, heads need not divide the width)."""

    heads_must_divide: ClassVar[bool] = False
    halt_on_q_continue: ClassVar[bool] = True  # halting compares the two Q logits; no target is trained
    puzzle_emb_len: int = 0
    no_ACT_continue: bool = True
    act_enabled: bool = True
    act_inference: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.act_inference and self.eval_early_halt:
            raise TRMError(
                "arch.act_inference and arch.eval_early_halt are two ways to halt early in evaluation: set "
                "one of them (act_inference is upstream's; eval_early_halt keeps halted slots' answers)."
            )
        if self.pos_encodings == "none" or self.H_layers < 1 or self.mlp_t:
            raise TRMError(
                f"arch.pos_encodings={self.pos_encodings!r}, arch.H_layers={self.H_layers}: transformers_baseline "
                "needs rope or learned positions and at least one layer."
            )


@dataclass
class SingleZCarry:
    """trm_singlez's latent [B, S, D]."""

    z_L: torch.Tensor


@dataclass
class Hier6Carry:
    """trm_hier6's latents: z_H and the six reasoning latents, each [B, S, D]."""

    z_H: torch.Tensor
    z_L1: torch.Tensor
    z_L2: torch.Tensor
    z_L3: torch.Tensor
    z_L4: torch.Tensor
    z_L5: torch.Tensor
    z_L6: torch.Tensor


class HRMCore(TRMCore):
    """One ACT step of HRM: TRM's `blocks` are its low-level net, `H_blocks` its high-level net."""

    def __init__(self, config: HRMConfig) -> None:
        super().__init__(config)
        self.H_blocks = torch.nn.ModuleList(Block(config) for _ in range(config.H_layers))

    def high(self, z_H: torch.Tensor, z_L: torch.Tensor, rope: tuple | None) -> torch.Tensor:
        """The high-level net: add z_L, then the H_layers blocks."""
        z_H = z_H + z_L
        for block in self.H_blocks:
            z_H = block(z_H, rope)
        return z_H

    def forward(
        self, carry: Any, batch: dict[str, torch.Tensor]
    ) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One ACT step: (new detached carry, logits, q_halt_logits, q_continue_logits)."""
        rope = None if self.rope is None else (self.rope.cos, self.rope.sin)
        x = self.embed_input(batch["inputs"], batch["puzzle_identifiers"])
        z_H, z_L = carry.z_H, carry.z_L
        H, L = self.config.H_cycles, self.config.L_cycles
        with torch.no_grad():
            for h in range(H):
                for l_step in range(L):
                    if h < H - 1 or l_step < L - 1:
                        z_L = self.reason(z_L, z_H + x, rope)
                if h < H - 1:
                    z_H = self.high(z_H, z_L, rope)
        z_L = self.reason(z_L, z_H + x, rope)
        z_H = self.high(z_H, z_L, rope)
        logits, q_halt, q_continue = self.heads(z_H)
        return type(carry)(z_H=z_H.detach(), z_L=z_L.detach()), logits, q_halt, q_continue


@dataclass
class HiddenZCarry:
    """transformers_baseline's latent [B, S, D]."""

    z_H: torch.Tensor


class TransformerBaselineCore(TRMCore):
    """One ACT step of transformers_baseline: the H_layers blocks once on z_H + x."""

    init_names = ("H_init",)

    @staticmethod
    def num_blocks(config: TRMConfig) -> int:
        """Its blocks are the reference's H_level."""
        return config.H_layers

    def empty_carry(self, batch_size: int, device: torch.device) -> HiddenZCarry:
        """Zero latent (reset to H_init before first use)."""
        shape = (batch_size, self.config.total_seq_len, self.config.hidden_size)
        return HiddenZCarry(torch.zeros(shape, dtype=self.config.dtype, device=device))

    def reset_carry(self, reset: torch.Tensor, carry: HiddenZCarry) -> HiddenZCarry:
        """Slots with reset=True restart from H_init."""
        return HiddenZCarry(torch.where(reset.view(-1, 1, 1), self.H_init, carry.z_H))

    def forward(
        self, carry: HiddenZCarry, batch: dict[str, torch.Tensor]
    ) -> tuple[HiddenZCarry, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One ACT step: (new detached carry, logits, q_halt_logits, q_continue_logits)."""
        rope = None if self.rope is None else (self.rope.cos, self.rope.sin)
        x = self.embed_input(batch["inputs"], batch["puzzle_identifiers"])
        z_H = self.reason(carry.z_H, x, rope)
        logits, q_halt, q_continue = self.heads(z_H)
        return HiddenZCarry(z_H.detach()), logits, q_halt, q_continue


class TRMSingleZCore(TRMCore):
    """One ACT step of trm_singlez."""

    init_names = ("L_init",)

    def empty_carry(self, batch_size: int, device: torch.device) -> SingleZCarry:
        """Zero latent (reset to L_init before first use)."""
        shape = (batch_size, self.config.total_seq_len, self.config.hidden_size)
        return SingleZCarry(torch.zeros(shape, dtype=self.config.dtype, device=device))

    def reset_carry(self, reset: torch.Tensor, carry: SingleZCarry) -> SingleZCarry:
        """Slots with reset=True restart from L_init."""
        return SingleZCarry(torch.where(reset.view(-1, 1, 1), self.L_init, carry.z_L))

    @staticmethod
    def answer_state(carry: SingleZCarry) -> torch.Tensor:
        """The heads read z."""
        return carry.z_L

    def _cycle(self, z: torch.Tensor, x: torch.Tensor, rope: tuple | None) -> torch.Tensor:
        for _ in range(self.config.L_cycles):
            z = self.reason(z, x, rope)
        return self.reason(z, None, rope)

    def forward(
        self, carry: SingleZCarry, batch: dict[str, torch.Tensor]
    ) -> tuple[SingleZCarry, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One ACT step: (new detached carry, logits, q_halt_logits, q_continue_logits)."""
        rope = None if self.rope is None else (self.rope.cos, self.rope.sin)
        x = self.embed_input(batch["inputs"], batch["puzzle_identifiers"])
        z = carry.z_L
        with torch.no_grad():
            for _ in range(self.config.H_cycles - 1):
                z = self._cycle(z, x, rope)
        z = self._cycle(z, x, rope)
        logits, q_halt, q_continue = self.heads(z)
        return SingleZCarry(z.detach()), logits, q_halt, q_continue


class TRMHier6Core(TRMCore):
    """One ACT step of trm_hier6."""

    init_names = ("H_init", *(f"L{i}_init" for i in range(1, HIER_LATENTS + 1)))

    def empty_carry(self, batch_size: int, device: torch.device) -> Hier6Carry:
        """Zero latents (reset to their *_init before first use)."""
        shape = (batch_size, self.config.total_seq_len, self.config.hidden_size)
        return Hier6Carry(*(torch.zeros(shape, dtype=self.config.dtype, device=device) for _ in range(7)))

    def reset_carry(self, reset: torch.Tensor, carry: Hier6Carry) -> Hier6Carry:
        """Slots with reset=True restart from H_init, L1_init … L6_init."""
        flag = reset.view(-1, 1, 1)
        latents = _latents(carry)
        return Hier6Carry(
            *(torch.where(flag, getattr(self, n), z) for n, z in zip(self.init_names, latents, strict=True))
        )

    @staticmethod
    def answer_state(carry: Hier6Carry) -> torch.Tensor:
        """The heads read z_H."""
        return carry.z_H

    def _cycle(
        self, z_H: torch.Tensor, z_L: list[torch.Tensor], x: torch.Tensor, rope: tuple | None
    ) -> torch.Tensor:
        for i in range(self.config.L_cycles):
            z_L[i] = self.reason(_sum(z_L), z_H + x, rope)
        return self.reason(z_H, _sum(z_L), rope)

    def forward(
        self, carry: Hier6Carry, batch: dict[str, torch.Tensor]
    ) -> tuple[Hier6Carry, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One ACT step: (new detached carry, logits, q_halt_logits, q_continue_logits)."""
        rope = None if self.rope is None else (self.rope.cos, self.rope.sin)
        x = self.embed_input(batch["inputs"], batch["puzzle_identifiers"])
        z_H, *latents = _latents(carry)
        z_L = list(latents)
        with torch.no_grad():
            for _ in range(self.config.H_cycles - 1):
                z_H = self._cycle(z_H, z_L, x, rope)
        z_H = self._cycle(z_H, z_L, x, rope)
        logits, q_halt, q_continue = self.heads(z_H)
        return Hier6Carry(z_H.detach(), *(z.detach() for z in z_L)), logits, q_halt, q_continue


def _latents(carry: Hier6Carry) -> list[torch.Tensor]:
    """z_H, z_L1 … z_L6 (the tensors themselves, not copies)."""
    return [getattr(carry, f.name) for f in dataclasses.fields(carry)]


def _sum(latents: list[torch.Tensor]) -> torch.Tensor:
    """z_L1 + … + z_L6, added left to right as the reference does."""
    total = latents[0]
    for z in latents[1:]:
        total = total + z
    return total


class HRMModel(TinyRecursiveModel):
    """HRM with TRM's ACT wrapper (Q-learning halting)."""

    core_class = HRMCore


class TransformerBaselineModel(TinyRecursiveModel):
    """transformers_baseline with TRM's ACT wrapper."""

    core_class = TransformerBaselineCore


class TRMSingleZModel(TinyRecursiveModel):
    """trm_singlez with TRM's ACT wrapper."""

    core_class = TRMSingleZCore


class TRMHier6Model(TinyRecursiveModel):
    """trm_hier6 with TRM's ACT wrapper."""

    core_class = TRMHier6Core
