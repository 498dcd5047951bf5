"""Universal Reasoning Model (URM, arXiv 2512.14693): one hidden state, re-injected input, ConvSwiGLU blocks.

Per ACT step the hidden state h runs H_cycles × L_cycles loops of `h = blocks(h + x)`, x being the input
embedding; only the last cycle's L_cycles loops carry gradient (truncated backpropagation). Each block is
post-norm attention then a ConvSwiGLU: silu(gate)·up, a short causal depthwise convolution over the
sequence, silu, down projection. Up to `loops` ACT steps, halting and losses as TRM's (sigmoid halting,
exploration, stablemax). The reference keeps the convolution's parameters and arithmetic in bfloat16
whatever the forward dtype; `conv_dtype` keeps that default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from trm.errors import TRMError
from trm.model.act import TinyRecursiveModel
from trm.model.config import FORWARD_DTYPES, ModelShape, swiglu_intermediate, torch_dtype
from trm.model.core import TRMCore
from trm.model.layers import (
    Attention,
    CastedEmbedding,
    CastedLinear,
    RotaryEmbedding,
    rms_norm,
    silu_gate,
    trunc_normal_,
)
from trm.model.schema import DatasetSizes, URMArch, URMFields
from trm.model.sparse_embedding import SparsePuzzleEmbedding

__all__ = ["ConvSwiGLU", "URMArch", "URMConfig", "URMCore", "UniversalReasoningModel"]


@dataclass(kw_only=True)
class URMConfig(ModelShape, DatasetSizes, URMFields):
    """A URM model's full configuration: the architecture keys plus the dataset sizes."""

    # The shared ACT wrapper's switches with URM's fixed values: sigmoid halting, no Q-continue target.
    no_ACT_continue = True
    pos_encodings = "rope"

    def __post_init__(self) -> None:
        positive = ("batch_size", "seq_len", "vocab_size", "num_puzzle_identifiers", "loops", "H_cycles")
        positive += ("L_cycles", "num_layers", "hidden_size", "num_heads", "conv_kernel")
        for key in positive:
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise TRMError(f"arch.{key}={value!r} is invalid: set it to a positive integer.")
        if not isinstance(self.puzzle_emb_ndim, int) or self.puzzle_emb_ndim < 0:
            raise TRMError(f"arch.puzzle_emb_ndim={self.puzzle_emb_ndim!r} is invalid: use an integer >= 0.")
        if self.hidden_size % self.num_heads or (self.hidden_size // self.num_heads) % 2:
            raise TRMError(
                f"arch.hidden_size={self.hidden_size} / arch.num_heads={self.num_heads} must give an even "
                "head_dim (RoPE): e.g. hidden_size=512 num_heads=8."
            )
        for key in ("forward_dtype", "conv_dtype"):
            if getattr(self, key) not in FORWARD_DTYPES:
                raise TRMError(
                    f"arch.{key}={getattr(self, key)!r} is unknown: use one of {', '.join(FORWARD_DTYPES)}."
                )
        if not 0.0 <= self.halt_exploration_prob <= 1.0:
            raise TRMError(f"arch.halt_exploration_prob={self.halt_exploration_prob} must lie in [0, 1].")
        deltas = list(self.loop_deltas)
        if (
            not deltas
            or len(set(deltas)) != len(deltas)
            or any(not isinstance(d, int) or isinstance(d, bool) or self.loops + d < 1 for d in deltas)
        ):
            raise TRMError(
                f"arch.loop_deltas={deltas!r} is invalid: give distinct integers with loops + delta >= 1 "
                "(the reference evaluates with [0,8]; [0] evaluates once)."
            )
        if not self.expansion > 0 or not self.rms_norm_eps > 0 or not self.rope_theta > 0:
            raise TRMError("arch.expansion, arch.rms_norm_eps and arch.rope_theta must be positive.")

    @property
    def prefix_len(self) -> int:
        """Puzzle-prefix positions: ceil(puzzle_emb_ndim / hidden_size) (1 for ARC)."""
        return math.ceil(self.puzzle_emb_ndim / self.hidden_size)


class ConvSwiGLU(nn.Module):
    """down(silu(dwconv(silu(gate)·up))): a SwiGLU whose hidden activations pass a short depthwise conv.

    The conv has `kernel` taps per channel plus a bias, zero padding kernel // 2 on both sides and the
    first S outputs kept (kernel 2: out[t] = w0·h[t-1] + w1·h[t] + b). Its parameters live in `conv_dtype`
    and the activations are cast to it; the down projection then runs in that dtype.
    """

    def __init__(self, width: int, expansion: float, kernel: int, conv_dtype: torch.dtype) -> None:
        super().__init__()
        inter = swiglu_intermediate(width, expansion)
        self.kernel = kernel
        self.gate_up = CastedLinear(width, 2 * inter)
        # PyTorch's Conv1d default init (kaiming-uniform with a=√5): U(±1/√fan_in), fan_in = kernel.
        bound = 1.0 / math.sqrt(kernel)
        self.conv_weight = nn.Parameter(torch.empty(inter, 1, kernel).uniform_(-bound, bound).to(conv_dtype))
        self.conv_bias = nn.Parameter(torch.empty(inter).uniform_(-bound, bound).to(conv_dtype))
        self.down = CastedLinear(inter, width)

    def forward(self, x_BSD: torch.Tensor) -> torch.Tensor:
        """[B, S, D] → [B, S, D] in conv_dtype."""
        seq = x_BSD.shape[1]
        h_BIS = silu_gate(self.gate_up(x_BSD)).transpose(1, 2).to(self.conv_weight.dtype)
        conv = F.conv1d(
            h_BIS, self.conv_weight, self.conv_bias, padding=self.kernel // 2, groups=h_BIS.shape[1]
        )
        return self.down(F.silu(conv[..., :seq]).transpose(1, 2))


class URMBlock(nn.Module):
    """Post-norm block: x = norm(x + attn(x)); x = norm(x + ConvSwiGLU(x))."""

    def __init__(self, config: URMConfig) -> None:
        super().__init__()
        self.eps = config.rms_norm_eps
        self.attn = Attention(config.hidden_size, config.num_heads)
        self.mlp = ConvSwiGLU(
            config.hidden_size, config.expansion, config.conv_kernel, torch_dtype(config.conv_dtype)
        )

    def forward(self, x_BSD: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """One block application."""
        x_BSD = rms_norm(x_BSD + self.attn(x_BSD, rope), self.eps)
        return rms_norm(x_BSD + self.mlp(x_BSD), self.eps)


@dataclass
class HiddenCarry:
    """URM's single latent [B, S, D] in forward dtype."""

    hidden: torch.Tensor


class URMCore(nn.Module):
    """One ACT step of URM: H_cycles × L_cycles loops of h = blocks(h + x), the last L_cycles with grad."""

    # The input embedding and output heads are TRM's (no learned positions, ceil-rule prefix).
    embed_input = TRMCore.embed_input
    heads = TRMCore.heads

    def __init__(self, config: URMConfig) -> None:
        super().__init__()
        self.config = config
        dtype = config.dtype
        width = config.hidden_size
        self.prefix_len = config.prefix_len
        self.embed_scale = math.sqrt(width)
        self.embed_pos = None

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
        self.rope = RotaryEmbedding(config.head_dim, config.total_seq_len, config.rope_theta)
        self.blocks = nn.ModuleList(URMBlock(config) for _ in range(config.num_layers))
        self.register_buffer("init_hidden", trunc_normal_(torch.empty(width), 1.0).to(dtype), persistent=True)
        with torch.no_grad():  # the Q head starts at "never halt": sigmoid(-5) ≈ 0.007
            self.q_head.weight.zero_()
            self.q_head.bias.fill_(-5.0)

    def empty_carry(self, batch_size: int, device: torch.device) -> HiddenCarry:
        """Zero latents (every slot is reset to init_hidden before its first use)."""
        shape = (batch_size, self.config.total_seq_len, self.config.hidden_size)
        return HiddenCarry(torch.zeros(shape, dtype=self.config.dtype, device=device))

    def reset_carry(self, reset: torch.Tensor, carry: HiddenCarry) -> HiddenCarry:
        """Slots with reset=True restart from init_hidden broadcast over every position."""
        return HiddenCarry(torch.where(reset.view(-1, 1, 1), self.init_hidden, carry.hidden))

    @staticmethod
    def answer_state(carry: HiddenCarry) -> torch.Tensor:
        """The latent the heads read."""
        return carry.hidden

    def loop(self, hidden: torch.Tensor, x: torch.Tensor, rope: tuple) -> torch.Tensor:
        """One loop: re-inject the input, then every block."""
        hidden = hidden + x
        for block in self.blocks:
            hidden = block(hidden, rope)
        return hidden

    def forward(
        self, carry: HiddenCarry, batch: dict[str, torch.Tensor]
    ) -> tuple[HiddenCarry, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One ACT step: (new detached carry, logits, q_halt_logits, q_continue_logits)."""
        rope = (self.rope.cos, self.rope.sin)
        x = self.embed_input(batch["inputs"], batch["puzzle_identifiers"])
        hidden = carry.hidden
        with torch.no_grad():
            for _ in range((self.config.H_cycles - 1) * self.config.L_cycles):
                hidden = self.loop(hidden, x, rope)
        for _ in range(self.config.L_cycles):
            hidden = self.loop(hidden, x, rope)
        logits, q_halt, q_continue = self.heads(hidden)
        return HiddenCarry(hidden.detach()), logits, q_halt, q_continue


class UniversalReasoningModel(TinyRecursiveModel):
    """URM with TRM's adaptive-computation wrapper (one call = one supervision step for every slot)."""

    core_class = URMCore
