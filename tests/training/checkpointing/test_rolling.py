"""Rolling checkpoints (by steps and by time), their retention beside evaluation checkpoints (newest k of
each kind + best k by a metric), bit-exact resume from a rolling checkpoint taken mid-pass, and the
background writer: same files as a synchronous save, failures raised on the next step, SIGTERM waits."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

import tests.training.test_trainer_inprocess as inproc
from trm import exit_codes
from trm.training.checkpointing import layout as ckpt
from trm.training.checkpointing.rolling import RollingSchedule
from trm.training.config import RUN_ONLY_KEYS, compose, config_hash


def manifests(run_dir: Path) -> dict[int, dict]:
    return {c.step: c.manifest for c in ckpt.find_complete(run_dir, verify_hashes=True)}


def test_rolling_by_steps_mid_pass_and_eval_checkpoints_carry_their_metrics(tmp_path: Path) -> None:
    code, _ = inproc.run(tmp_path / "r", "checkpoint_every_steps=3", "checkpoint_keep=0")
    assert code == exit_codes.OK
    found = manifests(tmp_path / "r")
    # Rolling at 3 and 6 (mid-pass: a pass is 4 steps); evaluations at 4 and 8 (the final one).
    assert {s: m["kind"] for s, m in found.items()} == {3: "rolling", 4: "eval", 6: "rolling", 8: "eval"}
    assert found[3]["eval_metrics"] is None
    assert (
        found[4]["eval_metrics"]["eval/all/count"] > 0
        and "eval/all/exact_accuracy" in found[8]["eval_metrics"]
    )
    assert {m["best_metric"] for m in found.values()} == {"eval/all/exact_accuracy"}  # evaluators=[]


def test_resume_from_a_rolling_checkpoint_taken_mid_pass_is_bit_exact(tmp_path: Path) -> None:
    code, straight = inproc.run(tmp_path / "straight")
    assert code == exit_codes.OK

    crashed = inproc.make_trainer(tmp_path / "split", "checkpoint_every_steps=3")
    original = crashed._train_step

    def crash_at_step_5(batch, bar):
        if crashed.progress.step == 5:
            raise RuntimeError("simulated node loss")
        original(batch, bar)

    crashed._train_step = crash_at_step_5  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="simulated node loss"):
        try:
            crashed.train()
        finally:
            crashed.close()
    newest = ckpt.find_complete(tmp_path / "split")[-1]
    assert newest.step == 4 and newest.manifest["kind"] == "eval"
    # Resume from the rolling checkpoint at step 3 (mid-pass): drop the evaluation one after it.
    shutil.rmtree(newest.path)
    assert ckpt.find_complete(tmp_path / "split")[-1].manifest["kind"] == "rolling"

    code, resumed = inproc.run(tmp_path / "split", "checkpoint_every_steps=3")
    assert code == exit_codes.OK and resumed.resumed_from == tmp_path / "split" / "step_3"
    inproc.assert_same_state(straight, resumed)
    assert inproc.metric_rows(tmp_path / "straight") == inproc.metric_rows(tmp_path / "split")


def test_rolling_by_time_is_measured_since_the_last_checkpoint(tmp_path: Path) -> None:
    trainer = inproc.make_trainer(tmp_path / "t", "checkpoint_every_minutes=20", "checkpoint_keep=0")
    # A fake clock: every optimizer step takes 7 minutes.
    trainer.checkpointer.rolling = RollingSchedule(20, None, clock=lambda: 7 * 60.0 * trainer.progress.step)
    try:
        assert trainer.train() == exit_codes.OK
    finally:
        trainer.close()
    kinds = {s: m["kind"] for s, m in manifests(tmp_path / "t").items()}
    # 21 min at step 3; the evaluation checkpoint at step 4 (28 min) restarts the interval: 49 min at step 7.
    assert kinds == {3: "rolling", 4: "eval", 7: "rolling", 8: "eval"}


def test_rolling_schedule_off_and_on() -> None:
    now = [0.0]
    off = RollingSchedule(0, None, clock=lambda: now[0])
    now[0] = 1e9
    assert not off.due(1000)
    both = RollingSchedule(1, 5, clock=lambda: now[0])
    assert both.due(10) and not both.due(11)
    now[0] += 59
    assert not both.due(11)
    now[0] += 1
    assert both.due(11)
    both.saved()
    assert not both.due(11)


def test_checkpoint_keys_leave_the_run_name_unchanged() -> None:
    keys = ("checkpoint_every_minutes", "checkpoint_every_steps", "checkpoint_keep_best")
    assert {*keys, "checkpoint_best_metric", "async_checkpoint"} <= RUN_ONLY_KEYS
    base = compose([*inproc.TINY])
    changed = compose([*inproc.TINY, "checkpoint_every_minutes=5", "checkpoint_every_steps=7",
                       "checkpoint_keep_best=3", "checkpoint_best_metric=ARC/pass@1", "async_checkpoint=false"])  # fmt: skip
    assert config_hash(base) == config_hash(changed)


def fake_scores(monkeypatch: pytest.MonkeyPatch, scores: dict[int, float]) -> None:
    """Evaluations report `scores[step]` as eval/all/exact_accuracy (the rest is the real evaluation)."""
    from trm.evaluation import runner

    real = runner.evaluate

    def scored(*args, **kwargs):
        metrics = real(*args, **kwargs)
        metrics["eval/all/exact_accuracy"] = scores[kwargs["step"]]
        return metrics

    monkeypatch.setattr(runner, "evaluate", scored)


def test_retention_keeps_the_newest_of_each_kind_and_the_best_evaluation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_scores(monkeypatch, {4: 0.2, 8: 0.9, 12: 0.5, 16: 0.3})
    run_dir = tmp_path / "b"
    code, _ = inproc.run(run_dir, "epochs=8", "checkpoint_every_steps=3", "checkpoint_keep=1")
    assert code == exit_codes.OK
    found = manifests(run_dir)
    # Rolling 3, 6, 9, 15 (12 became an evaluation one) → the newest, 15; evaluations 4, 8, 12, 16 → the
    # newest, 16, and the best, 8: the run's last checkpoint is not its best.
    assert sorted(found) == [8, 15, 16]
    assert found[8]["eval_metrics"]["eval/all/exact_accuracy"] == 0.9

    from trm.commands import main

    assert main(["best", str(run_dir), "--json"]) == 0


def write(root: Path, step: int, kind: str, metrics: dict | None = None) -> None:
    folder = ckpt.prepare_partial(root, step)
    (folder / "state.pt").write_bytes(b"w")
    ckpt.publish(root, step, {"step": step, "kind": kind, "eval_metrics": metrics})


def test_prune_rules(tmp_path: Path) -> None:
    write(tmp_path, 1, "eval", {"m": 0.7})
    write(tmp_path, 2, "rolling")
    write(tmp_path, 3, "eval", {"m": 0.1})
    write(tmp_path, 4, "eval", {"m": float("nan")})
    write(tmp_path, 5, "rolling")
    write(tmp_path, 6, "eval", {"m": 0.5})
    write(tmp_path, 7, "rolling")
    ckpt.prune(tmp_path, keep=2, keep_best=2, metric="m")
    # rolling: 5, 7; eval newest 2: 4, 6; best 2 by m: 1 (0.7), 6 (0.5); NaN is never best.
    assert [c.step for c in ckpt.find_complete(tmp_path)] == [1, 4, 5, 6, 7]
    ckpt.prune(tmp_path, keep=1, keep_best=0, metric="m")
    assert [c.step for c in ckpt.find_complete(tmp_path)] == [6, 7]
    # The newest complete checkpoint is never pruned, whatever its kind.
    write(tmp_path, 8, "eval", {"m": 0.0})
    write(tmp_path, 9, "eval", {"m": 0.0})
    ckpt.prune(tmp_path, keep=1, keep_best=1, metric="m")
    assert [c.step for c in ckpt.find_complete(tmp_path)] == [6, 7, 9]
    write(tmp_path, 10, "eval", {"m": 0.5})  # a tie with step 6: the later step ranks first
    assert [i.step for i in ckpt.best_of(ckpt.find_complete(tmp_path), "m", 3)] == [10, 6, 9]


# ---------------------------------------------------------------- the background writer
def file_hashes(run_dir: Path) -> dict[int, dict[str, str]]:
    return {s: {n: f["sha256"] for n, f in m["files"].items()} for s, m in manifests(run_dir).items()}


def test_async_and_sync_saves_write_identical_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hashes = {}
    for asynchronous in (True, False):
        (tmp_path / str(asynchronous)).mkdir()
        monkeypatch.chdir(tmp_path / str(asynchronous))  # the same relative checkpoint_path: the same config
        trainer = inproc.make_trainer(Path("run"), "checkpoint_every_steps=3", "checkpoint_keep=0")
        trainer.checkpointer.writer.asynchronous = (
            asynchronous  # async_checkpoint=false, without changing the config
        )
        try:
            assert trainer.train() == exit_codes.OK
        finally:
            trainer.close()
        hashes[asynchronous] = file_hashes(Path("run"))
    assert sorted(hashes[True]) == [3, 4, 6, 8]
    assert hashes[True] == hashes[False]


def test_a_writer_failure_is_raised_on_the_next_step_and_the_previous_checkpoint_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = tmp_path / "w"
    real_publish = ckpt.publish

    def publish(root, step, facts):
        if step == 4:
            raise OSError(errno.EIO, "Input/output error")
        return real_publish(root, step, facts)

    monkeypatch.setattr(ckpt, "publish", publish)
    trainer = inproc.make_trainer(run_dir, "checkpoint_every_steps=3")
    submit = trainer.checkpointer.writer.submit

    def submit_and_let_it_finish(job, *args):
        submit(job, *args)
        trainer.checkpointer.writer.join()  # deterministic: the failure is there before the next step's check

    trainer.checkpointer.writer.submit = submit_and_let_it_finish  # type: ignore[method-assign]
    try:
        with pytest.raises(OSError, match="Input/output error"):
            trainer.train()
        assert trainer.progress.step == 5  # raised by the step after the failed save, in this thread
    finally:
        trainer.close()
    assert [c.step for c in ckpt.find_complete(run_dir, verify_hashes=True)] == [3]
    assert not list(run_dir.glob(".step_*"))


def test_sigterm_waits_for_the_writer_before_exit_75(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = tmp_path / "s"
    real_publish = ckpt.publish
    writer_threads = []

    def slow_publish(root, step, facts):
        writer_threads.append(threading.current_thread().name)
        time.sleep(0.5)
        return real_publish(root, step, facts)

    monkeypatch.setattr(ckpt, "publish", slow_publish)
    trainer = inproc.make_trainer(run_dir)
    original = trainer._train_step

    def step_then_signal(batch, bar):
        original(batch, bar)
        if trainer.progress.step == 3:
            os.kill(os.getpid(), signal.SIGTERM)

    trainer._train_step = step_then_signal  # type: ignore[method-assign]
    try:
        assert trainer.train() == exit_codes.SAVED_RETRY
        # Before close(): the save is complete when train() returns.
        assert not trainer.checkpointer.writer.busy
        assert [c.step for c in ckpt.find_complete(run_dir, verify_hashes=True)] == [3]
    finally:
        trainer.close()
    assert writer_threads == ["checkpoint-writer"]  # it was written in the background


def test_best_metric_default_follows_the_evaluators() -> None:
    from trm.training.config import best_metric

    assert best_metric(compose([*inproc.TINY])) == "eval/all/exact_accuracy"
    assert best_metric(compose([*inproc.TINY, "evaluators=[{name: arc@ARC}]"])) == "ARC/pass@2"
    assert best_metric(compose([*inproc.TINY, "checkpoint_best_metric=ARC/pass@1"])) == "ARC/pass@1"
