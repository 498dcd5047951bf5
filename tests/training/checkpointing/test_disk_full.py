"""A checkpoint save that runs out of disk ends with one clear error (exit DISK_FULL), nothing torn left.

The filesystem limit is simulated at the real write call: `open` in trm.training.checkpointing.layout hands torch a
file whose writes fail with ENOSPC once a byte budget is spent, so torch's own error path runs (its
inline_container RuntimeError chained to the OSError). With root and tmpfs, one test uses a real small
filesystem as well.
"""

from __future__ import annotations

import builtins
import errno
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import tests.training.test_trainer_inprocess as inproc
from trm import exit_codes
from trm.training.checkpointing import layout as ckpt


class Budget:
    """Bytes the simulated filesystem still takes."""

    def __init__(self, left: int) -> None:
        self.left = left


class FillingFile:
    def __init__(self, f, budget: Budget) -> None:
        self._f, self._budget = f, budget

    def write(self, data) -> int:
        size = len(memoryview(data).cast("B"))
        if size > self._budget.left:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._budget.left -= size
        return self._f.write(data)

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


def limit_disk(monkeypatch, budget: Budget) -> None:
    def limited_open(path, mode="r", *args, **kwargs):
        f = builtins.open(path, mode, *args, **kwargs)  # noqa: SIM115 - closed by FillingFile
        return FillingFile(f, budget) if "w" in mode else f

    monkeypatch.setattr(ckpt, "open", limited_open, raising=False)


def checkpoint_size(tmp_path: Path) -> int:
    code, _ = inproc.run(tmp_path / "probe", "max_steps=4")
    assert code == exit_codes.OK
    return ckpt.checkpoint_bytes(ckpt.find_complete(tmp_path / "probe")[-1])


def assert_clean_failure(err: ckpt.CheckpointDiskFull, run_dir: Path, step: int, intact: int | None) -> None:
    message = str(err)
    assert err.exit_code == exit_codes.DISK_FULL == 74
    assert "\n" not in message
    assert f"checkpoint {run_dir / f'step_{step}'} could not be written: No space left on device" in message
    assert "needs about" in message and "bytes free under" in message
    assert err.__cause__ is None and err.__suppress_context__  # one error, no chained tracebacks
    if intact is not None:
        assert f"previous checkpoint {run_dir / f'step_{intact}'} is intact" in message
    # Nothing torn: no step_N folder of the failed step, no partial folder, the older one verifies.
    assert not (run_dir / f"step_{step}").exists()
    assert not list(run_dir.glob(".step_*"))
    complete = ckpt.find_complete(run_dir, verify_hashes=True)
    assert [c.step for c in complete] == ([intact] if intact is not None else [])


def test_disk_full_during_the_second_save_keeps_the_first(tmp_path: Path, monkeypatch) -> None:
    size = checkpoint_size(tmp_path)
    run_dir = tmp_path / "run"
    limit_disk(monkeypatch, Budget(size + size // 2))  # room for step_4, not for step_8 as well
    with pytest.raises(ckpt.CheckpointDiskFull) as info:
        inproc.run(run_dir)
    assert_clean_failure(info.value, run_dir, 8, intact=4)
    monkeypatch.undo()
    resumed = inproc.make_trainer(run_dir)
    try:
        assert resumed.resumed_from == run_dir / "step_4"
    finally:
        resumed.close()


def test_disk_full_on_the_first_save_says_there_is_no_earlier_checkpoint(tmp_path: Path, monkeypatch) -> None:
    run_dir = tmp_path / "run"
    limit_disk(monkeypatch, Budget(10_000))
    with pytest.raises(ckpt.CheckpointDiskFull) as info:
        inproc.run(run_dir)
    assert_clean_failure(info.value, run_dir, 4, intact=None)
    assert "no earlier checkpoint exists" in str(info.value)


def test_disk_full_while_publishing_the_manifest(tmp_path: Path, monkeypatch) -> None:
    run_dir = tmp_path / "run"
    real_publish = ckpt.publish
    calls = []

    def publish_on_full_disk(root, step, facts):
        calls.append(step)
        if len(calls) == 2:
            raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
        return real_publish(root, step, facts)

    monkeypatch.setattr(ckpt, "publish", publish_on_full_disk)
    with pytest.raises(ckpt.CheckpointDiskFull) as info:
        inproc.run(run_dir)
    assert "Disk quota exceeded" in str(info.value) and f"{run_dir / 'step_4'} is intact" in str(info.value)
    assert not list(run_dir.glob(".step_*")) and [c.step for c in ckpt.find_complete(run_dir)] == [4]


def test_other_write_errors_are_not_reported_as_disk_full(tmp_path: Path, monkeypatch) -> None:
    def broken(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(ckpt, "publish", broken)
    with pytest.raises(OSError, match="Input/output error"):
        inproc.run(tmp_path / "run")


def test_disk_full_cause_walks_torchs_chained_error() -> None:
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc] unexpected pos")  # noqa: B904
    except RuntimeError as err:
        cause = ckpt.disk_full_cause(err)
        assert cause is not None and cause.errno == errno.ENOSPC
    assert ckpt.disk_full_cause(RuntimeError("CUDA error: an illegal memory access")) is None


@pytest.fixture
def small_tmpfs(tmp_path: Path):
    """A real 400 KiB filesystem (root with tmpfs only; skipped elsewhere)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    target = tmp_path / f"fs-{uuid.uuid4().hex[:8]}"
    target.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(target)], capture_output=True, check=False
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode().strip()}")
    try:
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=False)


def test_disk_full_on_a_real_small_filesystem(small_tmpfs: Path) -> None:
    run_dir = small_tmpfs / "run"
    with pytest.raises(ckpt.CheckpointDiskFull) as info:
        inproc.run(run_dir)
    assert_clean_failure(info.value, run_dir, 8, intact=4)


WRAPPER = """
import builtins, errno, os, sys
from trm.training.checkpointing import layout as checkpoint

def full_disk_open(path, mode="r", *args, **kwargs):
    if "w" in mode and str(path).endswith("state.pt"):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    return builtins.open(path, mode, *args, **kwargs)

checkpoint.open = full_disk_open
from trm.train import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.e2e
def test_the_trainer_command_ends_with_one_line_and_exit_74(tmp_path: Path) -> None:
    from tests.e2e.test_train import ROOT, TINY, build_dataset, env

    dataset = tmp_path / "data"
    build_dataset(dataset, max_puzzles=2)
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-c", WRAPPER, *TINY, f"data_paths=[{dataset}]", f"+checkpoint_path={run_dir}",
         "epochs=2", "eval_interval=1"],
        env=env(), cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == exit_codes.DISK_FULL, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    last = [line for line in proc.stderr.splitlines() if line.strip()][-1]
    assert last.startswith(f"error: checkpoint {run_dir}/step_") and "No space left on device" in last, last
    assert not list(run_dir.glob(".step_*")) and ckpt.find_complete(run_dir) == []


RANK_WRAPPER = WRAPPER.replace('endswith("state.pt")', 'endswith("rank_1.pt")')


def run_two_ranks(
    tmp_path: Path, wrapper: str, *overrides: str
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`wrapper` as the trainer under torchrun, two CPU ranks on a tiny dataset: (the process, its run folder)."""
    from tests.e2e.test_train import ROOT, TINY, build_dataset, env

    dataset = tmp_path / "data"
    build_dataset(dataset, max_puzzles=2)
    script = tmp_path / "wrapper.py"
    script.write_text(wrapper)
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script),
         *TINY, f"data_paths=[{dataset}]", f"+checkpoint_path={run_dir}", "epochs=2", "eval_interval=1",
         "global_batch_size=4", *overrides],
        env=env(), cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return proc, run_dir


@pytest.mark.dist
@pytest.mark.e2e
def test_one_rank_out_of_space_stops_every_rank_without_a_hang(tmp_path: Path) -> None:
    """Rank 1 alone fails to write its shard; rank 0 (which would publish) must stop too, nobody waits."""
    proc, run_dir = run_two_ranks(tmp_path, RANK_WRAPPER)
    assert proc.returncode != 0, proc.stderr[-2000:]
    assert proc.stderr.count("No space left on device (needs about") == 2, proc.stderr[-3000:]  # both ranks
    assert "failed (exitcode: 74)" in proc.stderr  # torchrun's record of the first rank to exit
    assert not list(run_dir.glob(".step_*")) and ckpt.find_complete(run_dir) == []


SLOW_RANK_0_WRAPPER = WRAPPER.replace(
    "from trm.train import main",
    """import os, time
from trm.training.loop import Trainer

close = Trainer.close

def slow_close(self):
    if os.environ["RANK"] == "0":
        time.sleep(3)  # rank 0 is still tearing down long after rank 1 could have exited
    close(self)

Trainer.close = slow_close
from trm.train import main""",
)


@pytest.mark.dist
@pytest.mark.e2e
def test_rank_0s_background_writer_out_of_space_stops_every_rank(tmp_path: Path) -> None:
    """Rank 0's writer thread fails on state.pt after both shards were written: every rank stops with
    exit 74 at its next step (the failure travels in the per-step flag all-reduce), nothing published.

    Rank 0 is made slow to tear down, so rank 1 is ready to exit first: it must wait for rank 0, and rank 0
    must not die of the SIGTERM torchrun sends the remaining ranks once one has exited. Before, rank 1
    exited at once and rank 0 died of that SIGTERM (-15) every time; on a loaded machine the same happened
    without the delay, and a rank that exits while its peer still uses the gloo group can abort (SIGABRT).
    """
    proc, run_dir = run_two_ranks(tmp_path, SLOW_RANK_0_WRAPPER, "checkpoint_every_steps=1")
    assert proc.returncode != 0, proc.stderr[-2000:]
    assert "No space left on device (needs about" in proc.stderr, proc.stderr[-3000:]  # rank 0's cause
    assert "rank 0 could not write a checkpoint (its log has the error); no checkpoint exists" in proc.stderr
    # torchrun's summary: one entry per rank, each with the trainer's own exit code.
    ranks = dict(re.findall(r"rank\s*:\s*(\d+) \(local_rank: \d+\)\n\s*exitcode\s*:\s*(-?\d+)", proc.stderr))
    assert ranks == {"0": "74", "1": "74"}, proc.stderr[-3000:]
    assert not list(run_dir.glob(".step_*")) and ckpt.find_complete(run_dir) == []
