"""Non-finite loss or gradients: exit 78 with a repro, never a checkpoint with NaN weights; grad_clip_norm."""

from __future__ import annotations

import math
import os
import signal

import pytest
import torch

import tests.training.test_trainer_inprocess as inproc
from tests.helpers import FakeLoader
from trm import exit_codes
from trm.distributed import DistInfo, any_rank
from trm.errors import TRMError
from trm.training.checkpointing import layout as ckpt
from trm.training.checkpointing.state import read_main_state, set_rng_state
from trm.training.config import compose, config_hash, math_dict
from trm.training.nonfinite import NonFiniteError, repro_path, step_flags


def _param(*values: float) -> torch.nn.Parameter:
    p = torch.nn.Parameter(torch.zeros(len(values)))
    p.grad = torch.tensor(values)
    return p


def test_step_flags_find_nan_and_inf_and_clip_on_the_device():
    finite = {
        "lm_loss": torch.tensor(2.0),
        "q_halt_loss": torch.tensor(0.5),
        "accuracy": torch.tensor(math.nan),
    }
    a, b = _param(3.0), _param(4.0)
    assert step_flags(finite, [a, b], None).tolist() == [0, 0]  # `accuracy` is no loss: not checked
    assert a.grad.tolist() == [3.0] and b.grad.tolist() == [4.0]
    flags = step_flags(finite, [a, b], 1.0)  # global norm 5 -> 1
    assert flags.dtype == torch.int32 and flags.tolist() == [0, 0]
    assert a.grad.item() == pytest.approx(0.6, rel=1e-5) and b.grad.item() == pytest.approx(0.8, rel=1e-5)
    assert step_flags(finite, [_param(0.3)], 1.0).tolist() == [0, 0]  # below the threshold: unchanged
    assert step_flags({**finite, "lm_loss": torch.tensor(math.nan)}, [_param(1.0)], None).tolist() == [1, 0]
    assert step_flags({**finite, "q_halt_loss": torch.tensor(-math.inf)}, [_param(1.0)], None).tolist() == [
        1,
        0,
    ]
    assert step_flags(finite, [_param(1.0, math.inf)], None).tolist() == [0, 1]
    assert step_flags(finite, [_param(math.nan)], 1.0).tolist() == [0, 1]
    assert step_flags(finite, [torch.nn.Parameter(torch.zeros(2))], 1.0).tolist() == [0, 0]  # no grads


def test_device_flags_join_the_per_step_reduction():
    info = DistInfo()
    assert any_rank([True, False], info) == [True, False]
    assert any_rank([False, True], info, extra=torch.tensor([1, 0], dtype=torch.int32)) == [
        False,
        True,
        True,
        False,
    ]
    assert any_rank([], info, extra=torch.tensor([True])) == [True]


def test_grad_clip_norm_keeps_old_hashes_and_is_checked():
    default = compose([])
    assert "grad_clip_norm" not in math_dict(default)  # existing runs keep their names
    clipped = compose(["grad_clip_norm=1.0"])
    assert math_dict(clipped)["grad_clip_norm"] == 1.0 and config_hash(clipped) != config_hash(default)
    for bad in ("0", "-1"):
        with pytest.raises(TRMError, match=rf"grad_clip_norm={float(bad)} must be > 0"):
            compose([f"grad_clip_norm={bad}"])


def test_the_loop_clips_with_grad_clip_norm(tmp_path, monkeypatch):
    calls: list[float] = []
    original = torch.nn.utils.clip_grads_with_norm_

    def spy(params, max_norm, total_norm, foreach=None):
        calls.append(max_norm)
        return original(params, max_norm, total_norm, foreach)

    monkeypatch.setattr(torch.nn.utils, "clip_grads_with_norm_", spy)
    code, _ = inproc.run(tmp_path / "off", "max_steps=2")
    assert code == exit_codes.OK and calls == []
    code, _ = inproc.run(tmp_path / "on", "max_steps=2", "grad_clip_norm=0.25")
    assert code == exit_codes.OK and calls == [0.25, 0.25]


def _arm_nan(trainer, at_step: int) -> None:
    """The LM head's output turns NaN in step `at_step` (a bad batch, as far as the loop knows)."""
    trainer.components.model.inner.lm_head.register_forward_hook(
        lambda _m, _i, out: (
            out * math.nan if trainer.progress.step + 1 == at_step and torch.is_grad_enabled() else out
        )
    )


def _assert_only_step_4_intact(run_dir) -> None:
    assert [c.step for c in ckpt.find_complete(run_dir)] == [4]
    ckpt.check_folder(run_dir / "step_4", verify_hashes=True)
    state = read_main_state(run_dir / "step_4")
    assert all(torch.isfinite(t).all() for t in state["model"].values() if t.is_floating_point())
    assert not list(run_dir.glob(".step_*")) and not list(run_dir.glob("step_[5-9]"))


def test_a_nan_loss_stops_with_a_repro_and_writes_no_checkpoint(tmp_path, caplog):
    run_dir = tmp_path / "run"
    trainer = inproc.make_trainer(run_dir)
    _arm_nan(trainer, at_step=6)
    try:
        with pytest.raises(NonFiniteError) as err:
            trainer.train()
    finally:
        trainer.close()
    assert err.value.exit_code == exit_codes.NONFINITE == 78
    message = str(err.value)
    assert "rank 0: the loss and gradients of step 6 are not finite (NaN/Inf)" in message
    assert f"the newest checkpoint {run_dir / 'step_4'} is intact" in message
    assert "grad_clip_norm" in message and "\n" not in message
    assert message in caplog.text  # logged as well as raised
    assert trainer.progress.step == 6  # detected in the step it happened
    _assert_only_step_4_intact(run_dir)

    path = repro_path(run_dir, 6, 0)
    assert path.name == "nonfinite_step6_rank0.pt" and f"Repro (batch, RNG state, step): {path}" in message
    repro = torch.load(path, weights_only=False)
    assert (repro["step"], repro["rank"], repro["loss_finite"], repro["grads_finite"]) == (6, 0, False, False)
    # Step 6 is the second batch of the second loader pass: the repro holds exactly that batch.
    cfg = trainer.cfg
    loader = FakeLoader("train", global_batch_size=cfg.global_batch_size, seed=cfg.seed, epochs_per_iter=2)
    expected = loader._global_batch(1, 1)
    assert set(repro["batch"]) == set(expected)
    for key, value in expected.items():
        assert torch.equal(repro["batch"][key], value), key
    ids = sorted(set(expected["puzzle_identifiers"].tolist()))
    assert repro["puzzle_names"] == [f"task{i}" for i in ids]
    assert f"Puzzles in this rank's batch: {', '.join(f'task{i}' for i in ids)}." in message
    set_rng_state(repro["rng"])  # a complete RNG state
    assert repro["config"]["checkpoint_path"] == str(run_dir)


def test_the_weight_check_covers_every_chunk_and_ignores_integers(tmp_path, monkeypatch):
    from trm.training import nonfinite

    monkeypatch.setattr(nonfinite, "CHECK_CHUNK", 3)
    guard = nonfinite.NonFiniteGuard(tmp_path, DistInfo(), lambda: [], {})
    weights = [torch.zeros(2, 5), torch.arange(4), torch.ones(7, dtype=torch.bfloat16)]
    guard.check_weights(weights, step=3)  # all finite: no error, no repro
    assert not repro_path(tmp_path, 3, 0).exists()
    weights[2][-1] = math.inf  # the last element of the third chunk of the last tensor
    with pytest.raises(NonFiniteError, match="weights about to be saved are not finite"):
        guard.check_weights(weights, step=3)
    assert torch.load(repro_path(tmp_path, 3, 0), weights_only=False)["batch"] == {}


def test_the_save_path_refuses_nonfinite_weights(tmp_path):
    """Finite loss and gradients, but weights made NaN after the step (an optimizer fault): a SIGTERM save
    must not write them."""
    run_dir = tmp_path / "run"
    trainer = inproc.make_trainer(run_dir)
    original = trainer._train_step

    def step_then_poison(batch, bar):
        original(batch, bar)
        if trainer.progress.step == 5:
            with torch.no_grad():
                next(trainer.components.model.parameters()).fill_(math.nan)
            os.kill(os.getpid(), signal.SIGTERM)

    trainer._train_step = step_then_poison  # type: ignore[method-assign]
    try:
        with pytest.raises(NonFiniteError, match="the weights about to be saved are not finite") as err:
            trainer.train()
    finally:
        trainer.close()
    assert err.value.exit_code == 78
    _assert_only_step_4_intact(run_dir)
    repro = torch.load(repro_path(run_dir, 5, 0), weights_only=False)
    assert repro["why"] == "the weights about to be saved are not finite" and repro["loss_finite"]


def test_exit_code_78_from_the_command(tmp_path, monkeypatch, capsys):
    """`python -m trm.train`'s exit path: the error is one line and the process exit code is 78."""
    from trm import train

    def nan_run(cfg, info, loaders=None):
        raise NonFiniteError("rank 0: the loss of step 3 are not finite (NaN/Inf); nothing was saved")

    monkeypatch.setattr("trm.training.loop.Trainer.create", nan_run)
    code = train.main([*inproc.TINY, f"checkpoint_path={tmp_path / 'run'}"])
    assert code == exit_codes.NONFINITE
    assert "error: rank 0: the loss of step 3" in capsys.readouterr().err


def test_a_nonfinite_stop_under_accumulation_resumes_to_the_uninterrupted_run(tmp_path):
    """micro_batch_size=2 (two micro-batches a step) and max_steps=6: a NaN in the last step stops the run
    with nothing saved, and the same command (the bad batch now finite) resumes from step 4 to the very
    state, metrics and carries of a run that never met it."""
    accumulate = ("micro_batch_size=2", "max_steps=6")
    code, straight = inproc.run(tmp_path / "straight", *accumulate)
    assert code == exit_codes.OK and straight.components.plan.accum_steps == 2

    run_dir = tmp_path / "split"
    trainer = inproc.make_trainer(run_dir, *accumulate)
    _arm_nan(trainer, at_step=6)
    try:
        with pytest.raises(NonFiniteError):
            trainer.train()
    finally:
        trainer.close()
    _assert_only_step_4_intact(run_dir)

    code, resumed = inproc.run(run_dir, *accumulate)
    assert code == exit_codes.OK and resumed.resumed_from == run_dir / "step_4"
    assert resumed.progress.step == straight.progress.step == 6
    inproc.assert_same_state(straight, resumed)
    for a, b in zip(straight.carries, resumed.carries, strict=True):
        assert torch.equal(a.steps, b.steps) and torch.equal(a.halted, b.halted)
    assert inproc.metric_rows(tmp_path / "straight") == inproc.metric_rows(run_dir)
