"""The training loop in one process with a fake loader: resume is bit-exact, accumulation keeps the math."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch

from tests.helpers import FakeLoader, HostSyncCounter, without_timings
from trm import exit_codes
from trm.distributed import DistInfo
from trm.errors import TRMError
from trm.training.checkpointing import layout as ckpt
from trm.training.config import compose, fill_run_defaults
from trm.training.loop import Trainer
from trm.training.recipes import get_recipe

# The debug-tiny recipe with more halting (3 steps, exploration half the time) and 2 evaluations in 4 epochs.
TINY = (
    get_recipe("debug-tiny")
    .with_changes(
        arch={"halt_max_steps": 3, "halt_exploration_prob": 0.5},
        global_batch_size=4,
        epochs=4,
        eval_interval=2,
        lr=1e-2,
        lr_warmup_steps=2,
        evaluators=[],
        ema_rate=0.9,
    )
    .overrides
)


def make_trainer(
    run_dir: Path, *extra: str, base: tuple[str, ...] = TINY, info: DistInfo | None = None
) -> Trainer:
    """A trainer over fake loaders: `base` overrides (TINY), the run directory, then `extra` (on CPU
    unless `info` says otherwise)."""
    cfg = compose([*base, f"checkpoint_path={run_dir}", *extra])
    fill_run_defaults(cfg)
    loaders = tuple(
        FakeLoader(
            split, global_batch_size=cfg.global_batch_size, seed=cfg.seed, epochs_per_iter=cfg.eval_interval
        )
        for split in ("train", "test")
    )
    return Trainer.create(cfg, info or DistInfo(), loaders)


def run(run_dir: Path, *extra: str, stop_at: int | None = None) -> tuple[int, Trainer]:
    return train(make_trainer(run_dir, *extra), stop_at=stop_at)


def train(trainer: Trainer, stop_at: int | None = None) -> tuple[int, Trainer]:
    """Train to the end (or SIGTERM right after step `stop_at`), then close: (exit code, trainer)."""
    if stop_at is not None:
        original = trainer._train_step

        def step_then_signal(batch, bar):
            original(batch, bar)
            if trainer.progress.step == stop_at:
                os.kill(os.getpid(), signal.SIGTERM)

        trainer._train_step = step_then_signal  # type: ignore[method-assign]
    try:
        return trainer.train(), trainer
    finally:
        trainer.close()


def metric_rows(run_dir: Path) -> list[dict]:
    return [
        without_timings(json.loads(line)) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
    ]


def assert_same_state(a: Trainer, b: Trainer, exact: bool = True) -> None:
    check = (
        torch.testing.assert_close
        if not exact
        else (lambda x, y: torch.equal(x, y) or pytest.fail("differs"))
    )
    for (name, x), (_, y) in zip(
        a.components.model.state_dict().items(), b.components.model.state_dict().items(), strict=True
    ):
        assert check(x, y) is not False, name
    for oa, ob in zip(a.components.optimizers, b.components.optimizers, strict=True):
        sa, sb = oa.optimizer.state_dict()["state"], ob.optimizer.state_dict()["state"]
        assert sa.keys() == sb.keys()
        for key in sa:
            for field in sa[key]:
                check(torch.as_tensor(sa[key][field]), torch.as_tensor(sb[key][field]))
    for name in a.components.ema.shadow:
        check(a.components.ema.shadow[name], b.components.ema.shadow[name])


def test_sigterm_then_resume_is_bit_exact(tmp_path: Path) -> None:
    code, straight = run(tmp_path / "straight")
    assert code == exit_codes.OK and straight.progress.step == 8 and straight.progress.finished

    code, _ = run(tmp_path / "split", stop_at=3)
    assert code == exit_codes.SAVED_RETRY
    assert [c.step for c in ckpt.find_complete(tmp_path / "split")] == [3]
    code, resumed = run(tmp_path / "split")
    assert code == exit_codes.OK and resumed.resumed_from == tmp_path / "split" / "step_3"

    assert_same_state(straight, resumed)
    assert metric_rows(tmp_path / "straight") == metric_rows(tmp_path / "split")
    # The same command once more is the same run: nothing left to do, nothing changes.
    before = (tmp_path / "split" / "metrics.jsonl").read_text()
    code, again = run(tmp_path / "split")
    assert code == exit_codes.OK and again.progress.step == 8
    assert (tmp_path / "split" / "metrics.jsonl").read_text() == before


def test_stop_at_end_of_pass_resumes_into_the_evaluation(tmp_path: Path) -> None:
    code, straight = run(tmp_path / "a")
    code, _ = run(tmp_path / "b", stop_at=4)  # the last batch of the first pass, before its evaluation
    assert code == exit_codes.SAVED_RETRY
    code, resumed = run(tmp_path / "b")
    assert code == exit_codes.OK
    assert_same_state(straight, resumed)
    assert metric_rows(tmp_path / "a") == metric_rows(tmp_path / "b")
    assert any("eval/all/count" in row and row["step"] == 4 for row in metric_rows(tmp_path / "b"))


def test_evaluate_false_trains_the_same_steps_without_any_evaluation(tmp_path: Path) -> None:
    code, plain = run(tmp_path / "plain")
    code_off, off = run(tmp_path / "off", "evaluate=false")
    assert code == code_off == exit_codes.OK and off.progress.step == plain.progress.step == 8
    assert any(any(k.startswith("eval/") for k in row) for row in metric_rows(tmp_path / "plain"))
    assert not any(any(k.startswith("eval/") for k in row) for row in metric_rows(tmp_path / "off"))
    assert_same_state(plain, off)  # evaluation leaves the training state alone (its RNG is restored)


def run_stopped_in_evaluation(run_dir: Path, *extra: str, evaluation: int) -> tuple[int, Trainer]:
    """Run; SIGTERM arrives during the `evaluation`-th evaluation, after its first of two test batches."""
    trainer = make_trainer(run_dir, *extra)
    started: list[int] = []

    def before_test_batch(index: int) -> None:
        if index == 0:
            started.append(trainer.progress.step)
        elif len(started) == evaluation:
            os.kill(os.getpid(), signal.SIGTERM)

    trainer.components.test_loader.before_test_batch = before_test_batch
    try:
        return trainer.train(), trainer
    finally:
        trainer.close()


@pytest.mark.parametrize(
    ("extra", "evaluation", "at_step", "iteration"),
    [
        ((), 1, 4, 0),  # the first pass's evaluation, in the loop
        ((), 2, 8, 1),  # the last pass's evaluation, the run's final one
        (("max_steps=6",), 2, 6, 1),  # the final evaluation after max_steps ends the run mid-pass
    ],
)
def test_stop_during_an_evaluation_saves_without_it_and_the_resume_runs_it_again(
    tmp_path: Path, extra: tuple[str, ...], evaluation: int, at_step: int, iteration: int
) -> None:
    code, straight = run(tmp_path / "straight", *extra)
    assert code == exit_codes.OK

    split = tmp_path / "split"
    code, _ = run_stopped_in_evaluation(split, *extra, evaluation=evaluation)
    assert code == exit_codes.SAVED_RETRY
    newest = ckpt.find_complete(split)[-1]
    assert newest.step == at_step
    progress = ckpt.load_torch(newest.path / ckpt.STATE)["progress"]
    # Not counted: the pass is done, the evaluation is not, the run is not finished.
    assert progress["iteration"] == iteration and not progress["finished"]
    assert not any(k.startswith("eval/") for row in metric_rows(split) if row["step"] == at_step for k in row)

    code, resumed = run(split, *extra)
    assert code == exit_codes.OK and resumed.resumed_from == newest.path
    assert_same_state(straight, resumed)
    assert metric_rows(tmp_path / "straight") == metric_rows(split)
    assert any("eval/all/count" in row and row["step"] == at_step for row in metric_rows(split))


@pytest.mark.parametrize("micro", [1, 2])
def test_micro_batches_keep_the_math(tmp_path: Path, micro: int) -> None:
    _, whole = run(tmp_path / "whole", "max_steps=5")
    _, split = run(tmp_path / f"micro{micro}", "max_steps=5", f"micro_batch_size={micro}")
    assert_same_state(whole, split, exact=False)
    carry_whole = whole.carries[0]
    carry_split = split.carries
    steps = torch.cat([c.steps for c in carry_split])
    assert torch.equal(carry_whole.steps, steps)


def test_resume_refuses_another_architecture(tmp_path: Path) -> None:
    run(tmp_path / "r", stop_at=2)
    with pytest.raises(TRMError, match=r"architecture changed.*hidden_size"):
        make_trainer(tmp_path / "r", "arch.hidden_size=32")


def test_checkpoints_are_pruned_to_keep(tmp_path: Path) -> None:
    run(tmp_path / "k", "checkpoint_keep=1", "checkpoint_keep_best=0", "epochs=6")
    assert [c.step for c in ckpt.find_complete(tmp_path / "k")] == [12]


def test_resume_with_another_micro_batch_keeps_the_math(tmp_path: Path) -> None:
    _, straight = run(tmp_path / "a")
    code, _ = run(tmp_path / "b", stop_at=3)
    assert code == exit_codes.SAVED_RETRY
    code, resumed = run(tmp_path / "b", "micro_batch_size=1")
    assert code == exit_codes.OK and resumed.components.plan.accum_steps == 4
    assert_same_state(straight, resumed, exact=False)


def test_an_optimizer_step_never_waits_for_the_device(tmp_path):
    """Forward, backward and every optimizer (SignSGD's duplicate ids included), over 2 micro-batches and
    halting exploration: no operator whose output the host must read (a GPU stall), so the host can queue
    the next step while the device works. Fails on the `unique`-based SignSGD."""
    trainer = make_trainer(tmp_path / "run", "micro_batch_size=2")
    original, seen = trainer._train_step, []

    def counted(batch, bar):
        with HostSyncCounter() as syncs:
            original(batch, bar)
        seen.append(dict(syncs.counts))

    trainer._train_step = counted  # type: ignore[method-assign]
    try:
        assert trainer.train() == exit_codes.OK
    finally:
        trainer.close()
    assert len(seen) == trainer.progress.step > 2 and trainer.components.model.puzzle_emb is not None
    assert seen == [{}] * len(seen)
