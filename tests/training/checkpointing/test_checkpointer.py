"""The Checkpointer on its own: a fake run's contents, one process, real files."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest
import torch

from trm.distributed import DistInfo
from trm.training.checkpointing import layout as ckpt
from trm.training.checkpointing.checkpointer import Checkpointer, kind_on_disk
from trm.training.checkpointing.state import rng_state
from trm.training.config import CheckpointConfig, train_config
from trm.training.step_flags import StepFlags, WriterFlags


class FakeRun:
    """What a checkpoint holds, from a one-tensor 'model'."""

    def __init__(self) -> None:
        self.weight = torch.arange(4, dtype=torch.float32)
        self.step = 0
        self.checked: list[int] = []

    def checkpoint_facts(self) -> dict[str, Any]:
        return {"step": self.step, "world_size": 1}

    def main_payload(self) -> dict[str, Any]:
        return {"progress": {"step": self.step}, "model": {"w": self.weight}}

    def rank_shard(self) -> dict[str, Any]:
        return {"slot_start": 0, "slot_end": 1, "carry": None, "rng": rng_state()}

    def saved_weights(self) -> list[torch.Tensor]:
        return [self.weight]

    def check_weights(self, weights: list[torch.Tensor], step: int) -> None:
        assert all(torch.isfinite(w).all() for w in weights)
        self.checked.append(step)


def make(
    tmp_path: Path, asynchronous: bool = False, rank: int = 0, **keys: Any
) -> tuple[Checkpointer, FakeRun]:
    cfg = train_config()
    cfg.checkpoint = CheckpointConfig(every_minutes=None, asynchronous=asynchronous, **keys)
    run = FakeRun()
    info = DistInfo(rank=rank)
    return Checkpointer(cfg, info, tmp_path / "run", run, run.check_weights), run


def save(checkpointer: Checkpointer, run: FakeRun, step: int, metrics: dict[str, float] | None = None, **kw):
    run.step = step
    checkpointer.save(step, metrics, **kw)
    checkpointer.wait()


@pytest.mark.parametrize("asynchronous", [False, True])
def test_save_publishes_a_complete_checkpoint_of_the_contents(tmp_path: Path, asynchronous: bool) -> None:
    checkpointer, run = make(tmp_path, asynchronous=asynchronous)
    save(checkpointer, run, 3)
    (info,) = ckpt.find_complete(tmp_path / "run", verify_hashes=True)
    assert info.step == 3 and ckpt.kind_of(info) == ckpt.ROLLING and run.checked == [3]
    state = ckpt.load_torch(info.path / ckpt.STATE)
    assert torch.equal(state["model"]["w"], run.weight) and state["progress"] == {"step": 3}
    assert info.manifest["best_metric"] == "ARC/pass@2" and info.manifest["eval_metrics"] is None


def test_an_evaluation_upgrades_a_rolling_checkpoint_of_the_same_step_but_nothing_else_does(
    tmp_path: Path,
) -> None:
    checkpointer, run = make(tmp_path)
    folder = tmp_path / "run" / "step_2"
    save(checkpointer, run, 2)
    created = ckpt.check_folder(folder, verify_hashes=False)["created_unix"]
    save(checkpointer, run, 2)  # the same step again: kept as it is
    assert ckpt.check_folder(folder, verify_hashes=False)["created_unix"] == created
    save(checkpointer, run, 2, {"ARC/pass@2": 0.5})
    assert kind_on_disk(folder) == ckpt.EVAL
    assert ckpt.check_folder(folder, verify_hashes=False)["eval_metrics"] == {"ARC/pass@2": 0.5}
    save(checkpointer, run, 2, replace=True)  # the final save replaces whatever is there
    assert kind_on_disk(folder) == ckpt.ROLLING


def test_retention_keeps_the_newest_and_the_best(tmp_path: Path) -> None:
    checkpointer, run = make(tmp_path, keep=1, keep_best=1)
    save(checkpointer, run, 1, {"ARC/pass@2": 0.9})
    save(checkpointer, run, 2, {"ARC/pass@2": 0.1})
    save(checkpointer, run, 3)
    save(checkpointer, run, 4)
    assert [i.step for i in ckpt.find_complete(tmp_path / "run")] == [1, 2, 4]


def test_the_rolling_schedule_is_rank_0s(tmp_path: Path) -> None:
    main, _ = make(tmp_path, every_steps=2)
    other, _ = make(tmp_path, rank=1, every_steps=2)
    assert [main.flags(s)[0] for s in (1, 2, 3, 4)] == [False, True, False, True]
    assert not any(other.flags(s)[0] for s in (1, 2, 3, 4))
    off, _ = make(tmp_path)
    assert off.every_eval and not off.flags(100)[0]  # every_eval defaults to true


@pytest.mark.parametrize("every_eval", [True, False])
def test_the_save_after_a_pass_follows_every_eval(tmp_path: Path, every_eval: bool) -> None:
    checkpointer, run = make(tmp_path, every_eval=every_eval)
    save(checkpointer, run, 5, pass_end=True)
    assert [i.step for i in ckpt.find_complete(tmp_path / "run")] == ([5] if every_eval else [])


def test_a_step_saves_only_when_some_rank_wants_it(tmp_path: Path) -> None:
    checkpointer, run = make(tmp_path)
    save(checkpointer, run, 1, shared=StepFlags())
    assert ckpt.find_complete(tmp_path / "run") == []
    save(checkpointer, run, 2, shared=StepFlags(rolling=True))
    save(checkpointer, run, 3, shared=StepFlags(save=True))
    assert [i.step for i in ckpt.find_complete(tmp_path / "run")] == [2, 3]


def test_a_full_disk_in_the_background_is_flagged_then_raised(tmp_path: Path, monkeypatch) -> None:
    checkpointer, run = make(tmp_path, asynchronous=True)
    save(checkpointer, run, 1)

    def full(*_args: Any, **_kw: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt, "publish", full)
    run.step = 2
    checkpointer.save(2, None)
    checkpointer.wait(raise_failure=False)
    _, flags = checkpointer.flags(3)
    assert flags == WriterFlags(failed=True, disk_full=True)
    with pytest.raises(ckpt.CheckpointDiskFull, match="No space left on device"):
        checkpointer.save(3, None, shared=StepFlags(save=True, writer=flags))
    assert not (tmp_path / "run" / ".step_2.partial").exists()
    assert [i.step for i in ckpt.find_complete(tmp_path / "run")] == [1]  # the previous one is intact
    assert checkpointer.flags(3)[1] == WriterFlags()  # raised once


def test_another_failure_is_not_a_full_disk(tmp_path: Path, monkeypatch) -> None:
    checkpointer, _ = make(tmp_path, asynchronous=True)

    def broken(*_args: Any, **_kw: Any) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(ckpt, "publish", broken)
    checkpointer.save(1, None)
    checkpointer.wait(raise_failure=False)
    assert checkpointer.flags(2)[1] == WriterFlags(failed=True, disk_full=False)
    with pytest.raises(OSError, match="Input/output error"):
        checkpointer.wait()
