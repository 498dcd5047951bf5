"""The recursion core of TRM: input embedding, H/L latent recursion with one reasoning net, output heads."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from trm.model.config import TRMConfig
from trm.model.layers import Block, CastedEmbedding, CastedLinear, RotaryEmbedding, trunc_normal_
from trm.model.sparse_embedding import SparsePuzzleEmbedding

LEARNED_POS_SCALE = 0.707106781  # 1/sqrt(2): keeps the variance of token + position embeddings at 1


@dataclass
class InnerCarry:
    """The two latents: z_H (answer state "y") and z_L (reasoning state "z"), [B, S, D] in forward dtype."""

    z_H: torch.Tensor
    z_L: torch.Tensor


class TRMCore(nn.Module):
    """One ACT step of TRM: H_cycles outer cycles of (L_cycles × z_L update, one z_H update)."""

    init_names: tuple[str, ...] = ("H_init", "L_init")

    @staticmethod
    def num_blocks(config: TRMConfig) -> int:
        """Blocks of the reasoning net (`blocks`)."""
        return config.L_layers

    def __init__(self, config: TRMConfig) -> None:
        super().__init__()
        self.config = config
        dtype = config.dtype
        width = config.hidden_size
        self.prefix_len = config.prefix_len
        self.embed_scale = math.sqrt(width)

        self.embed_tokens = CastedEmbedding(config.vocab_size, width, 1.0 / self.embed_scale, dtype)
        self.lm_head = CastedLinear(width, config.vocab_size)
        self.q_head = CastedLinear(width, 2, bias=True)
        self.puzzle_emb = (
            SparsePuzzleEmbedding(
                config.num_puzzle_identifiers, config.puzzle_emb_ndim, dtype, rows=config.batch_size
            )
            if config.puzzle_emb_ndim > 0
            else None
        )
        self.rope = (
            RotaryEmbedding(config.head_dim, config.total_seq_len, config.rope_theta)
            if config.pos_encodings == "rope"
            else None
        )
        self.embed_pos = (
            CastedEmbedding(config.total_seq_len, width, 1.0 / self.embed_scale, dtype)
            if config.pos_encodings == "learned"
            else None
        )
        self.blocks = nn.ModuleList(Block(config) for _ in range(self.num_blocks(config)))
        for name in self.init_names:  # the latents' starting values, in the reference's order
            self.register_buffer(name, trunc_normal_(torch.empty(width), 1.0).to(dtype), persistent=True)
        with torch.no_grad():  # the Q head starts at "never halt": sigmoid(-5) ≈ 0.007
            self.q_head.weight.zero_()
            self.q_head.bias.fill_(-5.0)

    def embed_input(self, inputs: torch.Tensor, puzzle_identifiers: torch.Tensor) -> torch.Tensor:
        """Input embedding [B, S, D]: puzzle prefix then tokens, (learned positions), times sqrt(D)."""
        x = self.embed_tokens(inputs.long())
        batch, width = x.shape[0], self.config.hidden_size
        if self.prefix_len:
            if self.puzzle_emb is None:
                prefix = x.new_zeros(batch, self.prefix_len, width)
            else:
                flat = self.puzzle_emb(puzzle_identifiers.long())
                flat = F.pad(flat, (0, self.prefix_len * width - flat.shape[-1]))
                prefix = flat.view(batch, self.prefix_len, width)
            x = torch.cat((prefix, x), dim=1)
        if self.embed_pos is not None:
            x = LEARNED_POS_SCALE * (x + self.embed_pos.weight.to(x.dtype))
        return self.embed_scale * x

    def empty_carry(self, batch_size: int, device: torch.device) -> InnerCarry:
        """Zero latents (every slot is reset to H_init/L_init before its first use)."""
        shape = (batch_size, self.config.total_seq_len, self.config.hidden_size)
        zeros = torch.zeros(shape, dtype=self.config.dtype, device=device)
        return InnerCarry(z_H=zeros, z_L=zeros.clone())

    def reset_carry(self, reset: torch.Tensor, carry: InnerCarry) -> InnerCarry:
        """Slots with reset=True restart from H_init/L_init broadcast over every position."""
        flag = reset.view(-1, 1, 1)
        return InnerCarry(
            z_H=torch.where(flag, self.H_init, carry.z_H), z_L=torch.where(flag, self.L_init, carry.z_L)
        )

    @staticmethod
    def answer_state(carry: InnerCarry) -> torch.Tensor:
        """The latent the heads read (z_H)."""
        return carry.z_H

    def reason(self, state: torch.Tensor, injection: torch.Tensor | None, rope: tuple | None) -> torch.Tensor:
        """The single reasoning net f(state, injection): add the injection (if any), then the L_layers blocks."""
        if injection is not None:
            state = state + injection
        for block in self.blocks:
            state = block(state, rope)
        return state

    def heads(self, z_H: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Token logits [B, seq_len, V] (prefix dropped) and fp32 q_halt, q_continue logits [B]."""
        logits = self.lm_head(z_H[:, self.prefix_len :])
        q = self.q_head(z_H[:, 0]).float()
        return logits, q[:, 0], q[:, 1]

    def forward(
        self, carry: InnerCarry, batch: dict[str, torch.Tensor]
    ) -> tuple[InnerCarry, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One ACT step: (new detached carry, logits, q_halt_logits, q_continue_logits)."""
        rope = None if self.rope is None else (self.rope.cos, self.rope.sin)
        x = self.embed_input(batch["inputs"], batch["puzzle_identifiers"])
        z_H, z_L = carry.z_H, carry.z_L
        with torch.no_grad():
            for _ in range(self.config.H_cycles - 1):
                for _ in range(self.config.L_cycles):
                    z_L = self.reason(z_L, z_H + x, rope)
                z_H = self.reason(z_H, z_L, rope)
        for _ in range(self.config.L_cycles):
            z_L = self.reason(z_L, z_H + x, rope)
        z_H = self.reason(z_H, z_L, rope)
        logits, q_halt, q_continue = self.heads(z_H)
        return InnerCarry(z_H=z_H.detach(), z_L=z_L.detach()), logits, q_halt, q_continue
