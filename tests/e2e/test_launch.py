"""scripts/train_prod.sh end to end on CPU: real data builder, real trainer under torchrun (2 gloo ranks),
a SIGTERM to one trainer rank mid-run, the automatic restart that resumes, and the handoff bundle."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import needs_rclone, write_fake_vastai
from tests.launch.plan.test_plan import SCRIPT, script_env

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
@pytest.mark.launch
@pytest.mark.dist
def test_train_prod_kill_resume_and_handoff(tmp_path):
    env = script_env(
        tmp_path, None, TASK="debug-tiny", NUM_GPUS="0", CPU_PROCS="2", SMOKE_STEPS="2", GPU_HOURLY_USD="1.5",
        TRAIN_OVERRIDES="epochs=6 eval_interval=3",
    )  # fmt: skip
    run_dir = tmp_path / "ws" / "checkpoints" / "trm-debug-tiny"
    bundle = tmp_path / "ws" / "artifacts" / "trm-debug-tiny"
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
        and "TASK=debug-tiny" in data["resume_command"]
    )
    assert data["resolved_config"]["global_batch_size"] == 8
    assert (bundle / "metrics.png").read_bytes().startswith(PNG_SIGNATURE)
    assert (bundle / "submission.json").exists() and (bundle / "metrics.csv").exists()
    assert "resumed from" in (bundle / "train.log").read_text()
    assert "status:         finished" in (bundle / "run.info").read_text()


@pytest.mark.slow
@pytest.mark.launch
@pytest.mark.dist
def test_sigterm_to_the_script_saves_and_the_same_command_resumes(tmp_path):
    """`docker stop` / pod deletion: SIGTERM reaches the trainer through the script, launcher and torchrun."""
    env = script_env(
        tmp_path, None, TASK="debug-tiny", NUM_GPUS="0", CPU_PROCS="2", SMOKE_STEPS="0",
        TRAIN_OVERRIDES="epochs=6 eval_interval=3",
    )  # fmt: skip
    run_dir = tmp_path / "ws" / "checkpoints" / "trm-debug-tiny"
    bundle = tmp_path / "ws" / "artifacts" / "trm-debug-tiny"
    with open(tmp_path / "first.log", "w") as log:
        proc = subprocess.Popen(
            ["bash", str(SCRIPT)], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            deadline = time.time() + 400
            while not train_steps(run_dir / "metrics.csv") or max(train_steps(run_dir / "metrics.csv")) < 2:
                assert proc.poll() is None and time.time() < deadline, (tmp_path / "first.log").read_text()[
                    -3000:
                ]
                time.sleep(0.5)
            proc.send_signal(signal.SIGTERM)  # to bash only, as docker/kubelet do to PID 1
            assert proc.wait(timeout=300) == 75, (tmp_path / "first.log").read_text()[-4000:]
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=120)
    assert not trainer_pids(run_dir)
    stopped = json.loads((bundle / "handoff.json").read_text())
    assert stopped["status"].startswith("stopped after saving")
    saved_step = stopped["last_good_checkpoint"]["step"]
    assert "stop requested (received SIGTERM)" in (run_dir / "launch" / "launch.log").read_text()
    second = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stdout[-4000:]
    finished = json.loads((bundle / "handoff.json").read_text())
    assert finished["status"] == "finished" and finished["last_good_checkpoint"]["step"] > saved_step
    assert len(finished["wall_time"]["sessions"]) == 2
    assert (
        f"step {saved_step}"
        in (run_dir / "launch" / "train.log").read_text().split("===== train attempt")[-1]
    )


@pytest.mark.slow
@pytest.mark.launch
@pytest.mark.dist
@needs_rclone
def test_train_prod_syncs_releases_and_a_new_machine_resumes_from_the_copy(tmp_path):
    """SYNC_TO + ON_END=stop on a (faked) Vast.ai instance at the end of the launch; then a second
    machine restores the run from the remote and the same command resumes from the restored checkpoint."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "vastai.calls"
    write_fake_vastai(bin_dir, calls)
    scoped = "vast-e2e-key-91c2"  # CONTAINER_API_KEY as Vast.ai sets it
    settings = dict(
        TASK="debug-tiny", NUM_GPUS="0", CPU_PROCS="1", SMOKE_STEPS="0", PREFLIGHT="0",
        TRAIN_OVERRIDES="epochs=4 eval_interval=2", SYNC_TO=f"store:{tmp_path / 'bucket'}",
        SYNC_EVERY_MINUTES="0.01", ON_END="stop", CONTAINER_ID="4242", CONTAINER_API_KEY=scoped,
        RCLONE_CONFIG_STORE_TYPE="local",
    )  # fmt: skip
    env = script_env(tmp_path, None, **settings)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    first = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=500)
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
    assert calls.read_text().splitlines() == [
        f"stop instance 4242 key={scoped}"
    ]  # the key never on its command line
    remote = tmp_path / "bucket" / "trm-debug-tiny"
    saved = sorted(int(p.name[5:]) for p in remote.glob("step_*") if (p / "COMPLETE").exists())
    assert saved and (remote / "handoff" / "handoff.json").is_file() and (remote / "metrics.csv").is_file()
    for path in [*remote.rglob("*"), *(tmp_path / "ws").rglob("*")]:
        if path.is_file():
            assert scoped.encode() not in path.read_bytes(), path
    # A new machine: an empty workspace, the run restored from the remote, the same command resumes it.
    env2 = {**env, "WORKSPACE": str(tmp_path / "ws2")}
    run_dir2 = tmp_path / "ws2" / "checkpoints" / "trm-debug-tiny"
    subprocess.run(
        [sys.executable, "-m", "trm", "sync", "--from", f"store:{remote}", str(run_dir2)],
        env=env2, check=True, capture_output=True,
    )  # fmt: skip
    second = subprocess.run(["bash", str(SCRIPT)], env=env2, capture_output=True, text=True, timeout=500)
    assert second.returncode == 0, (second.stdout + second.stderr)[-4000:]
    assert f"resumed from {run_dir2 / f'step_{saved[-1]}'}" in (run_dir2 / "launch" / "train.log").read_text()


def _multinode_env(tmp_path: Path, node_rank: int, port: int) -> dict[str, str]:
    """The launch environment the multi-node overlay gives each pod (NNODES, MASTER_PORT, the Indexed Job's
    completion index as NODE_RANK, the RWX volume as one WORKSPACE), on 127.0.0.1 and CPU ranks."""
    import yaml

    patch = yaml.safe_load(
        (SCRIPT.parents[1] / "jobs/overlays/multinode-2x8xh200/job-patch.yaml").read_text()
    )
    (trainer,) = patch["spec"]["template"]["spec"]["containers"]
    rendered = {e["name"]: e.get("value") for e in trainer["env"]}
    assert rendered["NNODES"] == "2" and "NODE_RANK" in rendered and "MASTER_ADDR" in rendered
    return script_env(
        tmp_path, None, TASK="debug-tiny", NUM_GPUS="0", CPU_PROCS="1", SMOKE_STEPS="0",
        TRAIN_OVERRIDES="epochs=6 eval_interval=3", NNODES=rendered["NNODES"], NODE_RANK=str(node_rank),
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
    )  # fmt: skip


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_nodes(tmp_path: Path, name: str, port: int) -> list[subprocess.Popen]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    procs = []
    for node in (0, 1):
        log = open(tmp_path / f"{name}-node{node}.log", "w")  # noqa: SIM115 (the child keeps it)
        procs.append(
            subprocess.Popen(
                ["bash", str(SCRIPT)],
                env=_multinode_env(tmp_path, node, port),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    return procs


def _kill(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)


def _to_the_end(procs: list[subprocess.Popen]) -> list[int]:
    """Both nodes' launchers run to their end; their exit codes (stragglers are killed)."""
    try:
        return [p.wait(timeout=900) for p in procs]
    finally:
        _kill(procs)


def _weights(run_dir: Path) -> tuple[dict, int]:
    """The model weights of the run's newest complete checkpoint (its hashes verified), and its step."""
    from trm.training.checkpointing.layout import find_complete
    from trm.training.checkpointing.state import read_main_state

    newest = find_complete(run_dir, verify_hashes=True)[-1]
    return read_main_state(newest.path)["model"], newest.step


@pytest.mark.e2e
@pytest.mark.dist
def test_two_nodes_stop_together_on_one_nodes_sigterm_and_the_same_commands_resume_bit_exactly(tmp_path):
    """The multi-node path for real: two launchers (torchrun agents, --nnodes=2, node ranks 0 and 1) on
    127.0.0.1 with gloo over one shared run directory. A SIGTERM to node 1 (its pod evicted) makes every rank
    of both nodes save and both launchers exit 75; the same command on both resumes and finishes with the
    weights of an uninterrupted two-node run."""
    # The uninterrupted reference runs alongside the run that is stopped (independent run directories and
    # rendezvous ports): the test waits for one two-node run less.
    reference = tmp_path / "reference"
    ports = set()
    while len(ports) < 2:
        ports.add(_free_port())
    reference_port, port = sorted(ports)
    whole = _two_nodes(reference, "whole", reference_port)
    work = tmp_path / "stopped"
    run_dir = work / "ws" / "checkpoints" / "trm-debug-tiny"
    procs = _two_nodes(work, "first", port)
    try:
        deadline = time.time() + 600
        while not train_steps(run_dir / "metrics.csv") or max(train_steps(run_dir / "metrics.csv")) < 2:
            assert all(p.poll() is None for p in procs) and time.time() < deadline, (
                work / "first-node0.log"
            ).read_text()[-3000:]
            time.sleep(0.5)
        procs[1].send_signal(signal.SIGTERM)  # node 1's pod is evicted: kubelet signals its PID 1
        codes = [p.wait(timeout=300) for p in procs]
    except BaseException:
        _kill(whole)  # the stopped run failed: the reference goes too
        raise
    finally:
        _kill(procs)
    assert _to_the_end(whole) == [0, 0], (reference / "whole-node0.log").read_text()[-3000:]
    want, last_step = _weights(reference / "ws" / "checkpoints" / "trm-debug-tiny")
    logs = [(work / f"first-node{n}.log").read_text() for n in (0, 1)]
    assert codes == [75, 75], logs[0][-3000:] + logs[1][-3000:]
    _saved, saved_step = _weights(run_dir)
    assert 0 < saved_step < last_step
    for log in logs:
        assert "Traceback" not in log, log[-3000:]

    assert _to_the_end(_two_nodes(work, "second", _free_port())) == [0, 0], (
        work / "second-node0.log"
    ).read_text()[-3000:]
    got, step = _weights(run_dir)
    assert step == last_step
    assert got.keys() == want.keys()
    import torch

    for key in want:
        assert torch.equal(got[key], want[key]), key
