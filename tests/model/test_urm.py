"""URM (arch=urm): shapes, parameter count, the ConvSwiGLU's causal conv, truncated backprop, and parity
with the reference implementation when TRM_URM points at a URM checkout (skipped otherwise)."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import make_batch
from trm.errors import TRMError
from trm.model import ACTLossHead, UniversalReasoningModel, URMConfig
from trm.model.config import swiglu_intermediate
from trm.model.registry import build_model, get_spec, model_config
from trm.model.schema import URMArch
from trm.model.upstream import convert_upstream_state_dict, detect_arch, to_upstream_state_dict
from trm.model.urm import ConvSwiGLU

URM_CHECKOUT = os.environ.get("TRM_URM")
# bfloat16 gradients: a few elements whose bf16 rounding flipped; the tensor as a whole must agree.
BF16_GRAD_REL_ERR = 1e-2
# bf16's unit roundoff (half its machine epsilon, 2^-8): one rounding of a value of magnitude m moves it
# by up to m * BF16_U.
BF16_U = torch.finfo(torch.bfloat16).eps / 2


def assert_close_after_bf16_rounding(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Equal up to a bf16 rounding that flipped somewhere upstream of each element: a flipped input of the
    tensor's scale moves an output by about that scale times BF16_U, whatever the output's own size, so the
    absolute tolerance is one rounding of the tensor's largest magnitude (the relative one two roundings).
    A fixed atol fails on CPUs whose fp32 kernels round an intermediate the other way."""
    scale = expected.detach().abs().max().item()
    torch.testing.assert_close(actual, expected, rtol=2 * BF16_U, atol=BF16_U * max(scale, 1.0))


def small_config(**overrides) -> URMConfig:
    values = dict(
        batch_size=3,
        seq_len=10,
        vocab_size=7,
        num_puzzle_identifiers=5,
        puzzle_emb_ndim=24,
        loops=4,
        H_cycles=2,
        L_cycles=2,
        num_layers=2,
        hidden_size=16,
        num_heads=2,
        forward_dtype="float32",
    )
    values.update(overrides)
    return URMConfig(**values)


def expected_params(c: URMConfig) -> int:
    inter = swiglu_intermediate(c.hidden_size, c.expansion)
    d = c.hidden_size
    block = 3 * d * d + d * d + 2 * inter * d + inter * c.conv_kernel + inter + inter * d
    return c.vocab_size * d + d * c.vocab_size + 2 * d + 2 + c.num_layers * block


def test_parameter_count_and_shapes() -> None:
    config = small_config()
    model = UniversalReasoningModel(config)
    assert sum(p.numel() for p in model.parameters()) == expected_params(config)
    assert config.prefix_len == 2 and config.total_seq_len == 12  # ceil(24 / 16) prefix positions
    head = ACTLossHead(model)
    batch = make_batch(config)
    carry, loss, metrics, out, _ = head(head.initial_carry(batch), batch, return_keys=("logits",))
    assert metrics["count"] == 0  # nothing halts at the first of 4 steps
    assert out["logits"].shape == (3, 10, 7) and carry.inner_carry.hidden.shape == (3, 12, 16)
    assert loss.ndim == 0 and torch.isfinite(loss)
    conv = model.inner.blocks[0].mlp
    assert conv.conv_weight.dtype == torch.bfloat16 and conv.conv_bias.dtype == torch.bfloat16


def test_conv_swiglu_mixes_only_the_previous_and_current_token() -> None:
    torch.manual_seed(0)
    mlp = ConvSwiGLU(8, 2.0, kernel=2, conv_dtype=torch.float32)
    x = torch.randn(1, 6, 8)
    base = mlp(x)
    changed = x.clone()
    changed[:, 3] += 1.0
    diff = (mlp(changed) - base).abs().sum(-1)[0]
    assert diff[:3].max() == 0 and diff[3] > 0 and diff[4] > 0 and diff[5] == 0
    # Written out: out[t] = down(silu(w0·h[t-1] + w1·h[t] + b)) with h = silu(gate)·up.
    gate, up = mlp.gate_up(x).chunk(2, dim=-1)
    h = F.silu(gate) * up
    prev = F.pad(h, (0, 0, 1, 0))[:, :-1]
    w = mlp.conv_weight[:, 0]
    manual = mlp.down(F.silu(prev * w[:, 0] + h * w[:, 1] + mlp.conv_bias))
    torch.testing.assert_close(base, manual)


def test_only_the_last_cycle_carries_gradient() -> None:
    torch.manual_seed(0)
    config = small_config(H_cycles=3, L_cycles=1, num_layers=1)
    model = UniversalReasoningModel(config)
    batch = make_batch(config)
    carry = model.inner.reset_carry(
        torch.ones(3, dtype=torch.bool), model.inner.empty_carry(3, torch.device("cpu"))
    )
    calls: list[bool] = []
    model.inner.blocks[0].register_forward_hook(lambda *_: calls.append(torch.is_grad_enabled()))
    _, logits, _, _ = model.inner(carry, batch)
    assert calls == [False, False, True]
    assert logits.requires_grad


def test_config_errors_name_the_key() -> None:
    with pytest.raises(TRMError, match=r"arch\.loops=0"):
        small_config(loops=0)
    with pytest.raises(TRMError, match=r"arch\.conv_dtype"):
        small_config(conv_dtype="int8")
    with pytest.raises(TRMError, match="even head_dim"):
        small_config(hidden_size=18, num_heads=6)


def test_registry_builds_urm_from_the_schema_and_maps_reference_keys() -> None:
    spec = get_spec("urm.urm@URM")
    assert spec.name == "urm" and get_spec("urm") is spec
    arch = URMArch(
        loops=3, H_cycles=1, L_cycles=1, num_layers=1, hidden_size=16, num_heads=2, puzzle_emb_ndim=16
    )
    config = model_config(
        arch, batch_size=2, seq_len=5, vocab_size=6, num_puzzle_identifiers=3, forward_dtype="float32"
    )
    assert isinstance(config, URMConfig) and config.halt_max_steps == 3
    model = build_model(config)
    assert isinstance(model, UniversalReasoningModel)
    reference = to_upstream_state_dict(model.state_dict(), compiled=True, arch="urm")
    assert "_orig_mod.model.inner.layers.0.mlp.dwconv.weight" in reference
    assert "_orig_mod.model.inner.init_hidden" in reference
    assert detect_arch(reference) == "urm"
    back = convert_upstream_state_dict(reference)
    assert back.keys() == model.state_dict().keys()


@pytest.mark.skipif(not URM_CHECKOUT, reason="set TRM_URM to a URM checkout")
@pytest.mark.parametrize(
    ("conv_dtype", "tol"),
    # float32 convolution: equal to fp32 rounding. bfloat16 (the reference's): the conv's inputs are
    # rounded to bfloat16, so a last-bit fp32 difference upstream may move one bf16 step
    # (assert_close_after_bf16_rounding).
    [("float32", dict(rtol=1e-4, atol=1e-5)), ("bfloat16", None)],
)
def test_same_weights_give_reference_outputs_and_gradients(conv_dtype: str, tol: dict | None) -> None:
    from tests.model.urm_reference import reference_head

    config = small_config(conv_dtype=conv_dtype)
    torch.manual_seed(0)
    reference = reference_head(config, URM_CHECKOUT)
    with torch.no_grad():
        reference.model.inner.puzzle_emb.weights.normal_()
        # Q logits around zero, so that slots halt at different steps (and exploration is exercised).
        reference.model.inner.q_head.weight.normal_(0.0, 0.5)
        reference.model.inner.q_head.bias.zero_()
    ours = ACTLossHead(UniversalReasoningModel(config))
    ours.model.load_state_dict(convert_upstream_state_dict(dict(reference.state_dict())), strict=True)
    n_ref = sum(p.numel() for p in reference.parameters())
    assert sum(p.numel() for p in ours.parameters()) == n_ref == expected_params(config)

    batch = make_batch(config)
    carry_r, carry_o = reference.initial_carry(batch), ours.initial_carry(batch)
    halted_seen, diffs = [], []
    for step in range(6):  # more than `loops`: slots halt and reload
        torch.manual_seed(100 + step)  # both draw the exploration from the same RNG state
        carry_r, loss_r, metrics_r, out_r, _ = reference(carry=carry_r, batch=batch, return_keys=["logits"])
        torch.manual_seed(100 + step)
        carry_o, loss_o, metrics_o, out_o, _ = ours(carry_o, batch, return_keys=("logits",))
        if tol is None:
            assert_close_after_bf16_rounding(out_o["logits"], out_r["logits"])
            assert_close_after_bf16_rounding(loss_o.double(), loss_r.double())
        else:
            torch.testing.assert_close(out_o["logits"], out_r["logits"], **tol)
            torch.testing.assert_close(loss_o.double(), loss_r.double(), rtol=tol["rtol"], atol=tol["atol"])
        assert torch.equal(carry_o.halted, carry_r.halted) and torch.equal(carry_o.steps, carry_r.steps)
        for key in ("count", "accuracy", "exact_accuracy", "q_halt_accuracy", "steps"):
            torch.testing.assert_close(metrics_o[key].double(), metrics_r[key].double())
        halted_seen.append(carry_o.halted.clone())
        diffs.append(
            ((out_o["logits"] - out_r["logits"]).abs().max().item(), abs(loss_o.item() - loss_r.item()))
        )
        loss_o.backward()
        loss_r.backward()
    assert any(h.any() and not h.all() for h in halted_seen)  # slots halted at different steps
    grads_r = convert_upstream_state_dict({n: p.grad for n, p in reference.named_parameters()}, "urm")
    worst = {}
    for name, param in ours.model.named_parameters():
        ref = grads_r[name].float()
        worst[name] = (
            (param.grad.float() - ref).abs().max().item(),
            ((param.grad.float() - ref).norm() / ref.norm()).item(),
        )
        if tol is not None:
            torch.testing.assert_close(param.grad, grads_r[name], **tol)
        else:
            assert worst[name][1] < BF16_GRAD_REL_ERR, (name, worst[name])
    print(  # the numbers reported by `pytest -s`
        f"URM parity conv_dtype={conv_dtype}: max |Δlogits| {max(d[0] for d in diffs):.3g}, "
        f"max |Δloss| {max(d[1] for d in diffs):.3g}, max |Δgrad| {max(v[0] for v in worst.values()):.3g}, "
        f"max relative grad error {max(v[1] for v in worst.values()):.3g}, parameters {n_ref}"
    )
