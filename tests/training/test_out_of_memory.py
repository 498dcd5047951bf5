"""A CUDA out-of-memory error in training ends the run with one line and exit 80, saves nothing of the failed
step, and the same run at half the micro-batch resumes from the newest complete checkpoint, the global batch
kept. The error is injected in-process (the step module raises torch's OutOfMemoryError at a chosen step);
tests/launch/launcher/test_runner.py injects it into the trainer under the launcher."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.fixtures.launch.oom_trainer import CUDA_OOM, failing_at
from tests.training.test_trainer_inprocess import assert_same_state, make_trainer, run
from trm import exit_codes
from trm.oom import OutOfMemory, is_out_of_memory
from trm.training.checkpointing import layout as ckpt
from trm.training.loop import Trainer


def train(trainer: Trainer) -> int:
    try:
        return trainer.train()
    finally:
        trainer.close()


def test_out_of_memory_exits_80_with_one_line_and_saves_nothing_of_the_step(tmp_path: Path):
    run_dir = tmp_path / "run"
    with pytest.raises(OutOfMemory) as caught:
        train(failing_at(make_trainer(run_dir), 6, torch.cuda.OutOfMemoryError(CUDA_OOM)))
    err = caught.value
    assert err.exit_code == exit_codes.OUT_OF_MEMORY == 80
    assert (err.micro_batch_size, err.step) == (4, 5)
    message = str(err)
    assert (
        "\n" not in message and "GPU 0 has a total capacity" not in message
    )  # one line, the first sentences
    assert message.startswith(
        "CUDA out of memory after step 5 with micro_batch_size=4 (1 accumulation step(s), global_batch_size=4 "
        "over 1 process(es)): CUDA out of memory. Tried to allocate 2.00 GiB."
    )
    assert "restarts it with micro_batch_size=2" in message and "resumes from that checkpoint" in message
    # Nothing of steps 5 and 6 was saved: the pass-end checkpoint of step 4 is the newest.
    assert [c.step for c in ckpt.find_complete(run_dir)] == [4]


@pytest.mark.e2e
def test_the_half_micro_batch_resumes_from_the_checkpoint_as_after_a_stop(tmp_path: Path):
    run_dir = tmp_path / "run"
    with pytest.raises(OutOfMemory):
        train(failing_at(make_trainer(run_dir), 6, torch.cuda.OutOfMemoryError(CUDA_OOM)))
    code, resumed = run(run_dir, "micro_batch_size=2")
    plan = resumed.components.plan
    assert code == exit_codes.OK and resumed.resumed_from == run_dir / "step_4"
    assert (plan.micro_batch_size, plan.accum_steps) == (2, 2)
    assert plan.micro_batch_size * plan.accum_steps * plan.world_size == resumed.cfg.global_batch_size == 4

    # The same state as a run stopped by SIGTERM at step 4 and resumed at micro-batch 2: the failed attempt
    # left nothing behind (no half-applied step, no later checkpoint).
    assert run(tmp_path / "stopped", stop_at=4)[0] == exit_codes.SAVED_RETRY
    code, reference = run(tmp_path / "stopped", "micro_batch_size=2")
    assert code == exit_codes.OK
    assert_same_state(reference, resumed)


def test_at_micro_batch_1_the_message_says_nothing_smaller_fits(tmp_path: Path):
    trainer = failing_at(make_trainer(tmp_path, "micro_batch_size=1"), 2, RuntimeError(f"x: {CUDA_OOM}"))
    with pytest.raises(
        OutOfMemory, match=r"micro_batch_size=1 \(4 accumulation.*Even micro_batch_size=1 does not fit"
    ):
        train(trainer)


def test_other_errors_pass_through_unchanged(tmp_path: Path):
    trainer = failing_at(make_trainer(tmp_path), 2, RuntimeError("expected scalar type Float"))
    with pytest.raises(RuntimeError, match="expected scalar type Float") as caught:
        train(trainer)
    assert not isinstance(caught.value, OutOfMemory)


def test_is_out_of_memory():
    assert is_out_of_memory(torch.cuda.OutOfMemoryError("CUDA out of memory."))
    assert is_out_of_memory(RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate"))
    assert not is_out_of_memory(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert not is_out_of_memory(ValueError("out of memory"))  # not an error torch raises for it
