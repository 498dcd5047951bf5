"""torch.compile of the training and evaluation step: one graph each, no graph break, no recompile per
evaluation chunk size, and a compiled evaluation that gives eager's metrics and predictions.

The structural tests trace with dynamo's counting backend (no code generation: fast on CPU); the one
that generates code with Inductor is marked slow.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounter
from torch._dynamo.utils import counters

from tests.helpers import FakeLoader, FakeMetadata, small_config
from trm.distributed import DistInfo
from trm.evaluation.runner import evaluate, is_compiled, pad_rows
from trm.model import ACTLossHead, HaltExploration, TinyRecursiveModel

CHUNK = 4
ROWS = 10  # per test batch: chunks of 4, 4 and 2 rows


def tiny_head(**overrides) -> ACTLossHead:
    """The bench-tiny shape at test size (no puzzle embedding unless `overrides` give it one)."""
    torch.manual_seed(0)
    shape = dict(
        batch_size=CHUNK, seq_len=16, vocab_size=12, num_puzzle_identifiers=9, puzzle_emb_ndim=0,
        puzzle_emb_len=0,
    )  # fmt: skip
    return ACTLossHead(TinyRecursiveModel(small_config(**{**shape, **overrides})))


def run_eval(head: torch.nn.Module, out: Path) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    loader = FakeLoader("test", global_batch_size=ROWS, metadata=FakeMetadata())
    metrics = evaluate(
        head, loader, [], DistInfo(), chunk_size=CHUNK, save_dir=out, step=1,
        save_outputs=("preds", "q_halt_logits"), show_progress=False,
    )  # fmt: skip
    return metrics, torch.load(out / "step_1_all_preds.0")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("puzzle_emb_ndim", [0, 16], ids=["no-table", "puzzle-table"])
def test_training_step_is_one_graph_without_breaks(puzzle_emb_ndim):
    """Fails on the code that returned `all_halted` from a torch.compiler.disable'd host sync, and (with a
    puzzle table) on the table whose training forward was torch.compiler.disable'd (trm.model.sparse_embedding)."""
    head = tiny_head(puzzle_emb_ndim=puzzle_emb_ndim, puzzle_emb_len=1 if puzzle_emb_ndim else 0).train()
    batch = {
        k: v[:CHUNK] for k, v in FakeLoader("train", global_batch_size=CHUNK)._global_batch(0, 0).items()
    }
    explore = HaltExploration(
        torch.zeros(CHUNK, dtype=torch.bool), torch.full((CHUNK,), 2, dtype=torch.int32)
    )
    counter = CompileCounter()
    torch.compile(head, backend=counter)(head.initial_carry(batch), batch, exploration=explore)
    assert dict(counters["graph_break"]) == {}
    assert counter.frame_count == 1


@pytest.mark.e2e  # tens of seconds: out of the default suite, run by make test-e2e
@pytest.mark.torch_compile
@pytest.mark.parametrize("overrides", [{}, {"eval_early_halt": True}], ids=["all-steps", "early-halt"])
def test_compiled_evaluation_is_one_graph_and_matches_eager(tmp_path, overrides):
    """Every chunk (4, 4, 2 rows) runs the same graph; metrics and predictions are eager's. Fails on the
    old runner (a graph break per step, and a recompile for the 2-row chunk)."""
    head = tiny_head(**overrides)
    eager_metrics, eager_saved = run_eval(head, tmp_path / "eager")
    counter = CompileCounter()
    compiled = torch.compile(head, backend=counter)
    assert is_compiled(compiled) and not is_compiled(head)
    compiled_metrics, compiled_saved = run_eval(compiled, tmp_path / "compiled")
    assert counter.frame_count == 1  # one graph for every chunk size
    assert dict(counters["graph_break"]) == {}
    assert compiled_metrics.keys() == eager_metrics.keys() and eager_metrics["eval/all/count"] > 0
    for key, value in eager_metrics.items():
        assert compiled_metrics[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    assert torch.equal(compiled_saved["preds"], eager_saved["preds"])
    assert compiled_saved["preds"].shape[0] == 2 * ROWS  # the padding rows never reach the outputs
    torch.testing.assert_close(compiled_saved["q_halt_logits"], eager_saved["q_halt_logits"])


def test_masked_rows_leave_every_metric_and_the_halting_test():
    """The padded batch with its mask reports what the unpadded batch does; `all_halted` ignores masked
    rows."""
    head = tiny_head(eval_early_halt=True).eval()
    with torch.no_grad():  # a Q head that halts some rows at the first step and not others
        head.model.inner.q_head.weight.normal_(0.0, 1.0, generator=torch.Generator().manual_seed(3))
        head.model.inner.q_head.bias.zero_()
    batch = {k: v[:3] for k, v in FakeLoader("test", global_batch_size=CHUNK)._global_batch(0, 0).items()}
    padded, mask = pad_rows(batch, CHUNK)
    assert mask.tolist() == [True, True, True, False]
    assert all(torch.equal(padded[k][3], batch[k][0]) for k in batch)
    with torch.no_grad():
        carry, loss, plain, _, plain_halted = head(head.initial_carry(batch), batch)
        _, masked_loss, masked, _, masked_halted = head(head.initial_carry(padded), padded, row_mask=mask)
        only_halted = torch.cat((carry.halted, torch.tensor([False])))
        *_, halted_rows_halted = head(head.initial_carry(padded), padded, row_mask=only_halted)
    assert plain.keys() == masked.keys()
    for key, value in plain.items():
        torch.testing.assert_close(masked[key], value, msg=key)
    torch.testing.assert_close(masked_loss, loss)
    assert 0 < int(carry.halted.sum()) < 3 and not bool(plain_halted) and not bool(masked_halted)
    assert bool(halted_rows_halted)


@pytest.mark.slow
def test_inductor_compiled_evaluation_matches_eager(tmp_path):
    """The real backend (Inductor's generated CPU code): same predictions, metrics to float tolerance."""
    head = tiny_head()
    eager_metrics, eager_saved = run_eval(head, tmp_path / "eager")
    compiled_metrics, compiled_saved = run_eval(torch.compile(head), tmp_path / "compiled")
    assert torch.equal(compiled_saved["preds"], eager_saved["preds"])
    for key, value in eager_metrics.items():
        assert compiled_metrics[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key


@pytest.mark.e2e  # tens of seconds: out of the default suite, run by make test-e2e
@pytest.mark.torch_compile
def test_the_trainer_evaluates_with_its_compiled_step(tmp_path, monkeypatch):
    """compile=true: evaluation gets the compiled module (the old loop handed it the eager loss head).
    Dynamo's eager backend keeps it fast; the metrics' equality is test_compiled_evaluation_*'s."""
    import functools

    from tests.training.test_trainer_inprocess import metric_rows, run
    from trm.evaluation import runner

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    given: list[bool] = []
    original = runner.evaluate

    def spy(loss_head, *args, **kwargs):
        given.append(is_compiled(loss_head))
        return original(loss_head, *args, **kwargs)

    monkeypatch.setattr(runner, "evaluate", spy)
    code, _ = run(tmp_path, "compile=true")
    assert code == 0
    assert given == [True, True]  # both evaluations of the run
    evaluated = [r for r in metric_rows(tmp_path) if "eval/all/count" in r]
    assert len(evaluated) == 2 and all(r["eval/all/count"] > 0 for r in evaluated)
