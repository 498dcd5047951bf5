"""torch.compile's modes (`compile_mode=`) compute the same training step: a mode chooses kernels (autotuned
matmuls with fused epilogues), not the math, so loss and gradients agree to float32 rounding."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from trm.compile_setting import torch_compile_mode
from trm.model import ACTLossHead, TinyRecursiveModel
from trm.training.recipes import get_recipe


def compiled_step(mode: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Loss and gradients of one compiled training step of a small TRM in `mode`, from seed 0."""
    torch._dynamo.reset()
    recipe = get_recipe("bench-tiny")
    config = recipe.model_config(batch_size=4, seq_len=64, vocab_size=12, num_puzzle_identifiers=1)
    config = dataclasses.replace(config, hidden_size=32, num_heads=2)
    torch.manual_seed(0)
    head = ACTLossHead(TinyRecursiveModel(config))
    head.train()
    g = torch.Generator().manual_seed(0)
    batch = {
        "inputs": torch.randint(0, 12, (4, 64), generator=g, dtype=torch.int32),
        "labels": torch.randint(0, 12, (4, 64), generator=g, dtype=torch.int32),
        "puzzle_identifiers": torch.zeros(4, dtype=torch.int32),
    }
    step = torch.compile(head, mode=torch_compile_mode(mode))
    _, loss, *_ = step(head.initial_carry(batch), batch)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in head.parameters() if p.grad is not None]


@pytest.mark.slow  # two Inductor compiles on CPU, one of them autotuning: about a minute
def test_max_autotune_computes_the_default_modes_step():
    loss, grads = compiled_step("default")
    tuned_loss, tuned_grads = compiled_step("max-autotune-no-cudagraphs")
    # measured on a 2-core CPU: the loss bit-identical, the largest gradient difference 1.5e-8
    torch.testing.assert_close(tuned_loss, loss, rtol=1e-6, atol=1e-6)
    assert len(tuned_grads) == len(grads) > 0
    for tuned, plain in zip(tuned_grads, grads, strict=True):
        torch.testing.assert_close(tuned, plain, rtol=1e-5, atol=1e-6)
