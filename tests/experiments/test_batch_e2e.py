"""`python -m trm experiment batch` end to end on CPU: a failing run, SIGTERM mid-run, and the rerun that
skips the finished run and resumes the interrupted one to the weights of an uninterrupted run."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.test_train import ROOT, assert_states_equal, env, final_state, in_process
from trm import exit_codes
from trm.experiments import outcome

# End to end: out of the default `make test`, run by `make test-e2e` (CI runs both).
pytestmark = pytest.mark.e2e

SUITE = """
[tiny]
title = "batch runner end to end"
recipe = "debug-tiny"
overrides = ["epochs=2", "eval_interval=1"]
experiments = [
  { label = "ok", overrides = [] },
  { label = "no-data", overrides = ["data_paths=[/nonexistent/dataset]"] },
  { label = "long", overrides = ["epochs=6", "eval_interval=3", "arch.L_cycles=2"] },
]
"""
RUN_KEYS = {
    "name", "suite", "swept", "status", "exit_code", "started", "ended", "wall_seconds", "run_dir",
    "final_metrics", "best_metrics", "best_checkpoint", "handoff", "command", "log_tail",
}  # fmt: skip


def batch_cmd(tmp: Path) -> list[str]:
    return [
        *(sys.executable, "-m", "trm", "experiment", "batch", "tiny", "--continue-on-failure"),
        *("--suite-file", str(tmp / "suite.toml"), "--num-gpus", "0"),
        *(
            "--data-dir",
            str(tmp / "data"),
            "--checkpoint-dir",
            str(tmp / "ck"),
            "--log-dir",
            str(tmp / "logs"),
        ),
    ]


def results(tmp: Path) -> dict:
    doc = json.loads((tmp / "logs" / "batch_results.json").read_text())
    assert doc["schema_version"] == 1
    assert {"id", "started", "ended", "exit_code", "host", "experiments"} <= set(doc["batch"])
    for run in doc["runs"]:
        assert set(run) >= RUN_KEYS, RUN_KEYS - set(run)
    return {run["name"]: run for run in doc["runs"]}


def test_a_batch_survives_a_failure_and_a_sigterm_and_its_rerun_resumes_bit_exactly(tmp_path):
    (tmp_path / "suite.toml").write_text(SUITE)
    long_dir = tmp_path / "ck" / "tiny-c-debug-tiny-long"
    proc = subprocess.Popen(
        batch_cmd(tmp_path), env=env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        step = outcome.last_step(long_dir)
        if step is not None and step >= 3:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == exit_codes.SAVED_RETRY, (out + err).decode()[-3000:]

    first = results(tmp_path)
    ok, bad, long = first["tiny-a"], first["tiny-b"], first["tiny-c"]
    assert ok["status"] == "finished" and ok["exit_code"] == 0
    # Every run records every swept key: the suite's or the recipe's value where it sets none.
    assert ok["swept"] == {"data_paths": None, "epochs": 2, "eval_interval": 1, "arch.L_cycles": 1}
    assert bad["swept"]["data_paths"] == "[/nonexistent/dataset]"
    assert ok["best_checkpoint"] and Path(ok["best_checkpoint"]).is_dir()
    handoff = json.loads((Path(ok["handoff"]) / "handoff.json").read_text())  # as a single launch leaves
    assert Path(ok["handoff"]) == tmp_path / "logs" / "handoff" / "tiny-a"
    assert handoff["last_good_checkpoint"]["path"] == str(
        Path(ok["run_dir"]) / f"step_{ok['final_metrics']['step']}"
    )
    assert ok["final_metrics"]["step"] > 0 and ok["best_metric"] == "ARC/pass@2"
    assert ok["best_metrics"]["step"] == int(Path(ok["best_checkpoint"]).name.removeprefix("step_"))
    assert bad["best_metric"] is None and bad["best_metrics"] == {} and bad["final_metrics"] == {}
    assert (
        bad["status"] == "failed" and bad["exit_code"] == exit_codes.CONFIG_ERROR and bad["handoff"] is None
    )
    assert "/nonexistent/dataset" in bad["log_tail"]
    assert long["status"] == "interrupted" and long["exit_code"] == exit_codes.SAVED_RETRY
    assert long["swept"] == {"epochs": 6, "eval_interval": 3, "arch.L_cycles": 2, "data_paths": None}
    stopped_at = final_state(long_dir)["progress"]["step"]
    assert not final_state(long_dir)["progress"]["finished"]
    assert (tmp_path / "logs" / "tiny-b_stderr.log").read_text().count("error:") == 1
    assert json.loads((long_dir / "experiment.json").read_text())["experiment"] == {"value": "tiny-c"}

    rerun = subprocess.run(batch_cmd(tmp_path), env=env(), cwd=ROOT, capture_output=True, text=True)
    assert rerun.returncode == exit_codes.RUNS_FAILED, rerun.stdout + rerun.stderr
    second = results(tmp_path)
    assert (
        second["tiny-a"]["status"] == "skipped"
        and second["tiny-a"]["best_checkpoint"] == ok["best_checkpoint"]
    )
    assert second["tiny-b"]["status"] == "failed"
    assert second["tiny-c"]["status"] == "finished" and second["tiny-c"]["resumed"] is True
    assert (
        f"resumed from {long_dir / f'step_{stopped_at}'}"
        in (tmp_path / "logs" / "tiny-c_stderr.log").read_text()
    )

    # The uninterrupted run of the same command (another directory) ends with the same weights, bit for bit.
    command = shlex.split(second["tiny-c"]["command"])
    straight = tmp_path / "straight"
    command = [f"checkpoint_path={straight}" if a.startswith("checkpoint_path=") else a for a in command]
    assert in_process(command) == 0  # a reference run: in this process, as a subprocess would compute it
    assert_states_equal(final_state(straight), final_state(long_dir))

    # The report of the batch: one curve per run that trained (the failed one has none), valid PNGs,
    # and the best checkpoint `python -m trm best` picks is the one the batch recorded.
    from PIL import Image

    from trm.report.build import report_batch
    from trm.training.checkpointing.best import best_checkpoint

    report = report_batch(tmp_path / "logs" / "batch_results.json", tmp_path / "report")
    loss_axes = report.figures["train_loss.png"].axes
    assert sum(len(ax.get_lines()) for ax in loss_axes) == 2  # tiny-a and tiny-c
    for name in report.figures:
        with Image.open(tmp_path / "report" / name) as png:
            assert png.format == "PNG" and png.size[0] > 100
    text = (tmp_path / "report" / "report.md").read_text()
    assert all(f"| {name} |" in text or name in text for name in ("tiny-a", "tiny-b", "tiny-c"))
    for run in (second["tiny-a"], second["tiny-c"]):
        picked = best_checkpoint(Path(run["run_dir"]))
        assert str(picked.info.path) == run["best_checkpoint"] and picked.metric == run["best_metric"]
