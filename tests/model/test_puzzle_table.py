"""The puzzle-embedding table inside torch.compile: a training forward and backward is one graph, and the
numbers are those of the table as it was before, which handed out a fresh leaf tensor per forward from a
`torch.compiler.disable`d region (a graph break): outputs, gradients and the table's SignSGD update, over
several optimizer steps of two accumulated micro-batches each, eager and traced.

Traced runs use dynamo with AOTAutograd's eager backend (`aot_eager`): the backward is traced too, and no
code is generated, so the numbers are eager's operator for operator and compared bit for bit. Inductor's
fused kernels change rounding the same way with or without this table; their parity with upstream is the
GPU check's business (tests/model/test_compile_gpu.py).
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch import nn
from torch._dynamo.testing import CompileCounterWithBackend
from torch._dynamo.utils import counters

from tests.helpers import make_batch, sign_sgd_reference, small_config
from trm.model import ACTLossHead, HaltExploration, TinyRecursiveModel
from trm.optim import SparseEmbeddingSignSGD

MICRO, ACCUM, STEPS = 3, 2, 2
LR, WD = 0.01, 0.1


class LeafPerForward(nn.Module):
    """The table's training path before this design, as the reference: a fresh leaf per forward, kept in a
    list, outside the compiled graph; its update is SignSGD over the concatenated rows."""

    def __init__(self, weight: torch.Tensor, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype
        self.register_buffer("weight", weight.clone())
        self.handed: list[tuple[torch.Tensor, torch.Tensor]] = []

    @torch.compiler.disable
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if not (self.training and torch.is_grad_enabled()):
            return self.weight[ids].to(self.dtype)
        leaf = self.weight[ids].detach().requires_grad_(True)
        self.handed.append((ids.long(), leaf))
        return leaf.to(self.dtype)

    @torch.no_grad()
    def step(self) -> None:
        ids = torch.cat([i for i, _ in self.handed])
        grads = torch.cat([torch.zeros_like(w) if w.grad is None else w.grad for _, w in self.handed])
        self.weight.copy_(sign_sgd_reference(self.weight, ids, grads, LR, WD))
        self.handed.clear()


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def _config():
    return small_config(batch_size=MICRO, num_puzzle_identifiers=5, halt_exploration_prob=0.0)


def _head() -> ACTLossHead:
    torch.manual_seed(0)
    head = ACTLossHead(TinyRecursiveModel(_config())).train()
    with torch.no_grad():
        head.model.puzzle_emb.weight.normal_(generator=torch.Generator().manual_seed(1))
    return head


def _micro_batches(step: int) -> list[dict[str, torch.Tensor]]:
    """ACCUM micro-batches of MICRO rows; 5 identifiers over 6 rows, so ids repeat within and across them."""
    config = small_config(batch_size=MICRO * ACCUM, num_puzzle_identifiers=5)
    batch = make_batch(config, seed=step)
    return [{k: v[k0 * MICRO : (k0 + 1) * MICRO] for k, v in batch.items()} for k0 in range(ACCUM)]


EXPLORE = HaltExploration(torch.zeros(MICRO, dtype=torch.bool), torch.full((MICRO,), 2, dtype=torch.int32))


def _train(head: ACTLossHead, step_fn, table_step) -> list[list[torch.Tensor]]:
    """STEPS optimizer steps of ACCUM micro-batches (the trainer's loop, with plain SGD on the parameters so
    that later steps start from changed weights): per step the logits, parameter gradients and table."""
    params = torch.optim.SGD(head.parameters(), lr=0.1)
    carries = [head.initial_carry(m) for m in _micro_batches(0)]
    record = []
    for step in range(STEPS):
        seen = []
        for k, micro in enumerate(_micro_batches(step)):
            carries[k], loss, _, outputs, _ = step_fn(
                carries[k], micro, return_keys=("logits",), exploration=EXPLORE
            )
            loss.backward()
            seen.append(outputs["logits"].detach())
        seen += [p.grad.clone() for p in head.parameters()]
        params.step()
        params.zero_grad()
        table_step()
        seen.append(head.model.puzzle_emb.weight.clone())
        record.append(seen)
    return record


def _new_design(compiled: bool) -> tuple[list[list[torch.Tensor]], CompileCounterWithBackend]:
    head = _head()
    table = SparseEmbeddingSignSGD(head.model.puzzle_emb, lr=LR, weight_decay=WD, rows_per_rank=MICRO * ACCUM)
    counter = CompileCounterWithBackend("aot_eager")
    step_fn = torch.compile(head, backend=counter) if compiled else head
    return _train(head, step_fn, table.step), counter


def _reference(compiled: bool) -> list[list[torch.Tensor]]:
    head = _head()
    old = head.model.inner.puzzle_emb
    head.model.inner.puzzle_emb = LeafPerForward(old.weight, old.dtype)
    step_fn = torch.compile(head, backend="aot_eager") if compiled else head
    return _train(head, step_fn, head.model.inner.puzzle_emb.step)


def _assert_same_bits(got: list[list[torch.Tensor]], want: list[list[torch.Tensor]]) -> None:
    for step, (g, w) in enumerate(zip(got, want, strict=True)):
        for i, (a, b) in enumerate(zip(g, w, strict=True)):
            assert torch.equal(a, b), f"step {step}, tensor {i}: max |Δ| {(a - b).abs().max().item():.3g}"


def test_eager_training_matches_the_leaf_per_forward_table_bit_for_bit():
    got, _ = _new_design(compiled=False)
    _assert_same_bits(got, _reference(compiled=False))
    assert not torch.equal(got[-1][-1], _head().model.puzzle_emb.weight)  # the table did train


@pytest.mark.e2e  # tens of seconds of tracing on a CPU: out of the default suite, run by make test-e2e
@pytest.mark.torch_compile
def test_compiled_training_step_is_one_graph_with_the_same_bits():
    """One graph for every forward and backward of every step (no graph break, no recompile); fails on the
    table whose forward was `torch.compiler.disable`d (a break before and after it: 2+ graphs)."""
    got, counter = _new_design(compiled=True)
    assert dict(counters["graph_break"]) == {}
    assert counter.frame_count == 1
    _assert_same_bits(got, _reference(compiled=True))


def test_checkpoints_hold_the_table_only_and_old_ones_load():
    """A model saved with the leaf-per-forward table (whose state is `weight` alone) loads strictly into
    today's model, rows handed out or not; today's state dict has the same keys (no slot buffers)."""
    old = _head()
    table = old.model.inner.puzzle_emb
    old.model.inner.puzzle_emb = LeafPerForward(table.weight.neg(), table.dtype)
    saved = old.model.state_dict()
    new = _head()
    micro = _micro_batches(0)[0]
    _, loss, *_ = new(new.initial_carry(micro), micro, exploration=EXPLORE)
    loss.backward()  # the slots now hold rows and gradients
    assert list(new.model.state_dict()) == list(saved)
    new.model.load_state_dict(saved, strict=True)
    assert torch.equal(new.model.puzzle_emb.weight, saved["inner.puzzle_emb.weight"])
