"""scripts/train_prod.sh end to end on CPU: real data builder, real trainer under torchrun (2 gloo ranks),
a SIGTERM to one trainer rank mid-run, the automatic restart that resumes, and the handoff bundle."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.test_launch_plan import SCRIPT, script_env

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def trainer_pids(run_dir: Path) -> list[int]:
    """PIDs of `python -m trm.train … checkpoint_path=<run_dir>` processes (not the smoke gate's)."""
    want = f"checkpoint_path={run_dir}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[1:3] == [b"-m", b"trm.train"] and want in argv:
            pids.append(int(entry.name))
    return sorted(pids)


def train_steps(metrics: Path) -> set[int]:
    if not metrics.exists():
        return set()
    with open(metrics, newline="") as f:
        return {int(r["step"]) for r in csv.DictReader(f) if r.get("name") == "train/lm_loss"}


@pytest.mark.slow
@pytest.mark.dist
def test_train_prod_kill_resume_and_handoff(tmp_path):
    env = script_env(
        tmp_path, None, TASK="cpu-tiny", NUM_GPUS="0", CPU_PROCS="2", SMOKE_STEPS="2", GPU_HOURLY_USD="1.5",
        TRAIN_OVERRIDES="epochs=6 eval_interval=3",
    )  # fmt: skip
    run_dir = tmp_path / "ws" / "checkpoints" / "trm-cpu-tiny"
    bundle = tmp_path / "ws" / "artifacts" / "trm-cpu-tiny"
    log = open(tmp_path / "script.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(
        ["bash", str(SCRIPT)], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.time() + 400
        while not train_steps(run_dir / "metrics.csv") or max(train_steps(run_dir / "metrics.csv")) < 2:
            assert proc.poll() is None, (tmp_path / "script.log").read_text()[-3000:]
            assert time.time() < deadline, "training never reached step 2"
            time.sleep(0.5)
        pids = trainer_pids(run_dir)
        assert len(pids) == 2, pids
        os.kill(pids[-1], signal.SIGTERM)  # one rank only: the ranks agree to stop, save, exit 75
        assert proc.wait(timeout=500) == 0, (tmp_path / "script.log").read_text()[-4000:]
    finally:
        if proc.poll() is None:  # a failed assertion: stop the script, the launcher and its trainers cleanly
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=120)
        log.close()
    launch_log = (run_dir / "launch" / "launch.log").read_text()
    assert "trainer saved and exited 75: restart 1/3" in launch_log and "training finished" in launch_log
    train_log = (run_dir / "launch" / "train.log").read_text()
    assert train_log.count("===== train attempt") == 2 and "resumed from" in train_log
    data = json.loads((bundle / "handoff.json").read_text())
    assert data["status"] == "finished"
    ckpt = data["last_good_checkpoint"]
    assert (
        ckpt is not None and len(ckpt["sha256"]) == 64 and Path(ckpt["path"]).name == f"step_{ckpt['step']}"
    )
    assert data["metrics_summary"]["last_step"] == ckpt["step"]
    assert data["cost_estimate_usd"] is not None and data["wall_time"]["train_seconds"] > 0
    assert (
        data["resume_command"].endswith("bash scripts/train_prod.sh")
        and "TASK=cpu-tiny" in data["resume_command"]
    )
    assert data["resolved_config"]["global_batch_size"] == 8
    assert (bundle / "metrics.png").read_bytes().startswith(PNG_SIGNATURE)
    assert (bundle / "submission.json").exists() and (bundle / "metrics.csv").exists()
    assert "resumed from" in (bundle / "train.log").read_text()
    assert "status:         finished" in (bundle / "run.info").read_text()
