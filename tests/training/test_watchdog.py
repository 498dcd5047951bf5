"""The hang watchdog: per-phase allowances, the stack dump, exit 77 from a trainer whose loader blocks."""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from trm import exit_codes
from trm.errors import TRMError
from trm.launch.supervision.supervisor import AttemptResult, read_rank_codes
from trm.training.checkpointing import layout as ckpt
from trm.training.config import compose, config_hash, math_dict
from trm.training.watchdog import (
    Allowances,
    Watchdog,
    enable_flight_recorder,
    flight_recorder_path,
    stack_dump_path,
)

ROOT = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(tmp_path: Path, clock: Clock, codes: list[int]) -> Watchdog:
    return Watchdog(
        tmp_path,
        3,
        Allowances(step_s=60, first_step_s=600, eval_s=300),
        clock=clock,
        exit_process=codes.append,
    )


def test_each_phase_has_its_own_allowance(tmp_path):
    clock, codes = Clock(), []
    wd = make(tmp_path, clock, codes)
    wd.start()
    wd.stop()  # the thread is not needed: check() is what it calls
    clock.now += 599  # compiling the first step: within hang_first_step_minutes
    assert not wd.check()
    wd.pet(1)
    clock.now += 59
    assert not wd.check()
    wd.pet(2)
    with wd.evaluation():
        clock.now += 299  # one evaluation batch may take the evaluation allowance
        assert not wd.check()
        wd.pet()
        clock.now += 299
        assert not wd.check()
    clock.now += 59  # back to the step allowance after the evaluation
    assert not wd.check() and codes == []
    clock.now += 2
    assert wd.check()
    assert codes == [exit_codes.HUNG] == [77]
    dump = stack_dump_path(tmp_path, 3).read_text()
    assert dump.startswith("trm watchdog: rank 3 ")
    assert "no progress for 1.0 min after step 2, waiting for an optimizer step (allowance 1 min)" in dump
    assert "test_each_phase_has_its_own_allowance" in dump  # faulthandler's stack of this thread


def test_the_first_step_allowance_ends_at_the_first_step(tmp_path):
    clock, codes = Clock(), []
    wd = make(tmp_path, clock, codes)
    wd.pet(1)
    clock.now += 61
    assert wd.check() and codes == [77]
    assert "after step 1, waiting for an optimizer step" in stack_dump_path(tmp_path, 3).read_text()
    codes.clear()
    wd = make(tmp_path / "fresh", clock, codes)
    wd.start()
    wd.stop()
    clock.now += 601
    assert wd.check() and codes == [77]
    assert (
        "before the first step, waiting for the first step (allowance 10 min)"
        in stack_dump_path(tmp_path / "fresh", 3).read_text()
    )


def blocked_in_a_test_loader(release: threading.Event) -> None:
    release.wait(30)


def test_the_thread_dumps_the_blocked_frame_and_exits(tmp_path):
    """The real thread and clock: the main thread blocks; the watchdog names where, then 'exits'."""
    release, codes = threading.Event(), []

    def exit_process(code: int) -> None:
        codes.append(code)
        release.set()

    wd = Watchdog(
        tmp_path, 0, Allowances(step_s=0.3, first_step_s=0.3, eval_s=0.3), exit_process=exit_process
    )
    wd.start()
    try:
        blocked_in_a_test_loader(release)
    finally:
        wd.stop()
    assert codes == [exit_codes.HUNG]
    dump = stack_dump_path(tmp_path, 0).read_text()
    assert "made no progress for 0." in dump and " s before the first step" in dump
    # faulthandler: the watchdog is the current thread; the blocked (main) thread is another one.
    sections = re.split(r"\n(?=(?:Current thread|Thread) 0x)", dump)
    (blocked,) = [part for part in sections if "blocked_in_a_test_loader" in part]
    assert blocked.startswith("Thread 0x") and any(p.startswith("Current thread 0x") for p in sections)


def test_off_when_hang_timeout_is_zero(tmp_path):
    cfg = compose(["hang_timeout_minutes=0"])
    assert Allowances.from_config(cfg) is None
    wd = Watchdog(tmp_path, 0, None)
    wd.start()
    assert wd._thread is None and not wd.check()


def test_allowances_from_the_config_and_checks():
    cfg = compose(["hang_timeout_minutes=2", "hang_first_step_minutes=1", "hang_eval_minutes=5"])
    # A phase allowance below the step allowance is raised to it.
    assert Allowances.from_config(cfg) == Allowances(step_s=120, first_step_s=120, eval_s=300)
    defaults = Allowances.from_config(compose([]))
    assert defaults == Allowances(step_s=15 * 60, first_step_s=60 * 60, eval_s=30 * 60)
    with pytest.raises(TRMError, match=r"watchdog\.eval_minutes=-1.0 must be ≥ 0"):
        compose(["hang_eval_minutes=-1"])
    # Run-only keys: they neither enter the hash nor block a resume.
    changed = compose(["hang_timeout_minutes=3", "hang_first_step_minutes=90", "hang_eval_minutes=1"])
    assert config_hash(changed) == config_hash(compose([]))
    assert not {k for k in math_dict(changed) if k.startswith("hang_")}


def test_flight_recorder_is_sized_unless_the_user_did():
    env: dict[str, str] = {}
    enable_flight_recorder(env)
    assert env == {"TORCH_FR_BUFFER_SIZE": "2000"}
    for name in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"):
        env = {name: "50"}
        enable_flight_recorder(env)
        assert env == {name: "50"}


HANGING_TRAINER = ROOT / "tests" / "fixtures" / "hanging_trainer.py"


@pytest.mark.e2e
def test_a_trainer_whose_loader_blocks_exits_77_with_the_stacks(tmp_path):
    """`python -m trm.train`'s exit path, in a subprocess because the watchdog ends the process."""
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, str(HANGING_TRAINER), str(run_dir), "0", "hang_timeout_minutes=0.05",
         "hang_first_step_minutes=1"],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == exit_codes.HUNG, proc.stderr[-3000:]
    # Step 4 ended the first pass (evaluated and saved); the loader blocks before step 6.
    dump = stack_dump_path(run_dir, 0).read_text()
    assert "rank 0" in dump and "after step 5, waiting for an optimizer step (allowance 0.05 min)" in dump
    assert "wait_for_a_batch_that_never_comes" in dump and "iter_train" in dump
    assert f"dumps: {stack_dump_path(run_dir, 0)}; exiting 77" in proc.stderr
    assert not flight_recorder_path(run_dir, 0).parent.exists()  # one process: no process group
    assert [c.step for c in ckpt.find_complete(run_dir)] == [4]


@pytest.mark.dist
@pytest.mark.e2e
def test_two_ranks_one_blocked_loader_dump_stacks_and_flight_recorder(tmp_path):
    """Rank 1's loader blocks; rank 0 waits for it in the gradient all-reduce. Each rank whose watchdog
    fired first wrote where it waited and its recent collectives; the attempt counts as hung."""
    run_dir, exit_dir = tmp_path / "run", tmp_path / "codes"
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
        "-m", "trm.launch.supervision.worker", f"--exit-dir={exit_dir}", "--",
        sys.executable, str(HANGING_TRAINER), str(run_dir), "1", "hang_timeout_minutes=0.05",
        "hang_first_step_minutes=1",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("TORCH_FR_BUFFER_SIZE", None)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    codes = read_rank_codes(exit_dir)
    assert AttemptResult(proc.returncode, codes).outcome == "hung", (codes, proc.stderr[-3000:])
    where = {0: "all_reduce", 1: "wait_for_a_batch_that_never_comes"}
    fired = [rank for rank, code in codes.items() if code == exit_codes.HUNG]
    assert fired, codes
    last_seq = {}
    for rank in fired:
        dump = stack_dump_path(run_dir, rank).read_text()
        assert f"rank {rank}" in dump and "after step 5" in dump and where[rank] in dump, dump
        entries = pickle.loads(flight_recorder_path(run_dir, rank).read_bytes())["entries"]
        assert entries[-1]["profiling_name"] == "gloo:all_reduce", entries[-1]
        last_seq[rank] = entries[-1]["collective_seq_id"]
    if len(last_seq) == 2:  # the waiting rank entered one collective more than the blocked one
        assert last_seq[0] == last_seq[1] + 1, last_seq
