"""Sparse puzzle-embedding SignSGD (single process and two gloo ranks), LR schedule and EMA."""

from __future__ import annotations

import math
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.helpers import HostSyncCounter, sign_sgd_reference
from trm.errors import TRMError
from trm.model.sparse_embedding import SparsePuzzleEmbedding
from trm.optim import EMA, SparseEmbeddingSignSGD, lr_at_step

LR, WD = 0.01, 0.1
# Two ranks, each with a batch of 4; id 3 appears on both ranks, id 1 twice on rank 0.
IDS = [torch.tensor([1, 3, 1, 0]), torch.tensor([3, 5, 2, 6])]


def table_and_grads(seed: int = 0) -> tuple[torch.Tensor, list[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    table = torch.randn(8, 6, generator=g)
    grads = [torch.randn(4, 6, generator=g) for _ in IDS]
    grads[0][0, 0] = -grads[0][2, 0]  # the two id-1 rows cancel in column 0: sign(0) = 0
    return table, grads


def backprop(module: SparsePuzzleEmbedding, ids: torch.Tensor, grad: torch.Tensor) -> None:
    module.train()
    out = module(ids)
    (out * grad).sum().backward()


def run_single(micro_batches: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    table, _ = table_and_grads()
    module = SparsePuzzleEmbedding(8, 6, torch.float32, rows=sum(ids.shape[0] for ids, _ in micro_batches))
    module.weight.copy_(table)
    opt = SparseEmbeddingSignSGD(module, lr=LR, weight_decay=WD)
    for ids, grad in micro_batches:
        backprop(module, ids, grad)
    opt.step()
    assert int(module.cursor) == 0 and module.grad_rows.grad is None  # the slots are empty again
    return module.weight.clone()


def expected_table() -> torch.Tensor:
    table, grads = table_and_grads()
    summed = torch.zeros_like(table)
    for ids, grad in zip(IDS, grads, strict=True):
        summed.index_add_(0, ids, grad)
    touched = torch.zeros(8, dtype=torch.bool)
    touched[torch.cat(IDS)] = True
    want = table.clone()
    want[touched] = table[touched] * (1 - LR * WD) - LR * torch.sign(summed[touched])
    return want


def test_single_process_sums_duplicates_before_sign():
    _, grads = table_and_grads()
    got = run_single([(torch.cat(IDS), torch.cat(grads))])
    want = expected_table()
    torch.testing.assert_close(got, want)
    table, _ = table_and_grads()
    assert torch.equal(got[4], table[4]) and torch.equal(got[7], table[7])  # untouched rows unchanged
    torch.testing.assert_close(got[1, 0], table[1, 0] * (1 - LR * WD))  # cancelled gradient: decay only


def test_gradient_accumulation_over_micro_batches():
    _, grads = table_and_grads()
    got = run_single([(IDS[0], grads[0]), (IDS[1], grads[1])])
    torch.testing.assert_close(got, expected_table())


def unique_based_update(table: torch.Tensor, ids: torch.Tensor, grads: torch.Tensor) -> torch.Tensor:
    return sign_sgd_reference(table, ids, grads, LR, WD)


@pytest.mark.parametrize("seed", range(4))
def test_the_sort_based_update_is_bit_identical_to_unique_and_never_reads_the_device(seed):
    """Many duplicates in random order, over three accumulated micro-batches: the same bits as the `unique`
    version, and no operator whose output the host must wait for (`unique`, `.item()`, masks)."""
    g = torch.Generator().manual_seed(seed)
    table = torch.randn(40, 6, generator=g)
    micro = [(torch.randint(0, 12, (16,), generator=g), torch.randn(16, 6, generator=g)) for _ in range(3)]
    module = SparsePuzzleEmbedding(40, 6, torch.float32, rows=48)
    module.weight.copy_(table)
    opt = SparseEmbeddingSignSGD(module, lr=LR, weight_decay=WD)
    for ids, grad in micro:
        backprop(module, ids, grad)
    with HostSyncCounter() as syncs:
        opt.step()
    assert dict(syncs.counts) == {}
    want = unique_based_update(table, torch.cat([i for i, _ in micro]), torch.cat([g_ for _, g_ in micro]))
    assert torch.equal(module.weight, want)


def test_zero_grad_forgets_rows_and_eval_mode_records_nothing():
    table, _ = table_and_grads()
    module = SparsePuzzleEmbedding(8, 6, torch.float32, rows=4)
    module.weight.copy_(table)
    opt = SparseEmbeddingSignSGD(module, lr=LR, weight_decay=WD)
    backprop(module, IDS[0], torch.ones(4, 6))
    opt.zero_grad()
    with HostSyncCounter() as syncs:
        opt.step()  # nothing handed out: not even weight decay touches a row
    assert dict(syncs.counts) == {}
    assert torch.equal(module.weight, table)
    module.eval()
    module(IDS[0])
    with torch.no_grad():
        module.train()
        module(IDS[0])
    assert int(module.cursor) == 0
    assert module.local_ids().tolist() == [8] * 4  # every slot empty (past the table's end)


def test_fewer_rows_than_slots_update_only_the_rows_handed_out():
    """A step that hands out 5 of 8 slots (a short last micro-batch, or a rank with fewer rows): the same
    bits as the update over those 5 rows alone, and still no host synchronisation. Fails on a step that
    treats the empty slots' stale ids as touched."""
    table, grads = table_and_grads()
    module = SparsePuzzleEmbedding(8, 6, torch.float32, rows=8)
    module.weight.copy_(table)
    opt = SparseEmbeddingSignSGD(module, lr=LR, weight_decay=WD, rows_per_rank=8)
    backprop(module, torch.tensor([7, 4, 7, 4, 7, 4, 7, 4]), torch.ones(8, 6))
    opt.zero_grad()  # the slots now hold stale ids 7 and 4
    backprop(module, IDS[0], grads[0])
    backprop(module, IDS[1][:1], grads[1][:1])
    with HostSyncCounter() as syncs:
        opt.step()
    assert dict(syncs.counts) == {}
    ids, rows = torch.cat([IDS[0], IDS[1][:1]]), torch.cat([grads[0], grads[1][:1]])
    assert torch.equal(module.weight, unique_based_update(table, ids, rows))
    assert torch.equal(module.weight[[4, 7]], table[[4, 7]])


def test_more_rows_than_slots_wrap_and_the_step_refuses_them():
    """Handing out more rows than the slots hold before a step wraps round to slot 0 (gradients add up per
    slot, as upstream's fixed buffer does); the optimizer's step refuses to apply that."""
    module = SparsePuzzleEmbedding(8, 6, torch.float32, rows=4)
    opt = SparseEmbeddingSignSGD(module, lr=LR, weight_decay=WD)
    backprop(module, IDS[0], torch.ones(4, 6))
    backprop(module, IDS[1][:2], torch.full((2, 6), 2.0))
    assert module.local_ids().tolist() == [3, 5, 1, 0]
    assert module.local_grads()[:, 0].tolist() == [3.0, 3.0, 1.0, 1.0]
    with pytest.raises(RuntimeError, match="more gradient rows than its 4 slots"):
        opt.step()
    with pytest.raises(TRMError, match="training forward of 5 puzzle ids exceeds the embedding's 4"):
        module(torch.arange(5))


def test_a_moved_table_hands_out_leaf_rows_again():
    """`.to()` (device or dtype) recreates the slots as a leaf beside the table, so gradients still reach
    the optimizer; a moved copy of the old leaf would be a non-leaf tensor whose `.grad` stays None."""
    module = SparsePuzzleEmbedding(8, 6, torch.float32, rows=4).to(torch.float64)
    assert module.grad_rows.is_leaf and module.grad_rows.requires_grad
    assert module.grad_rows.dtype == module.weight.dtype == torch.float64
    backprop(module, IDS[0], torch.ones(4, 6, dtype=torch.float64))
    assert module.local_grads().abs().sum() == 24.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world: int, port: int, out_path: str, equal_rows: bool) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        table, grads = table_and_grads()
        module = SparsePuzzleEmbedding(8, 6, torch.float32, rows=4)
        module.weight.copy_(table)
        opt = SparseEmbeddingSignSGD(module, lr=LR, weight_decay=WD, rows_per_rank=4 if equal_rows else None)
        if rank == 0 and not equal_rows:  # rank 0 one micro-batch of 4, rank 1 two of 2 (different counts)
            backprop(module, IDS[0], grads[0])
        elif rank == 0:  # with equal rows: rank 0 hands out 4 rows, the last 3 of them only in step 2
            backprop(module, IDS[0][:1], grads[0][:1])
            backprop(module, IDS[0][1:], grads[0][1:])
        else:
            backprop(module, IDS[1][:2], grads[1][:2])
            backprop(module, IDS[1][2:], grads[1][2:])
        opt.step()
        torch.save(module.weight, f"{out_path}.{rank}")
        if (
            equal_rows
        ):  # a step handing out fewer rows than the slots (3 of 4 on each rank) updates just those
            backprop(module, IDS[rank][:3], grads[rank][:3])
            opt.step()
            torch.save(module.weight, f"{out_path}.{rank}.short")
        # Both ranks past their last exchange before either tears gloo down: a rank that destroys the group
        # while its peer still reads from it can make the peer abort (seen once under torch 2.10: SIGABRT,
        # "terminate called without an active exception").
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.dist
@pytest.mark.e2e
@pytest.mark.parametrize("equal_rows", [False, True], ids=["counts-exchanged", "equal-rows"])
def test_two_gloo_ranks_equal_single_process(tmp_path, equal_rows):
    out = str(tmp_path / "table")
    mp.spawn(_rank_main, args=(2, _free_port(), out, equal_rows), nprocs=2, join=True)
    want = expected_table()
    for rank in range(2):
        torch.testing.assert_close(torch.load(f"{out}.{rank}"), want)
    if equal_rows:
        _, grads = table_and_grads()
        ids = torch.cat([IDS[0][:3], IDS[1][:3]])
        short = unique_based_update(want, ids, torch.cat([grads[0][:3], grads[1][:3]]))
        for rank in range(2):
            torch.testing.assert_close(torch.load(f"{out}.{rank}.short"), short)


def test_invalid_sign_sgd_settings():
    with pytest.raises(TRMError, match="puzzle_emb_lr"):
        SparseEmbeddingSignSGD(SparsePuzzleEmbedding(2, 2, torch.float32, rows=1), lr=-1.0, weight_decay=0.0)


def test_lr_schedule_warmup_then_cosine():
    kw = dict(base_lr=1e-3, warmup_steps=10, total_steps=110)
    assert lr_at_step(0, min_ratio=1.0, **kw) == 0.0
    assert lr_at_step(1, min_ratio=1.0, **kw) == pytest.approx(1e-4)
    assert lr_at_step(10, min_ratio=1.0, **kw) == pytest.approx(1e-3)
    assert lr_at_step(500, min_ratio=1.0, **kw) == pytest.approx(1e-3)  # upstream default: constant
    assert lr_at_step(60, min_ratio=0.1, **kw) == pytest.approx(1e-3 * (0.1 + 0.9 * 0.5))
    assert lr_at_step(110, min_ratio=0.1, **kw) == pytest.approx(1e-4)
    assert lr_at_step(35, min_ratio=0.0, **kw) == pytest.approx(1e-3 * 0.5 * (1 + math.cos(math.pi / 4)))


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
        self.frozen = torch.nn.Parameter(torch.ones(1), requires_grad=False)
        self.register_buffer("table", torch.zeros(3))


def test_ema_tracks_parameters_only():
    model = Tiny()
    ema = EMA(model, rate=0.9)
    assert set(ema.shadow) == {"lin.weight", "lin.bias"}
    start = model.lin.weight.detach().clone()
    with torch.no_grad():
        model.lin.weight.add_(1.0)
        model.table.add_(5.0)
    ema.update(model)
    torch.testing.assert_close(ema.shadow["lin.weight"], 0.1 * (start + 1.0) + 0.9 * start)
    other = Tiny()
    ema.copy_to(other)
    torch.testing.assert_close(other.lin.weight.detach(), ema.shadow["lin.weight"])
    assert torch.count_nonzero(other.table) == 0


def test_ema_state_dict_round_trip_and_compiled_names():
    model = Tiny()
    ema = EMA(model, rate=0.99)
    with torch.no_grad():
        model.lin.bias.fill_(3.0)
    ema.update(model)
    wrapped = torch.nn.Module()
    wrapped._orig_mod = Tiny()  # the attribute torch.compile uses; names must still match
    restored = EMA(wrapped, rate=0.5)
    restored.load_state_dict(ema.state_dict())
    assert restored.rate == 0.99
    torch.testing.assert_close(restored.shadow["lin.bias"], ema.shadow["lin.bias"])
    with pytest.raises(TRMError, match="EMA"):
        EMA(torch.nn.Linear(3, 3)).load_state_dict(ema.state_dict())
