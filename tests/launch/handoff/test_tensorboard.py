"""`python -m trm tensorboard RUN_DIR`: serves the run's events on 127.0.0.1, answers HTTP, stops on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from trm.training.metrics_log import TensorBoardSink


@pytest.fixture(autouse=True)
def _tensorboard() -> None:
    """The real TensorBoard (an optional extra): each test skips without it, collection never does."""
    pytest.importorskip("tensorboard")


ROOT = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serves_the_run_on_localhost_and_stops_on_sigterm(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    sink = TensorBoardSink(run_dir)
    for step in (1, 2, 3):
        sink.log({"train/lm_loss": 3.0 / step, "perf/step_seconds": 0.25}, step)
    sink.close()
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "trm", "tensorboard", str(run_dir), "--port", str(port)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines: list[str] = []
        while not any("kubectl port-forward" in line for line in lines) and proc.poll() is None:
            lines.append(proc.stdout.readline())  # type: ignore[union-attr]
        text = "".join(lines)
        assert f"TensorBoard: http://127.0.0.1:{port}/" in text, text
        assert f"ssh -N -L {port}:127.0.0.1:{port} user@gpu-host" in text
        assert f'kubectl port-forward "$POD" {port}:{port}' in text
        tags: dict = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "perf/step_seconds" not in json.dumps(tags):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/data/plugin/scalars/tags", timeout=5) as r:
                assert r.status == 200
                tags = json.loads(r.read())
            time.sleep(0.5)
        assert {"train/lm_loss", "perf/step_seconds"} <= set(tags["."]), tags
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_run_without_events_says_how_to_get_them(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "trm", "tensorboard", str(tmp_path / "run")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "no TensorBoard events in" in proc.stderr and "TENSORBOARD=1, same RUN_NAME" in proc.stderr


def test_the_launcher_writes_events_by_default_where_tensorboard_is_installed(tmp_path: Path) -> None:
    from trm.launch.config.settings import LaunchSettings
    from trm.launch.plan.plan import build_plan

    env = {"TASK": "debug-tiny", "NUM_GPUS": "0", "WORKSPACE": str(tmp_path)}
    assert "tensorboard=true" in build_plan(LaunchSettings.from_env(env), [], env).overrides
    off = {**env, "TENSORBOARD": "0"}
    assert "tensorboard=false" in build_plan(LaunchSettings.from_env(off), [], off).overrides
    wins = {**env, "TRAIN_OVERRIDES": "tensorboard=false"}
    assert "tensorboard=true" not in build_plan(LaunchSettings.from_env(wins), [], wins).overrides


def test_the_docker_journey_has_a_live_view_on_the_hosts_loopback_only() -> None:
    from trm.launch.handoff.tensorboard import forward_hint

    assert "-p 127.0.0.1:6006:6006" in forward_hint(6006, "0.0.0.0")
    assert "publish" not in forward_hint(6006)
    production = (ROOT / "runbooks" / "v1" / "03-production-run.md").read_text()
    section_2a = production.split("## 2a.", 1)[1].split("\n## ", 1)[0]
    assert section_2a.count("-p 127.0.0.1:6006:6006") >= 2  # the launch and its W&B variant
    monitoring = (ROOT / "runbooks" / "v1" / "04-monitoring.md").read_text()
    assert (
        'docker exec "$RUN_NAME" python -m trm tensorboard' in monitoring and "--host 0.0.0.0" in monitoring
    )
