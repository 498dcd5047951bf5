"""TRM model: parameter counts, shapes, determinism, gradient flow, dtypes, config errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import make_batch, small_config
from trm.errors import TRMError
from trm.model import ACTLossHead, TinyRecursiveModel, TRMConfig
from trm.model.config import swiglu_intermediate
from trm.model.layers import (
    _RopeQKV,
    apply_rope,
    rms_norm,
    rope_tables,
    silu_gate,
    trunc_normal_,
)


def num_params(config: TRMConfig) -> int:
    return sum(p.numel() for p in TinyRecursiveModel(config).parameters())


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"seq_len": 900, "vocab_size": 12}, 6_829_058),  # ARC default
        ({"seq_len": 81, "vocab_size": 11, "mlp_t": True, "pos_encodings": "none"}, 5_028_866),  # Sudoku MLP
        ({"seq_len": 81, "vocab_size": 11}, 6_828_034),  # Sudoku attention
        ({"seq_len": 900, "vocab_size": 6}, 6_822_914),  # Maze attention
        ({"seq_len": 900, "vocab_size": 12, "mlp_t": True}, 18_801_666),  # ARC mlp_t
        (
            {"seq_len": 900, "vocab_size": 12, "hidden_size": 64, "num_heads": 4, "L_layers": 1}
            | {"puzzle_emb_ndim": 0, "puzzle_emb_len": 0},
            67_202,
        ),  # tiny CPU config
    ],
)
def test_parameter_counts_equal_upstream(overrides, expected):
    config = TRMConfig(batch_size=2, num_puzzle_identifiers=3, **overrides)
    assert num_params(config) == expected


def test_swiglu_intermediate_rounding():
    assert swiglu_intermediate(512, 4.0) == 1536
    assert swiglu_intermediate(97, 4.0) == 512
    assert swiglu_intermediate(64, 4.0) == 256


def test_puzzle_table_is_zero_fp32_buffer_not_parameter():
    model = TinyRecursiveModel(small_config())
    table = model.puzzle_emb.weight
    assert table.dtype == torch.float32 and table.shape == (5, 16)
    assert not table.requires_grad and torch.count_nonzero(table) == 0
    assert all(p is not table for p in model.parameters())
    assert "inner.puzzle_emb.weight" in model.state_dict()
    assert "inner.rope.cos" not in model.state_dict()  # RoPE tables are non-persistent
    assert model.inner.q_head.bias.tolist() == [-5.0, -5.0]
    assert torch.count_nonzero(model.inner.q_head.weight) == 0


def test_trunc_normal_std_and_bounds():
    torch.manual_seed(0)
    x = trunc_normal_(torch.empty(200_000), std=0.5)
    assert abs(x.std().item() - 0.5) < 0.005
    assert x.abs().max().item() <= 2 * 0.5 / 0.8796 + 1e-6  # clipped at 2 σ of the un-truncated normal
    assert x.abs().max().item() > 1.0


def test_rms_norm_and_rope_reference():
    x = torch.randn(2, 5, 3, 8)
    ref = x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5)
    torch.testing.assert_close(rms_norm(x, 1e-5), ref)
    cos, sin = torch.rand(5, 4), torch.rand(5, 4)
    full_cos, full_sin = torch.cat((cos, cos), -1)[:, None], torch.cat((sin, sin), -1)[:, None]
    rotated = torch.cat((-x[..., 4:], x[..., :4]), -1)
    torch.testing.assert_close(apply_rope(x, cos, sin), x * full_cos + rotated * full_sin)
    assert rms_norm(x.bfloat16(), 1e-5).dtype == torch.bfloat16


def test_custom_backward_of_rms_norm_and_rope_match_autograd():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: rms_norm(t, 1e-5), (x,))
    qkv = torch.randn(2, 4, 3, 2, 6, dtype=torch.float64, requires_grad=True)
    cos, sin = torch.rand(4, 3, dtype=torch.float64), torch.rand(4, 3, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda t: _RopeQKV.apply(t, *rope_tables(cos, sin)), (qkv,))
    out = _RopeQKV.apply(qkv, *rope_tables(cos, sin))
    torch.testing.assert_close(out[:, :, 2], qkv[:, :, 2])
    torch.testing.assert_close(out[:, :, :2], apply_rope(qkv[:, :, :2], cos, sin))
    gate_up = torch.randn(3, 5, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(silu_gate, (gate_up,))
    torch.testing.assert_close(silu_gate(gate_up), F.silu(gate_up[..., :4]) * gate_up[..., 4:])
    # bf16 activations: the gradient comes back in bf16, computed in fp32.
    xb = torch.randn(4, 8).bfloat16().requires_grad_(True)
    rms_norm(xb, 1e-5).sum().backward()
    assert xb.grad.dtype == torch.bfloat16


@pytest.mark.parametrize(
    "variant", [{}, {"mlp_t": True}, {"pos_encodings": "learned"}, {"pos_encodings": "none"}]
)
def test_forward_shapes(variant):
    config = small_config(**variant)
    model = TinyRecursiveModel(config)
    batch = make_batch(config)
    carry, out = model(model.initial_carry(batch), batch)
    assert out["logits"].shape == (3, 10, 7)
    assert out["q_halt_logits"].shape == (3,) and out["q_halt_logits"].dtype == torch.float32
    assert carry.inner_carry.z_H.shape == (3, 12, 16)
    assert not carry.inner_carry.z_H.requires_grad
    assert carry.steps.tolist() == [1, 1, 1]


def test_determinism_with_fixed_seed():
    config = small_config()
    results = []
    for _ in range(2):
        torch.manual_seed(123)
        head = ACTLossHead(TinyRecursiveModel(config))
        batch = make_batch(config)
        _carry, loss, *_ = head(head.initial_carry(batch), batch)
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in head.parameters()]))
    assert torch.equal(results[0][0], results[1][0])
    for a, b in zip(results[0][1], results[1][1], strict=True):
        assert torch.equal(a, b)


def test_gradients_flow_through_last_h_cycle_only():
    config = small_config(H_cycles=3, L_cycles=2, puzzle_emb_ndim=0)
    torch.manual_seed(0)
    model = TinyRecursiveModel(config)
    batch = make_batch(config)
    grad_flags = []
    model.inner.blocks[0].register_forward_hook(lambda *_: grad_flags.append(torch.is_grad_enabled()))
    carry = model.initial_carry(batch)
    _, out = model(carry, batch)
    assert grad_flags == [False] * 6 + [True] * 3  # (H-1)·(L+1) without grad, then L+1 with
    (out["logits"].sum() + out["q_halt_logits"].sum()).backward()
    grads = [p.grad.clone() for p in model.parameters()]

    # Reference: the first two cycles as constants, only the last cycle differentiated.
    model.zero_grad()
    inner = model.inner
    state = inner.reset_carry(torch.ones(3, dtype=torch.bool), carry.inner_carry)
    rope = (inner.rope.cos, inner.rope.sin)
    x = inner.embed_input(batch["inputs"], batch["puzzle_identifiers"])
    z_H, z_L = state.z_H, state.z_L
    with torch.no_grad():
        for _ in range(2):
            for _ in range(2):
                z_L = inner.reason(z_L, z_H + x, rope)
            z_H = inner.reason(z_H, z_L, rope)
    for _ in range(2):
        z_L = inner.reason(z_L, z_H + x, rope)
    z_H = inner.reason(z_H, z_L, rope)
    logits, q_halt, _ = inner.heads(z_H)
    (logits.sum() + q_halt.sum()).backward()
    for got, want in zip(grads, [p.grad for p in model.parameters()], strict=True):
        torch.testing.assert_close(got, want)


def test_bf16_forward_on_cpu():
    config = small_config(forward_dtype="bfloat16")
    head = ACTLossHead(TinyRecursiveModel(config))
    batch = make_batch(config)
    carry, loss, _, outputs, _ = head(
        head.initial_carry(batch), batch, return_keys=("logits", "q_halt_logits")
    )
    assert outputs["logits"].dtype == torch.bfloat16
    assert outputs["q_halt_logits"].dtype == torch.float32
    assert carry.inner_carry.z_H.dtype == torch.bfloat16
    assert loss.dtype == torch.float64 and torch.isfinite(loss)
    loss.backward()
    assert all(p.grad.dtype == torch.float32 and torch.isfinite(p.grad).all() for p in head.parameters())


def test_puzzle_emb_ndim_zero_keeps_prefix():
    config = small_config(puzzle_emb_ndim=0, puzzle_emb_len=16)  # crashed upstream
    model = TinyRecursiveModel(config)
    assert model.puzzle_emb is None
    batch = make_batch(config)
    carry, out = model(model.initial_carry(batch), batch)
    assert carry.inner_carry.z_H.shape[1] == 26 and out["logits"].shape == (3, 10, 7)


def test_puzzle_embedding_gradient_and_prefix_layout():
    config = small_config(puzzle_emb_ndim=20, puzzle_emb_len=0, hidden_size=16)  # ceil(20/16) = 2 positions
    assert config.prefix_len == 2
    model = TinyRecursiveModel(config)
    model.puzzle_emb.weight.normal_()
    batch = make_batch(config)
    x = model.inner.embed_input(batch["inputs"], batch["puzzle_identifiers"])
    rows = model.puzzle_emb.weight[batch["puzzle_identifiers"].long()]
    flat = x[:, :2].reshape(3, 32) / 4.0  # sqrt(16) scale
    torch.testing.assert_close(flat[:, :20], rows)
    assert torch.count_nonzero(flat[:, 20:]) == 0
    x.sum().backward()
    assert torch.equal(model.puzzle_emb.local_ids(), batch["puzzle_identifiers"].long())
    torch.testing.assert_close(model.puzzle_emb.local_grads(), torch.full((3, 20), 4.0))
    model.eval()
    model.puzzle_emb.clear_local()
    model.inner.embed_input(batch["inputs"], batch["puzzle_identifiers"])
    assert model.puzzle_emb.local_ids().tolist() == [config.num_puzzle_identifiers] * 3  # all slots empty


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"hidden_size": 30, "num_heads": 4}, "num_heads"),
        ({"pos_encodings": "alibi"}, "pos_encodings"),
        ({"forward_dtype": "int8"}, "forward_dtype"),
        ({"L_layers": 0}, "L_layers"),
        ({"halt_exploration_prob": 2.0}, "halt_exploration_prob"),
    ],
)
def test_config_errors_name_the_key(overrides, fragment):
    with pytest.raises(TRMError, match=fragment):
        small_config(**overrides)


def test_config_from_dict_ignores_upstream_extras_and_rejects_typos():
    base = {"batch_size": 2, "seq_len": 9, "vocab_size": 4, "num_puzzle_identifiers": 1}
    config = TRMConfig.from_dict(base | {"name": "recursive_reasoning.trm@X", "loss": {}, "causal": False})
    assert config.hidden_size == 512 and config.total_seq_len == 25
    with pytest.raises(TRMError, match="hiden_size"):
        TRMConfig.from_dict(base | {"hiden_size": 3})
    with pytest.raises(TRMError, match="seq_len"):
        TRMConfig.from_dict({"batch_size": 2, "vocab_size": 4, "num_puzzle_identifiers": 1})
