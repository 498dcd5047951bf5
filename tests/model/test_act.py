"""ACT wrapper and loss head: carry semantics, halting, exploration, eval steps, losses and metrics."""

from __future__ import annotations

import math

import pytest
import torch

from tests.helpers import make_batch, small_config
from trm.errors import TRMError
from trm.model import ACTLossHead, HaltExploration, TinyRecursiveModel
from trm.model.losses import softmax_cross_entropy, stablemax_cross_entropy

NO_EXPLORE = HaltExploration(explore=torch.zeros(3, dtype=torch.bool), min_steps=torch.full((3,), 2))


def set_q_bias(model: TinyRecursiveModel, halt: float, cont: float = 0.0) -> None:
    with torch.no_grad():
        model.inner.q_head.bias.copy_(torch.tensor([halt, cont]))


def evaluate_until_halted(head: ACTLossHead, batch: dict) -> tuple[int, dict]:
    """The evaluation loop: ACT steps on one batch until every slot halted; (steps taken, last metrics)."""
    carry, calls = head.initial_carry(batch), 0
    with torch.inference_mode():
        while True:
            carry, _, metrics, _, all_halted = head(carry, batch)
            calls += 1
            if all_halted:
                return calls, metrics


def test_halted_slots_take_new_sample_others_keep_theirs():
    torch.manual_seed(0)
    config = small_config()
    model = TinyRecursiveModel(config)
    batch_a, batch_b = make_batch(config, seed=1), make_batch(config, seed=2)

    carry, _ = model(model.initial_carry(batch_a), batch_a, exploration=NO_EXPLORE)
    assert torch.equal(carry.current_data["inputs"], batch_a["inputs"])
    carry.halted = torch.tensor([True, False, True])
    after, out = model(carry, batch_b, exploration=NO_EXPLORE)

    mix = torch.tensor([True, False, True])
    for key in ("inputs", "labels", "puzzle_identifiers"):
        want = torch.where(mix.view((-1,) + (1,) * (batch_a[key].ndim - 1)), batch_b[key], batch_a[key])
        assert torch.equal(after.current_data[key], want)
    assert after.steps.tolist() == [1, 2, 1]

    # The restarted slots compute exactly what a fresh carry on batch B computes ...
    _, fresh = model(model.initial_carry(batch_b), batch_b, exploration=NO_EXPLORE)
    torch.testing.assert_close(out["logits"][mix], fresh["logits"][mix])
    # ... and the kept slot continues its own latents: two steps on batch A.
    carry2, _ = model(model.initial_carry(batch_a), batch_a, exploration=NO_EXPLORE)
    _, second = model(carry2, batch_a, exploration=NO_EXPLORE)
    torch.testing.assert_close(out["logits"][1], second["logits"][1])
    assert not torch.allclose(out["logits"][1], fresh["logits"][1])


def test_training_halts_on_q_halt_with_exploration_minimum():
    model = TinyRecursiveModel(small_config(halt_max_steps=6))
    set_q_bias(model, halt=5.0)  # q_halt > 0 everywhere
    batch = make_batch(model.config)
    exploration = HaltExploration(
        explore=torch.tensor([True, False, True]), min_steps=torch.tensor([3, 5, 4])
    )
    carry = model.initial_carry(batch)
    halted_at = {}
    for step in range(1, 7):
        carry, _ = model(carry, batch, exploration=exploration)
        for slot in range(3):
            if carry.halted[slot] and slot not in halted_at:
                halted_at[slot] = step
        if step == 1:
            assert carry.halted.tolist() == [False, True, False]
            exploration = HaltExploration(exploration.explore, exploration.min_steps)
    assert halted_at[0] == 3 and halted_at[1] == 1 and halted_at[2] == 4


def test_training_without_q_signal_halts_at_max_steps():
    model = TinyRecursiveModel(small_config(halt_max_steps=3))
    batch = make_batch(model.config)
    carry = model.initial_carry(batch)
    flags = []
    for _ in range(4):
        carry, _ = model(carry, batch)  # random exploration never forces a halt
        flags.append(carry.halted.all().item())
    assert flags == [False, False, True, False]


@pytest.mark.parametrize("halt_bias", [-5.0, 5.0])
def test_eval_runs_exactly_halt_max_steps(halt_bias):
    torch.manual_seed(0)
    head = ACTLossHead(TinyRecursiveModel(small_config(halt_max_steps=16))).eval()
    set_q_bias(head.model, halt=halt_bias)
    batch = make_batch(head.model.config)
    calls, metrics = evaluate_until_halted(head, batch)
    assert calls == 16
    assert metrics["count"].item() == 3 and metrics["steps"].item() == 48


def test_eval_early_halt_stops_on_q_halt():
    head = ACTLossHead(TinyRecursiveModel(small_config(halt_max_steps=16, eval_early_halt=True))).eval()
    set_q_bias(head.model, halt=5.0)
    batch = make_batch(head.model.config)
    with torch.no_grad():
        _carry, _, metrics, _, all_halted = head(head.initial_carry(batch), batch)
    assert all_halted and metrics["steps"].item() == 3


def test_eval_early_halt_freezes_finished_slots():
    torch.manual_seed(0)
    model = TinyRecursiveModel(small_config(eval_early_halt=True)).eval()
    batch = make_batch(model.config)
    with torch.no_grad():
        carry, _ = model(model.initial_carry(batch), batch)
        carry.halted = torch.tensor([True, False, False])
        frozen_logits = model.inner.heads(carry.inner_carry.z_H)[0][0]
        after, out = model(carry, make_batch(model.config, seed=9))
    assert torch.equal(after.inner_carry.z_H[0], carry.inner_carry.z_H[0])
    assert not torch.equal(after.inner_carry.z_H[1], carry.inner_carry.z_H[1])
    torch.testing.assert_close(out["logits"][0], frozen_logits)
    assert torch.equal(after.current_data["inputs"], batch["inputs"])  # nobody took the new batch
    assert after.steps.tolist() == [1, 2, 2] and after.halted[0]


def test_q_continue_bootstrap_target_works():
    torch.manual_seed(0)
    head = ACTLossHead(TinyRecursiveModel(small_config(no_ACT_continue=False)))
    batch = make_batch(head.model.config)
    _carry, loss, metrics, outputs, _ = head(
        head.initial_carry(batch), batch, return_keys=("target_q_continue",)
    )
    target = outputs["target_q_continue"]
    assert target.shape == (3,) and ((target > 0) & (target < 1)).all()
    assert "q_continue_loss" in metrics
    want = metrics["lm_loss"] + 0.5 * (metrics["q_halt_loss"] + metrics["q_continue_loss"])
    torch.testing.assert_close(loss.detach(), want)
    loss.backward()
    assert head.model.inner.q_head.weight.grad.abs().sum() > 0


def test_stablemax_hand_computed():
    logits = torch.tensor([[[2.0, -1.0, 0.0], [0.5, 0.5, -3.0], [1.0, 2.0, 3.0]]])
    labels = torch.tensor([[0, 2, -100]])
    # s = [3, 0.5, 1] → p0 = 3/4.5;  s = [1.5, 1.5, 0.25] → p2 = 0.25/3.25
    want = torch.tensor([[-math.log(3 / 4.5), -math.log(0.25 / 3.25), 0.0]], dtype=torch.float64)
    got = stablemax_cross_entropy(logits, labels)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    soft = softmax_cross_entropy(logits, labels)
    assert soft[0, 2] == 0 and abs(soft[0, 0].item() - (-torch.log_softmax(logits[0, 0], 0)[0]).item()) < 1e-6


def test_loss_is_per_sequence_mean_summed_and_metrics_count_halted():
    torch.manual_seed(0)
    config = small_config(halt_max_steps=1)
    head = ACTLossHead(TinyRecursiveModel(config), loss_type="softmax_cross_entropy")
    batch = make_batch(config)
    batch["labels"][2] = -100  # a sequence without valid labels: loss 0, not counted in metrics
    _carry, loss, metrics, outputs, all_halted = head(
        head.initial_carry(batch), batch, return_keys=("logits",)
    )
    logits = outputs["logits"]
    per_token = softmax_cross_entropy(logits, batch["labels"])
    valid = (batch["labels"] != -100).sum(-1).clamp_min(1)
    torch.testing.assert_close(metrics["lm_loss"], (per_token.sum(-1) / valid).sum())
    assert all_halted and metrics["count"].item() == 2 and metrics["steps"].item() == 2
    preds = logits.argmax(-1)
    token_acc = ((preds == batch["labels"]) & (batch["labels"] != -100)).sum(-1) / valid
    torch.testing.assert_close(metrics["accuracy"], token_acc[:2].sum())
    assert metrics["exact_accuracy"].item() == 0
    q_target = torch.tensor([0.0, 0.0, 1.0])  # the empty sequence counts as exactly correct
    want_q = torch.nn.functional.binary_cross_entropy_with_logits(
        torch.full((3,), -5.0), q_target, reduction="sum"
    )
    torch.testing.assert_close(metrics["q_halt_loss"], want_q)
    torch.testing.assert_close(loss.detach(), metrics["lm_loss"] + 0.5 * want_q)


def test_exact_prediction_gives_exact_accuracy():
    config = small_config(halt_max_steps=1)
    head = ACTLossHead(TinyRecursiveModel(config))
    batch = make_batch(config)
    with torch.no_grad():
        _, _, _, outputs, _ = head(head.initial_carry(batch), batch, return_keys=("preds",))
    batch["labels"] = torch.where(batch["labels"] == -100, -100, outputs["preds"].int())
    with torch.no_grad():
        _, _, metrics, _, _ = head(head.initial_carry(batch), batch)
    assert metrics["exact_accuracy"].item() == 3 and metrics["accuracy"].item() == pytest.approx(3.0)
    assert metrics["q_halt_accuracy"].item() == 0  # q_halt < 0 but the answer is right


def test_unknown_loss_type_is_a_trm_error():
    with pytest.raises(TRMError, match="loss_type"):
        ACTLossHead(TinyRecursiveModel(small_config()), loss_type="mse")


def test_halt_exploration_draw_is_seeded_and_in_range():
    config = small_config(halt_max_steps=5, halt_exploration_prob=0.5)
    first = HaltExploration.draw(1000, config, torch.Generator().manual_seed(3))
    again = HaltExploration.draw(1000, config, torch.Generator().manual_seed(3))
    assert torch.equal(first.explore, again.explore) and torch.equal(first.min_steps, again.min_steps)
    assert 350 < int(first.explore.sum()) < 650
    assert int(first.min_steps.min()) == 2 and int(first.min_steps.max()) == 5


def _baseline(**overrides):
    import dataclasses

    from trm.model.registry import get_spec

    spec = get_spec("transformers_baseline")
    values = {**dataclasses.asdict(small_config(halt_max_steps=16)), "puzzle_emb_len": 0, "H_layers": 1}
    return spec.model(spec.config(**{**values, **overrides}))


@pytest.mark.parametrize(("act_inference", "calls"), [(False, 16), (True, 1)])
def test_baseline_act_inference_halts_evaluation_on_the_q_head(act_inference, calls):
    torch.manual_seed(0)
    head = ACTLossHead(_baseline(act_inference=act_inference)).eval()
    set_q_bias(head.model, halt=5.0, cont=-5.0)  # q_halt > q_continue in every slot
    batch = make_batch(head.model.config)
    n, metrics = evaluate_until_halted(head, batch)
    assert n == calls and metrics["steps"].item() == 3 * calls


def test_baseline_act_inference_restarts_a_slot_that_halts_alone():
    """Upstream's semantics: a halted slot reloads its example on the next step (steps back to 1)."""
    torch.manual_seed(0)
    model = _baseline(act_inference=True).eval()
    set_q_bias(model, halt=-5.0, cont=5.0)  # nobody halts on the Q head...
    batch = make_batch(model.config)
    with torch.no_grad():
        carry, _ = model(model.initial_carry(batch), batch)
        carry.halted = torch.tensor([True, False, False])  # ...except slot 0, as if its q_halt won
        after, _ = model(carry, batch)
    assert after.steps.tolist() == [1, 2, 2] and not after.halted.any()


def test_baseline_act_inference_and_eval_early_halt_are_exclusive():
    with pytest.raises(TRMError, match=r"act_inference and arch\.eval_early_halt"):
        _baseline(act_inference=True, eval_early_halt=True)
