"""torch.compile of the loss head (slow on CPU) and CUDA-only checks (bf16 SDPA path)."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import make_batch, small_config
from trm.model import ACTLossHead, HaltExploration, TinyRecursiveModel

NO_EXPLORE = HaltExploration(explore=torch.zeros(3, dtype=torch.bool), min_steps=torch.full((3,), 2))


def _two_steps(head: ACTLossHead, run, batch) -> list[torch.Tensor]:
    carry = head.initial_carry(batch)
    losses = []
    for _ in range(2):
        carry, loss, *_ = run(carry, batch, exploration=NO_EXPLORE)
        loss.backward()
        losses.append(loss.detach())
    table = head.model.puzzle_emb
    assert int(table.cursor) == 6  # two forwards of 3 rows handed out (3 slots: the second wrapped round)
    return losses + [p.grad.clone() for p in head.parameters()] + [table.local_grads().clone()]


@pytest.mark.slow
def test_compiled_loss_head_matches_eager():
    torch.manual_seed(0)
    head = ACTLossHead(TinyRecursiveModel(small_config()))
    batch = make_batch(head.model.config)
    eager = _two_steps(head, head, batch)
    head.zero_grad()
    head.model.puzzle_emb.clear_local()
    compiled = _two_steps(head, torch.compile(head), batch)
    for a, b in zip(eager, compiled, strict=True):  # the last: the puzzle rows' gradient
        torch.testing.assert_close(a.double(), b.double(), rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
def test_bf16_forward_on_cuda_tracks_fp32():
    torch.manual_seed(0)
    fp32 = TinyRecursiveModel(small_config(forward_dtype="float32", hidden_size=64, num_heads=4)).cuda()
    bf16 = TinyRecursiveModel(small_config(forward_dtype="bfloat16", hidden_size=64, num_heads=4)).cuda()
    bf16.load_state_dict(fp32.state_dict())
    batch = {k: v.cuda() for k, v in make_batch(fp32.config).items()}
    outputs = []
    for model in (fp32, bf16):
        model.eval()
        with torch.no_grad():
            _, out = model(model.initial_carry(batch), batch)
        outputs.append(out)
    assert outputs[1]["logits"].dtype == torch.bfloat16 and outputs[1]["q_halt_logits"].dtype == torch.float32
    torch.testing.assert_close(outputs[1]["logits"].float(), outputs[0]["logits"], rtol=0.1, atol=0.15)


@pytest.mark.gpu
def test_bf16_training_step_on_cuda():
    torch.manual_seed(0)
    head = ACTLossHead(TinyRecursiveModel(small_config(forward_dtype="bfloat16"))).cuda()
    batch = {k: v.cuda() for k, v in make_batch(head.model.config).items()}
    _, loss, metrics, _, _ = head(head.initial_carry(batch), batch)
    loss.backward()
    assert torch.isfinite(loss) and metrics["count"].device.type == "cuda"
    assert all(torch.isfinite(p.grad).all() for p in head.parameters())


@pytest.mark.gpu
def test_compiled_bf16_loss_head_on_cuda_matches_eager():
    """torch.compile on CUDA: Inductor generates and builds Triton kernels (needs the C compiler at run
    time) and the compiled bf16 step tracks eager."""
    import torch._dynamo

    torch.manual_seed(0)
    torch._dynamo.reset()
    head = ACTLossHead(TinyRecursiveModel(small_config(forward_dtype="bfloat16"))).cuda()
    batch = {k: v.cuda() for k, v in make_batch(head.model.config).items()}
    explore = HaltExploration(NO_EXPLORE.explore.cuda(), NO_EXPLORE.min_steps.cuda())

    def two_steps(run):
        carry = head.initial_carry(batch)
        out = []
        for _ in range(2):
            carry, loss, *_ = run(carry, batch, exploration=explore)
            loss.backward()
            out.append(loss.detach().float())
        grads = [p.grad.detach().float().clone() for p in head.parameters()]
        head.zero_grad(set_to_none=True)
        head.model.puzzle_emb.clear_local()
        return out + grads

    eager = two_steps(head)
    compiled_head = torch.compile(head)
    compiled = two_steps(compiled_head)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1  # something was really compiled
    for a, b in zip(eager, compiled, strict=True):
        torch.testing.assert_close(b, a, rtol=5e-2, atol=5e-2)
