"""The batch runner's scheduling with a stand-in interpreter (fast): runs side by side on fake GPUs, SIGTERM
forwarded to every running trainer, a failure that stops the batch."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from trm import exit_codes
from trm.experiments.batch import Batch, Options
from trm.experiments.suite import Catalog
from trm.launch.host.nvidia_smi import GpuInfo

# Stands in for `python`: data steps succeed; a trainer records its run name, GPUs and times, exits 75 on
# SIGTERM (as the trainer does after saving), 1 when its run is $FAKE_FAIL; with $FAKE_TOGETHER=N it trains
# only once N trainers have started (at most 30 s): trainers run side by side however slowly the machine
# starts them, and one run after another never passes for side by side (the first ends before the second starts);
# a run whose name starts with $FAKE_SLOW trains a second longer.
FAKE_PYTHON = """#!/usr/bin/env bash
set -euo pipefail
case " $* " in *" trm.train "*) ;; *) exit 0 ;; esac
# the trainer's SIGTERM handler before anything that starts a process: on a loaded machine a stop may come
# within the first second (a budget of about a second), and a trainer that has its handler saves
name=""
for arg in "$@"; do case $arg in run_name=*) name=${arg#run_name=} ;; esac; done
trap 'echo "$name term" >> "$FAKE_LOG"; exit 75' TERM
echo "$name start ${CUDA_VISIBLE_DEVICES:-cpu} $(date +%s.%N)" >> "$FAKE_LOG"
if [ "$name" = "${FAKE_FAIL:-}" ]; then echo "error: $name cannot train" >&2; exit 1; fi
for _ in $(seq 600); do
  [ "$(grep -c ' start ' "$FAKE_LOG")" -ge "${FAKE_TOGETHER:-0}" ] && break
  sleep 0.05
done
sleep "$FAKE_SLEEP" & wait $!
case $name in "${FAKE_SLOW:-/}"*) sleep 1 & wait $! ;; esac
echo "$name end $(date +%s.%N)" >> "$FAKE_LOG"
"""


def fake_gpus(n: int) -> list[GpuInfo]:
    return [GpuInfo(i, "NVIDIA H100 80GB HBM3", 81559, "9.0", "550.54", f"GPU-{i}") for i in range(n)]


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    script = tmp_path / "fake-python"
    script.write_text(FAKE_PYTHON)
    script.chmod(0o755)
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "fake.log"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return script


def events(tmp_path: Path) -> list[list[str]]:
    path = tmp_path / "fake.log"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def make_batch(tmp_path: Path, fake: Path, gpus: int, **options) -> Batch:
    exps = Catalog.load().select(pattern="smoke")
    opts = Options(
        data_dir=tmp_path / "data", checkpoint_dir=tmp_path / "ck", python=str(fake), poll_s=0.05, **options
    )
    return Batch(exps, opts, gpus=fake_gpus(gpus))


def results(batch: Batch) -> dict[str, dict]:
    doc = json.loads((batch.log_dir / "batch_results.json").read_text())
    return {run["name"]: run for run in doc["runs"]}


def test_two_gpus_run_two_experiments_side_by_side_and_the_third_takes_the_freed_gpu(
    tmp_path, fake, monkeypatch
):
    monkeypatch.setenv("FAKE_SLEEP", "0.5")
    monkeypatch.setenv("FAKE_TOGETHER", "2")
    monkeypatch.setenv("FAKE_SLOW", "smoke-a-")  # b frees its GPU first, well apart from a
    batch = make_batch(tmp_path, fake, gpus=2)
    a, b, c = (r.experiment.run_name for r in batch.runs)
    assert batch.run() == exit_codes.OK
    starts = {e[0]: (e[2], float(e[3])) for e in events(tmp_path) if e[1] == "start"}
    ends = {e[0]: float(e[2]) for e in events(tmp_path) if e[1] == "end"}
    assert {starts[a][0], starts[b][0]} == {"0", "1"}  # one GPU each, at the same time
    assert starts[b][1] < ends[a] and starts[a][1] < ends[b]
    assert starts[c][1] >= min(ends[a], ends[b])  # waited for a free GPU
    first_free = "0" if ends[a] <= ends[b] else "1"
    assert starts[c][0] == first_free
    got = results(batch)
    assert [got[n]["status"] for n in ("smoke-a", "smoke-b", "smoke-c")] == ["finished"] * 3
    assert got["smoke-a"]["command"].startswith("CUDA_VISIBLE_DEVICES=")
    assert (batch.log_dir / "smoke-a_stdout.log").exists() and (batch.log_dir / "smoke-a_stderr.log").exists()


def test_sigterm_reaches_every_running_trainer_and_the_batch_exits_75(tmp_path, fake, monkeypatch):
    monkeypatch.setenv("FAKE_SLEEP", "30")
    batch = make_batch(tmp_path, fake, gpus=2)

    def stop_when_both_run() -> None:
        deadline = time.time() + 60
        while time.time() < deadline and sum(e[1] == "start" for e in events(tmp_path)) < 2:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=stop_when_both_run, daemon=True).start()
    started = time.time()
    assert batch.run() == exit_codes.SAVED_RETRY
    assert time.time() - started < 25  # nobody waited for the 30 s "training"
    assert sorted(e[0] for e in events(tmp_path) if e[1] == "term") == sorted(
        r.experiment.run_name for r in batch.runs[:2]
    )
    got = results(batch)
    assert [got[n]["status"] for n in ("smoke-a", "smoke-b", "smoke-c")] == [
        "interrupted",
        "interrupted",
        "pending",
    ]
    assert got["smoke-a"]["exit_code"] == exit_codes.SAVED_RETRY
    doc = json.loads((batch.log_dir / "batch_results.json").read_text())
    assert (
        doc["batch"]["exit_code"] == exit_codes.SAVED_RETRY
        and doc["batch"]["stop_reason"] == "received SIGTERM"
    )


def test_a_failure_stops_the_batch_without_continue_on_failure(tmp_path, fake, monkeypatch):
    monkeypatch.setenv("FAKE_SLEEP", "30")
    exps = Catalog.load().select(pattern="smoke")
    monkeypatch.setenv("FAKE_FAIL", exps[1].run_name)
    batch = make_batch(tmp_path, fake, gpus=2)
    assert batch.run() == exit_codes.RUNS_FAILED
    got = results(batch)
    # b failed at once; a, running beside it, was asked to save and stop; c never started.
    assert [got[n]["status"] for n in ("smoke-a", "smoke-b", "smoke-c")] == [
        "interrupted",
        "failed",
        "pending",
    ]
    assert (
        got["smoke-b"]["exit_code"] == 1
        and "error: smoke-b-debug-tiny-L_cycles-2 cannot train" in got["smoke-b"]["log_tail"]
    )
    doc = json.loads((batch.log_dir / "batch_results.json").read_text())
    assert doc["batch"]["halted_by"] == "smoke-b"


def test_with_continue_on_failure_the_other_runs_go_on(tmp_path, fake, monkeypatch):
    monkeypatch.setenv("FAKE_SLEEP", "0.2")
    exps = Catalog.load().select(pattern="smoke")
    monkeypatch.setenv("FAKE_FAIL", exps[0].run_name)
    batch = make_batch(tmp_path, fake, gpus=0, num_gpus=0, continue_on_failure=True)
    assert [s.label for s in batch.slots] == ["CPU"]
    assert batch.run() == exit_codes.RUNS_FAILED
    got = results(batch)
    assert [got[n]["status"] for n in ("smoke-a", "smoke-b", "smoke-c")] == ["failed", "finished", "finished"]
    order = [e[0] for e in events(tmp_path) if e[1] == "start"]
    assert order == [r.experiment.run_name for r in batch.runs]  # CPU: one at a time, in order


def test_a_log_dir_holding_another_batchs_results_is_refused_and_kept(tmp_path, fake, monkeypatch):
    from trm.errors import TRMError

    monkeypatch.setenv("FAKE_SLEEP", "0")
    logs = tmp_path / "logs"
    logs.mkdir()
    other = logs / "batch_results.json"
    for text, why in (
        (json.dumps({"batch": {"id": "batch-0123456789"}, "runs": []}), "it holds the results of batch-0123"),
        ("my own notes", "that is no batch's results"),
    ):
        other.write_text(text)
        batch = make_batch(tmp_path, fake, gpus=1, log_dir=logs)
        with pytest.raises(
            TRMError, match=rf"--log-dir .*logs: refusing to use it: .*{why}.*nothing was changed"
        ):
            batch.run()
        assert other.read_text() == text and [p.name for p in logs.iterdir()] == ["batch_results.json"]
    assert not events(tmp_path)  # nothing trained
    # The batch's own folder is resumed: the same selection finds its own results there.
    other.write_text(json.dumps({"batch": {"id": batch.id}, "runs": []}))
    batch._check_log_dir()


def test_a_second_batch_on_the_same_log_dir_is_refused_while_the_first_runs(tmp_path, fake, monkeypatch):
    from trm.runlock import LOCK_FILE, RunLock, RunLocked

    monkeypatch.setenv("FAKE_SLEEP", "0")
    batch = make_batch(tmp_path, fake, gpus=1)
    running = RunLock(batch.log_dir, "experiment batch")  # the same selection, running in another shell
    assert running.try_acquire("python -m trm experiment batch smoke (the first)") is None
    try:
        with pytest.raises(
            RunLocked, match=r"in use by another process .*\(the first\).* run the same command"
        ):
            batch.run()
    finally:
        running.release()
    assert [p.name for p in batch.log_dir.iterdir()] == [LOCK_FILE]  # no results, ledger or log written
    assert not events(tmp_path)  # nothing trained
