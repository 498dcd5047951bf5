"""The launcher's stop requests reach torchrun's ranks, not torchrun: the ranks get SHUTDOWN_TIMEOUT to save on
every torch (torchrun before 2.12 kills them 30 s after a SIGTERM of its own), and the console shows no
torchrun traceback. Real torchrun, two CPU ranks of a stand-in trainer that saves slowly."""

from __future__ import annotations

import io
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from trm import exit_codes
from trm.launch.supervision.supervisor import AttemptResult, Console, EventLog, Supervisor, child_pids

# A trainer that, on SIGTERM, "saves" for SAVE_S seconds and exits 75 (or ignores the request: SAVE_S < 0).
SLOW_SAVER = """
import os, signal, sys, time
requested = []
signal.signal(signal.SIGTERM, lambda *_: requested.append(1))
open(os.path.join(sys.argv[1], "started_" + os.environ["RANK"]), "w").close()
save_s = float(sys.argv[2])
while not requested or save_s < 0:
    time.sleep(0.05)
time.sleep(save_s)
print("rank", os.environ["RANK"], "saved", flush=True)
sys.exit(75)
"""


def _torchrun(tmp_path: Path, save_s: float, torchrun_grace_s: int) -> list[str]:
    trainer = tmp_path / "trainer.py"
    trainer.write_text(SLOW_SAVER)
    return [
        *(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"),
        # torchrun's own grace after a SIGTERM to torchrun: shorter than the save, as torch 2.10's fixed 30 s
        # is shorter than a paper-size save on a slow disk
        f"--shutdown-timeout={torchrun_grace_s}",
        *(
            "-m",
            "trm.launch.supervision.worker",
            f"--exit-dir={tmp_path / 'exits'}",
            "--saved-exits-zero",
            "--",
        ),
        *(sys.executable, str(trainer), str(tmp_path), str(save_s)),
    ]


def _run_and_stop(
    tmp_path: Path, cmd: list[str], shutdown_timeout: float
) -> tuple[AttemptResult, str, float]:
    out = io.StringIO()
    console = Console(tmp_path / "launch.log", stream=out)
    supervisor = Supervisor(console, EventLog(tmp_path / "events.jsonl"), shutdown_timeout=shutdown_timeout)
    results: list[AttemptResult] = []
    runner = threading.Thread(
        target=lambda: results.append(
            supervisor.run(
                cmd, env=None, logs=[tmp_path / "train.log"], exit_dir=tmp_path / "exits", label="t"
            )
        )
    )
    runner.start()
    deadline = time.time() + 120
    while not all((tmp_path / f"started_{r}").exists() for r in (0, 1)):
        assert time.time() < deadline and runner.is_alive(), out.getvalue()
        time.sleep(0.1)
    stopped = time.time()
    supervisor.request_stop("cost guard: MAX_HOURS reached", budget=True)
    runner.join(timeout=120)
    assert not runner.is_alive()
    return results[0], out.getvalue(), time.time() - stopped


@pytest.mark.e2e
@pytest.mark.dist
def test_a_stop_gives_the_ranks_shutdown_timeout_and_the_console_no_torchrun_traceback(tmp_path):
    # the save takes 4 s; torchrun would kill the ranks 1 s after a SIGTERM of its own
    result, console, _ = _run_and_stop(tmp_path, _torchrun(tmp_path, 4.0, 1), shutdown_timeout=60)
    assert result.rank_codes == {0: exit_codes.SAVED_RETRY, 1: exit_codes.SAVED_RETRY}, console
    assert result.outcome == "saved" and result.returncode == 0
    assert console.count("saved") >= 2
    for noise in ("Traceback", "SignalException", "ChildFailedError"):
        assert noise not in console, console


@pytest.mark.e2e
@pytest.mark.dist
def test_ranks_that_do_not_finish_within_shutdown_timeout_are_stopped_through_torchrun(tmp_path):
    # the ranks ignore the request: after SHUTDOWN_TIMEOUT (2 s) torchrun is stopped, and kills them 1 s later
    result, console, took = _run_and_stop(tmp_path, _torchrun(tmp_path, -1.0, 1), shutdown_timeout=2)
    assert "have not finished 2 s after the stop request (SHUTDOWN_TIMEOUT): stopping torchrun" in console
    assert result.outcome == "failed" and exit_codes.SAVED_RETRY not in result.rank_codes.values()
    assert took < 60


def test_child_pids_finds_the_direct_children_only():
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(30)']); time.sleep(30)",
        ]
    )
    try:
        deadline = time.time() + 20
        while not (children := child_pids(parent.pid)):
            assert time.time() < deadline
            time.sleep(0.05)
        assert len(children) == 1 and child_pids(children[0]) == []
    finally:
        for pid in child_pids(parent.pid):
            subprocess.run(["kill", str(pid)], check=False)
        parent.kill()
        parent.wait()


@pytest.mark.parametrize(
    ("returncode", "ranks", "outcome"),
    [
        (0, {0: 75, 1: 75}, "saved"),  # the rank wrappers exit 0 for a trainer's 75: still "saved"
        (0, {0: 0, 1: 0}, "ok"),
        (0, {}, "ok"),
        (1, {0: 75, 1: -15}, "saved"),
        (1, {0: 78, 1: 75}, "failed"),
    ],
)
def test_the_outcome_is_read_from_the_ranks_records_before_torchruns_code(returncode, ranks, outcome):
    assert AttemptResult(returncode, ranks).outcome == outcome
