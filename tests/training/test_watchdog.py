"""The hang watchdog: per-phase allowances, the stack dump, exit 77 from a trainer whose loader blocks."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from trm import exit_codes
from trm.errors import TRMError
from trm.training import checkpoint as ckpt
from trm.training.config import compose, config_hash, math_dict
from trm.training.watchdog import Allowances, Watchdog, enable_flight_recorder, stack_dump_path

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
    with pytest.raises(TRMError, match=r"hang_eval_minutes=-1.0 must be ≥ 0"):
        compose(["hang_eval_minutes=-1"])
    # Run-only keys: they neither enter the hash nor block a resume.
    changed = compose(["hang_timeout_minutes=3", "hang_first_step_minutes=90", "hang_eval_minutes=1"])
    assert config_hash(changed) == config_hash(compose([]))
    assert not {k for k in math_dict(changed) if k.startswith("hang_")}


def test_flight_recorder_is_sized_on_cuda_only():
    env: dict[str, str] = {}
    enable_flight_recorder("cpu", env)
    assert env == {}
    enable_flight_recorder("cuda", env)
    assert env == {"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}
    env = {"TORCH_NCCL_TRACE_BUFFER_SIZE": "50"}
    enable_flight_recorder("cuda", env)
    assert env == {"TORCH_NCCL_TRACE_BUFFER_SIZE": "50"}
    env = {"TORCH_FR_BUFFER_SIZE": "10"}
    enable_flight_recorder("cuda", env)
    assert env == {"TORCH_FR_BUFFER_SIZE": "10"}


# A trainer (the in-process tests' tiny config and fake loader) whose loader never delivers batch 6:
# `python -m trm.train`'s exit path, in a subprocess because the watchdog ends the process.
HANGING_TRAINER = textwrap.dedent(
    """
    import sys, threading
    from pathlib import Path
    import tests.training.test_trainer_inprocess as inproc
    from tests.helpers import FakeLoader

    def wait_for_a_batch_that_never_comes():
        threading.Event().wait()

    class BlockingLoader(FakeLoader):
        def iter_train(self):
            for n, item in enumerate(super().iter_train()):
                if self._pass == 1 and n == 1:
                    wait_for_a_batch_that_never_comes()
                yield item

    inproc.FakeLoader = BlockingLoader
    trainer = inproc.make_trainer(Path(sys.argv[1]), *sys.argv[2:])
    sys.exit(trainer.train())
    """
)


def test_a_trainer_whose_loader_blocks_exits_77_with_the_stacks(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-c", HANGING_TRAINER, str(run_dir), "hang_timeout_minutes=0.05",
         "hang_first_step_minutes=1"],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == exit_codes.HUNG, proc.stderr[-3000:]
    # Step 4 ended the first pass (evaluated and saved); the loader blocks before step 6.
    dump = stack_dump_path(run_dir, 0).read_text()
    assert "rank 0" in dump and "after step 5, waiting for an optimizer step (allowance 0.05 min)" in dump
    assert "wait_for_a_batch_that_never_comes" in dump and "iter_train" in dump
    assert f"dumps: {stack_dump_path(run_dir, 0)}; exiting 77" in proc.stderr
    assert [c.step for c in ckpt.find_complete(run_dir)] == [4]
