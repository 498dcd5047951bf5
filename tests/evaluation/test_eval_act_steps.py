"""Evaluation runs a fixed number of ACT steps without asking the device whether every slot halted (no host
sync per step), and reports exactly what the loop that reads the halting flag reported."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers import FakeLoader, FakeMetadata, HostSyncCounter, small_config
from trm.distributed import DistInfo
from trm.evaluation import runner
from trm.evaluation.ablation import PuzzleIdAblation
from trm.model import ACTLossHead, TinyRecursiveModel

CHUNK = 4
ROWS = 5  # per test batch: chunks of 4 and 1 rows; two batches, 4 chunks


def head(**overrides) -> ACTLossHead:
    torch.manual_seed(0)
    config = small_config(
        batch_size=CHUNK,
        seq_len=16,
        vocab_size=12,
        num_puzzle_identifiers=9,
        H_cycles=1,
        L_cycles=1,
        **overrides,
    )
    return ACTLossHead(TinyRecursiveModel(config))


def run_eval(loss_head: torch.nn.Module, out: Path) -> tuple[dict[str, float], dict[str, torch.Tensor], dict]:
    """Metrics, saved outputs and the host syncs (by operator) of one evaluation."""
    loader = FakeLoader("test", global_batch_size=ROWS, metadata=FakeMetadata())
    with HostSyncCounter() as syncs:
        metrics = runner.evaluate(
            loss_head, loader, [], DistInfo(), chunk_size=CHUNK, save_dir=out, step=1,
            save_outputs=("preds", "q_halt_logits"), show_progress=False,
        )  # fmt: skip
    return metrics, torch.load(out / "step_1_all_preds.0"), dict(syncs.counts)


@pytest.mark.parametrize("steps", [1, 3])
def test_fixed_steps_give_the_flag_reading_loops_metrics_and_outputs(tmp_path, monkeypatch, steps):
    loss_head = head(halt_max_steps=steps)
    fixed_metrics, fixed_saved, fixed_syncs = run_eval(loss_head, tmp_path / "fixed")
    monkeypatch.setattr(runner, "fixed_act_steps", lambda _head: None)  # the loop that reads the flag
    read_metrics, read_saved, read_syncs = run_eval(loss_head, tmp_path / "read")
    assert fixed_metrics == read_metrics and fixed_metrics["eval/all/count"] == 2 * ROWS
    assert fixed_metrics["eval/all/steps"] == steps
    assert fixed_saved.keys() == read_saved.keys()
    assert all(torch.equal(fixed_saved[k], read_saved[k]) for k in fixed_saved)
    # Reading the flag waits for the device once per ACT step of each of the 4 chunks; the fixed loop never.
    extra = {op: n - fixed_syncs.get(op, 0) for op, n in read_syncs.items() if n != fixed_syncs.get(op, 0)}
    assert extra == {"_local_scalar_dense": 4 * steps}


def test_the_host_syncs_do_not_grow_with_the_act_steps(tmp_path):
    _, _, two = run_eval(head(halt_max_steps=2), tmp_path / "two")
    _, _, four = run_eval(head(halt_max_steps=4), tmp_path / "four")
    assert two == four


def test_early_halting_keeps_reading_the_flag():
    assert head(halt_max_steps=5).eval_act_steps() == 5
    assert head(halt_max_steps=5, eval_early_halt=True).eval_act_steps() is None
    baseline = head(halt_max_steps=5)
    baseline.model.config.act_inference = True  # the transformer baseline's upstream switch
    assert baseline.eval_act_steps() is None
    baseline.model.config.halt_max_steps = 1  # one step: nothing to halt early
    assert baseline.eval_act_steps() == 1


def test_the_step_count_is_read_through_wrappers_and_at_every_evaluation():
    loss_head = head(halt_max_steps=3)
    assert runner.fixed_act_steps(torch.compile(loss_head, backend="eager")) == 3
    assert runner.fixed_act_steps(PuzzleIdAblation(loss_head, torch.arange(9))) == 3
    loss_head.model.config.halt_max_steps = 11  # as URM's extra-loops pass raises it
    assert runner.fixed_act_steps(loss_head) == 11
    assert runner.fixed_act_steps(torch.nn.Linear(2, 2)) is None  # a head that does not say
