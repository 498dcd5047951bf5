"""Building blocks of TRM: init, casted linear/embedding, RMSNorm, RoPE, attention, SwiGLU, the block.

Shape legend: B batch, S sequence (prefix + tokens), D hidden, H heads, K head_dim.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from trm.model.config import TRMConfig, swiglu_intermediate


def trunc_normal_(tensor: torch.Tensor, std: float, bound: float = 2.0) -> torch.Tensor:
    """Fill `tensor` with a normal truncated at ±bound·σ whose *truncated* std equals `std` (JAX-style).

    Sampling is uniform → erfinv → scale → clip, so it consumes the torch RNG once per element.
    """
    with torch.no_grad():
        if std == 0:
            return tensor.zero_()
        # Variance of a standard normal truncated to [-bound, bound]: 1 - 2·b·φ(b) / (Φ(b) - Φ(-b)).
        mass = math.erf(bound / math.sqrt(2.0))
        pdf = math.exp(-0.5 * bound * bound) / math.sqrt(2.0 * math.pi)
        scale = std / math.sqrt(1.0 - 2.0 * bound * pdf / mass)
        tensor.uniform_(-mass, mass)
        tensor.erfinv_()
        tensor.mul_(math.sqrt(2.0) * scale)
        return tensor.clamp_(-bound * scale, bound * scale)


def _upcast(x: torch.Tensor) -> torch.Tensor:
    """x in at least fp32 (half and bfloat16 are upcast; fp32 and fp64 are kept)."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


class _RMSNorm(torch.autograd.Function):
    """y = x·rsqrt(mean(x²) + eps) in fp32, with a hand-written backward (fewer passes than autograd's)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, eps: float) -> torch.Tensor:
        xf = _upcast(x)
        rstd = torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)
        y = xf * rstd
        ctx.save_for_backward(y, rstd)
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        y, rstd = ctx.saved_tensors
        gf = _upcast(grad)
        # d/dx [x·r] with r = (mean(x²)+eps)^-1/2:  r·(g − y·mean(g·y))
        dot = (gf * y).mean(-1, keepdim=True)
        dx = torch.addcmul(gf, y, dot, value=-1.0).mul_(rstd)
        return dx.to(grad.dtype), None


def rms_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """Parameter-free RMSNorm over the last axis, computed in fp32 and cast back to x's dtype.

    Eager mode uses the hand-written backward; under torch.compile the plain formula is traced so that
    inductor fuses it with its neighbours.
    """
    if torch.compiler.is_compiling():
        xf = _upcast(x)
        return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)).to(x.dtype)
    return _RMSNorm.apply(x, eps)


class CastedLinear(nn.Module):
    """Linear layer with fp32 weights cast to the input dtype; LeCun truncated-normal init, zero bias."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(
            trunc_normal_(torch.empty(out_features, in_features), 1.0 / math.sqrt(in_features))
        )
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x @ Wᵀ (+ b) in x's dtype."""
        bias = None if self.bias is None else self.bias.to(x.dtype)
        return F.linear(x, self.weight.to(x.dtype), bias)


class CastedEmbedding(nn.Module):
    """Embedding table in fp32 whose lookups are returned in `dtype`."""

    def __init__(self, num_embeddings: int, dim: int, std: float, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype
        self.weight = nn.Parameter(trunc_normal_(torch.empty(num_embeddings, dim), std))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows of the table for `ids`, cast to the forward dtype."""
        return F.embedding(ids, self.weight).to(self.dtype)


class RotaryEmbedding(nn.Module):
    """Rotate-half RoPE tables (fp32, non-persistent) for positions 0..max_len-1."""

    def __init__(self, head_dim: int, max_len: int, base: float) -> None:
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        freqs = torch.outer(torch.arange(max_len, dtype=torch.float32), inv_freq)  # [S, K/2]
        # The full tables are cat(freqs, freqs); only one half is stored since both halves are equal.
        self.register_buffer("cos", freqs.cos(), persistent=False)
        self.register_buffer("sin", freqs.sin(), persistent=False)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, out: torch.Tensor) -> None:
    """out = x·cat(cos,cos) + rotate_half(x)·cat(sin,sin), computed in fp32 (sin < 0 rotates back)."""
    x1, x2 = _upcast(x).chunk(2, dim=-1)
    if out.dtype == x1.dtype:
        o1, o2 = out.chunk(2, dim=-1)
        torch.mul(x1, cos, out=o1).addcmul_(x2, sin, value=-1.0)
        torch.mul(x2, cos, out=o2).addcmul_(x1, sin)
    else:
        out.copy_(torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1))


class _RopeQKV(torch.autograd.Function):
    """RoPE on the q and k parts of a fused qkv tensor [B, S, 3, H, K]; v passes through."""

    @staticmethod
    def forward(ctx: Any, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(cos, sin)
        out = torch.empty_like(qkv)
        _rotate(qkv[:, :, :2], cos, sin, out[:, :, :2])
        out[:, :, 2] = qkv[:, :, 2]
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        cos, sin = ctx.saved_tensors
        grad_qkv = torch.empty_like(grad)
        _rotate(grad[:, :, :2], cos, -sin, grad_qkv[:, :, :2])  # a rotation's transpose is its inverse
        grad_qkv[:, :, 2] = grad[:, :, 2]
        return grad_qkv, None, None


def rope_tables(cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Half tables [S, K/2] reshaped to broadcast over [B, S, 2, H, K/2]."""
    return cos[:, None, None, :], sin[:, None, None, :]


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Differentiable rotate-half RoPE on x [B, S, ..., K] in fp32 (cos/sin [S, K/2]); returns x's dtype.

    Equals x·cat(cos,cos) + rotate_half(x)·cat(sin,sin) with rotate_half(x) = cat(-x2, x1).
    """
    shape = (cos.shape[0],) + (1,) * (x.ndim - 3) + (cos.shape[1],)
    cos, sin = cos.view(shape), sin.view(shape)
    x1, x2 = _upcast(x).chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


class Attention(nn.Module):
    """Non-causal multi-head self-attention: fused qkv (no bias), RoPE on q/k, SDPA, output projection.

    head_dim = hidden_size // num_heads; when num_heads does not divide hidden_size (upstream's transformer
    baseline: 512 wide, 12 heads) the heads span num_heads·head_dim < hidden_size, as in the reference."""

    def __init__(self, hidden_size: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        inner = num_heads * self.head_dim
        self.qkv = CastedLinear(hidden_size, 3 * inner)
        self.out = CastedLinear(inner, hidden_size)

    def forward(self, x_BSD: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        """Attention output [B, S, D]."""
        B, S, _ = x_BSD.shape
        qkv = self.qkv(x_BSD).view(B, S, 3, self.num_heads, self.head_dim)
        if rope is None:
            q, k, v = qkv.unbind(2)
        elif torch.compiler.is_compiling():  # plain ops: inductor fuses them
            q, k = apply_rope(qkv[:, :, :2], *rope).unbind(2)
            v = qkv[:, :, 2]
        else:
            q, k, v = _RopeQKV.apply(qkv, *rope_tables(*rope)).unbind(2)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return self.out(out.transpose(1, 2).reshape(B, S, self.num_heads * self.head_dim))


class _SiluGate(torch.autograd.Function):
    """silu(gate)·up from a fused [.., 2I] gate/up tensor; the backward writes both halves in place (no cat)."""

    @staticmethod
    def forward(ctx: Any, gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        act = F.silu(gate)
        ctx.save_for_backward(gate, up, act)
        return act * up

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        gate, up, act = ctx.saved_tensors
        grad_gate_up = torch.empty(*grad.shape[:-1], 2 * grad.shape[-1], dtype=grad.dtype, device=grad.device)
        d_gate, d_up = grad_gate_up.chunk(2, dim=-1)
        torch.mul(grad, act, out=d_up)
        torch.ops.aten.silu_backward.grad_input(grad * up, gate, grad_input=d_gate)
        return grad_gate_up


def silu_gate(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(first half)·(second half) of the last axis."""
    if torch.compiler.is_compiling():
        gate, up = gate_up.chunk(2, dim=-1)
        return F.silu(gate) * up
    return _SiluGate.apply(gate_up)


class SwiGLU(nn.Module):
    """down(silu(gate) · up) with a fused gate/up projection (first half gate) and no biases."""

    def __init__(self, width: int, expansion: float) -> None:
        super().__init__()
        inter = swiglu_intermediate(width, expansion)
        self.gate_up = CastedLinear(width, 2 * inter)
        self.down = CastedLinear(inter, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """SwiGLU over the last axis."""
        return self.down(silu_gate(self.gate_up(x)))


class Block(nn.Module):
    """Post-norm block: x = norm(x + mix(x)); x = norm(x + SwiGLU(x)). `mix` is attention or token SwiGLU."""

    def __init__(self, config: TRMConfig) -> None:
        super().__init__()
        self.eps = config.rms_norm_eps
        self.mlp_t = config.mlp_t
        if config.mlp_t:
            self.token_mlp = SwiGLU(config.total_seq_len, config.expansion)
        else:
            self.attn = Attention(config.hidden_size, config.num_heads)
        self.mlp = SwiGLU(config.hidden_size, config.expansion)

    def forward(self, x_BSD: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        """One block application."""
        if self.mlp_t:
            x_BDS = x_BSD.transpose(1, 2)
            x_BSD = rms_norm(x_BDS + self.token_mlp(x_BDS), self.eps).transpose(1, 2)
        else:
            x_BSD = rms_norm(x_BSD + self.attn(x_BSD, rope), self.eps)
        return rms_norm(x_BSD + self.mlp(x_BSD), self.eps)
