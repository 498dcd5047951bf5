"""Numerics against upstream's own model, when TRM_UPSTREAM points at a TinyRecursiveModels checkout.

Skipped otherwise (and when upstream's imports, pydantic and einops, are missing). Upstream's weights are
loaded into ours through the key mapping, then both run the same ACT steps on the same batch.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

from tests.helpers import make_batch, require_modules, small_config
from trm.model import ACTLossHead, HaltExploration, TinyRecursiveModel
from trm.model.registry import get_spec
from trm.model.upstream import convert_upstream_state_dict, detect_arch

UPSTREAM = os.environ.get("TRM_UPSTREAM")
pytestmark = pytest.mark.skipif(not UPSTREAM, reason="set TRM_UPSTREAM to a TinyRecursiveModels checkout")


def _upstream_head(config, loss_type, arch="trm"):
    require_modules("pydantic", "einops")
    from tools.bench.model import build_upstream

    return build_upstream(config, torch.device("cpu"), UPSTREAM, loss_type, get_spec(arch).model_id)


@pytest.mark.parametrize(
    ("variant", "loss_type"),
    # (upstream's softmax_cross_entropy crashes: its loss head passes a valid_mask it does not accept)
    [
        ({}, "stablemax_cross_entropy"),
        ({"mlp_t": True, "pos_encodings": "none"}, "stablemax_cross_entropy"),
        ({"pos_encodings": "learned", "puzzle_emb_len": 0, "puzzle_emb_ndim": 24}, "stablemax_cross_entropy"),
    ],
)
def test_same_weights_give_upstream_outputs_and_gradients(variant, loss_type):
    config = small_config(halt_exploration_prob=0.0, **variant)
    torch.manual_seed(0)
    upstream = _upstream_head(config, loss_type)
    with torch.no_grad():
        upstream.model.inner.puzzle_emb.weights.normal_()
    ours = ACTLossHead(TinyRecursiveModel(dataclasses.replace(config)), loss_type)
    ours.model.load_state_dict(
        convert_upstream_state_dict({k: v for k, v in upstream.state_dict().items()}), strict=True
    )
    batch = make_batch(config)
    explore = HaltExploration(torch.zeros(3, dtype=torch.bool), torch.full((3,), 2))
    carry_u, carry_o = upstream.initial_carry(batch), ours.initial_carry(batch)
    for _ in range(3):
        carry_u, loss_u, metrics_u, out_u, _ = upstream(carry=carry_u, batch=batch, return_keys=["logits"])
        carry_o, loss_o, metrics_o, out_o, _ = ours(
            carry_o, batch, return_keys=("logits",), exploration=explore
        )
        torch.testing.assert_close(out_o["logits"], out_u["logits"], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(loss_o.double(), loss_u.double(), rtol=1e-5, atol=1e-5)
        for key in ("count", "accuracy", "exact_accuracy", "q_halt_accuracy", "steps"):
            torch.testing.assert_close(metrics_o[key].double(), metrics_u[key].double())
        loss_o.backward()
        loss_u.backward()
    grads_u = convert_upstream_state_dict(
        {n: p.grad for n, p in upstream.named_parameters()}  # names as in the state dict
    )
    for name, param in ours.model.named_parameters():
        torch.testing.assert_close(param.grad, grads_u[name], rtol=1e-3, atol=1e-5)
    # Both tables hand out one slot per batch row; three forwards without an optimizer step wrap round
    # (ours holds batch_size slots), so each slot's gradient adds up over the steps in both.
    table_o, table_u = ours.model.puzzle_emb, upstream.model.inner.puzzle_emb
    assert torch.equal(table_o.local_ids(), table_u.local_ids.long())
    torch.testing.assert_close(table_o.local_grads(), table_u.local_weights.grad, rtol=1e-3, atol=1e-5)


# Settings each model fixes or needs beyond TRM's small config.
EXTRA = {
    "hrm": {"puzzle_emb_len": 0, "no_ACT_continue": False, "H_layers": 2, "L_layers": 1},
    # 4 heads of 4 on an 18-wide model: the heads need not divide the width (upstream's 512 / 12).
    "transformers_baseline": {"puzzle_emb_len": 0, "H_layers": 2, "hidden_size": 18, "num_heads": 4},
}
ATTENTION, TOKEN_MLP, LEARNED = {}, {"mlp_t": True, "pos_encodings": "none"}, {"pos_encodings": "learned"}
CASES = [
    *((arch, v) for arch in ("trm_singlez", "trm_hier6", "hrm") for v in (ATTENTION, TOKEN_MLP, LEARNED)),
    *(("transformers_baseline", v) for v in (ATTENTION, LEARNED)),
]


@pytest.mark.parametrize(("arch", "variant"), CASES)
def test_other_upstream_models_give_upstream_outputs_and_gradients(arch, variant):
    spec = get_spec(arch)
    values = dataclasses.asdict(small_config(halt_exploration_prob=0.0, H_cycles=3, L_cycles=3, **variant))
    config = spec.config(**{**values, **EXTRA.get(arch, {})})
    torch.manual_seed(0)
    upstream = _upstream_head(config, "stablemax_cross_entropy", arch)
    with torch.no_grad():
        upstream.model.inner.puzzle_emb.weights.normal_()
        upstream.model.inner.q_head.weight.normal_(0.0, 0.5)  # slots halt at different steps
        upstream.model.inner.q_head.bias.zero_()
    ours = ACTLossHead(spec.model(config))
    reference = dict(upstream.state_dict())
    assert detect_arch(reference) == arch
    ours.model.load_state_dict(convert_upstream_state_dict(reference), strict=True)
    n_params = sum(p.numel() for p in ours.parameters())
    assert n_params == sum(p.numel() for p in upstream.parameters())
    batch = make_batch(config)
    explore = HaltExploration(torch.zeros(3, dtype=torch.bool), torch.full((3,), 2))
    carry_u, carry_o = upstream.initial_carry(batch), ours.initial_carry(batch)
    worst = 0.0
    for _ in range(5):  # more than halt_max_steps: slots halt and reload
        carry_u, loss_u, metrics_u, out_u, _ = upstream(carry=carry_u, batch=batch, return_keys=["logits"])
        carry_o, loss_o, metrics_o, out_o, _ = ours(
            carry_o, batch, return_keys=("logits",), exploration=explore
        )
        torch.testing.assert_close(out_o["logits"], out_u["logits"], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(loss_o.double(), loss_u.double(), rtol=1e-5, atol=1e-5)
        assert torch.equal(carry_o.halted, carry_u.halted)
        for key in ("count", "accuracy", "exact_accuracy", "q_halt_accuracy", "steps"):
            torch.testing.assert_close(metrics_o[key].double(), metrics_u[key].double())
        worst = max(worst, (out_o["logits"] - out_u["logits"]).abs().max().item())
        loss_o.backward()
        loss_u.backward()
    grads_u = convert_upstream_state_dict({n: p.grad for n, p in upstream.named_parameters()}, arch)
    for name, param in ours.model.named_parameters():
        torch.testing.assert_close(param.grad, grads_u[name], rtol=1e-3, atol=1e-5)
        worst = max(worst, (param.grad - grads_u[name]).abs().max().item())
    print(f"{arch} {variant}: max |Δ| over logits and gradients {worst:.3g}, parameters {n_params}")


def test_baseline_act_inference_evaluates_as_upstream():
    """arch.act_inference=True: evaluation halts on the Q head, and a slot halting alone restarts."""
    spec = get_spec("transformers_baseline")
    values = dataclasses.asdict(small_config(halt_exploration_prob=0.0, halt_max_steps=8))
    config = spec.config(**{**values, **EXTRA["transformers_baseline"], "act_inference": True})
    torch.manual_seed(0)
    upstream = _upstream_head(config, "stablemax_cross_entropy", "transformers_baseline").eval()
    with torch.no_grad():
        upstream.model.inner.puzzle_emb.weights.normal_()
        upstream.model.inner.q_head.weight.normal_(0.0, 0.5)  # slots halt at different steps
        upstream.model.inner.q_head.bias.zero_()
    ours = ACTLossHead(spec.model(config)).eval()
    ours.model.load_state_dict(
        convert_upstream_state_dict(dict(upstream.state_dict()), "transformers_baseline"), strict=True
    )
    batch = make_batch(config)
    carry_u, carry_o = upstream.initial_carry(batch), ours.initial_carry(batch)
    halted_early = False
    with torch.inference_mode():
        for _ in range(3 * config.halt_max_steps):
            carry_u, _, metrics_u, out_u, done_u = upstream(
                carry=carry_u, batch=batch, return_keys=["logits"]
            )
            carry_o, _, metrics_o, out_o, done_o = ours(carry_o, batch, return_keys=("logits",))
            torch.testing.assert_close(out_o["logits"], out_u["logits"], rtol=1e-4, atol=1e-4)
            assert torch.equal(carry_o.halted, carry_u.halted) and done_o == done_u
            assert torch.equal(carry_o.steps, carry_u.steps)
            for key in ("count", "exact_accuracy", "steps"):
                torch.testing.assert_close(metrics_o[key].double(), metrics_u[key].double())
            halted_early |= bool((carry_o.halted & (carry_o.steps < config.halt_max_steps)).any())
            if done_o:
                break
    assert halted_early, "the test's Q head never halted a slot before halt_max_steps"
