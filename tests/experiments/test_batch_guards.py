"""A batch on a GPU host with the launcher's guards (stand-in trainers, fast): the MAX_HOURS budget of the
whole batch stops it as the launcher's cost guard stops a run, and SYNC_TO copies every run and the batch's
records off the host."""

from __future__ import annotations

import io
import json
import time

import pytest

from tests.experiments.test_batch import events, fake, make_batch, results  # noqa: F401 - fixture
from tests.helpers import needs_rclone
from trm import exit_codes
from trm.commands import main


@pytest.mark.e2e  # trainers and handoffs, twice: seconds
def test_the_budget_stops_the_batch_after_every_trainer_saved_and_a_rerun_does_not_train(
    tmp_path,
    fake,  # noqa: F811
    monkeypatch,
):
    monkeypatch.setenv("FAKE_SLEEP", "30")
    out = io.StringIO()
    batch = make_batch(tmp_path, fake, gpus=2, max_hours=0.0003, stop_margin_minutes=0.0, ledger_every_s=0.1)
    batch.out = out
    started = time.time()
    assert batch.run() == exit_codes.BUDGET_STOPPED
    assert time.time() - started < 20  # about a second of budget, not the 30 s "training"
    terms = sorted(e[0] for e in events(tmp_path) if e[1] == "term")
    assert terms == sorted(r.experiment.run_name for r in batch.runs[:2])  # both running trainers saved
    got = results(batch)
    assert [got[n]["status"] for n in ("smoke-a", "smoke-b", "smoke-c")] == ["interrupted"] * 2 + ["pending"]
    doc = json.loads((batch.log_dir / "batch_results.json").read_text())
    assert doc["batch"]["exit_code"] == exit_codes.BUDGET_STOPPED and doc["batch"]["max_hours"] == 0.0003
    assert doc["batch"]["stop_reason"].startswith("MAX_HOURS budget spent")
    ledger = json.loads((batch.log_dir / "ledger.json").read_text())
    assert ledger["hours"] >= 0.0003 and ledger["sessions"] == 1 and ledger["gpu_hours"] >= 2 * 0.0003
    assert "stopped by the budget" in out.getvalue() and "handoff: " in out.getvalue()

    again = make_batch(tmp_path, fake, gpus=2, max_hours=0.0003, stop_margin_minutes=0.0)
    again.out = io.StringIO()
    before = len(events(tmp_path))
    assert again.run() == exit_codes.OK  # spent: nothing trains, and a restart policy stops here
    assert len(events(tmp_path)) == before
    assert "the batch has spent" in again.out.getvalue() and "raise --max-hours" in again.out.getvalue()


@pytest.mark.e2e  # trainers and rclone: seconds
@needs_rclone
def test_sync_to_copies_every_run_and_the_batch_records(tmp_path, fake, monkeypatch):  # noqa: F811
    monkeypatch.setenv("RCLONE_CONFIG_STORE_TYPE", "local")
    monkeypatch.setenv("RCLONE_CONFIG", str(tmp_path / "no-rclone.conf"))
    monkeypatch.setenv("FAKE_SLEEP", "0.1")
    bucket = tmp_path / "bucket"
    bucket.mkdir()
    out = io.StringIO()
    batch = make_batch(tmp_path, fake, gpus=2, sync_to=f"store:{bucket}/runs")
    batch.out = out
    assert batch.run() == exit_codes.OK
    got = results(batch)
    for run in batch.runs:
        name = run.run_dir.name
        assert (bucket / "runs" / name / "experiment.json").is_file(), name  # the run directory's files
        assert got[run.experiment.name]["sync"] == "done"
        assert got[run.experiment.name]["synced_to"] == f"store:{bucket}/runs/{name}"
    copied = json.loads((bucket / "runs" / "batches" / batch.id / "batch_results.json").read_text())
    assert [r["name"] for r in copied["runs"]] == ["smoke-a", "smoke-b", "smoke-c"]
    assert json.loads((batch.log_dir / "batch_results.json").read_text())["batch"]["records_sync"] == "done"
    assert f"SYNC_TO: 3 of 3 run(s) copied to store:{bucket}/runs/<run name>" in out.getvalue()


def test_the_guards_flags_are_checked_as_the_launchers_variables(tmp_path, capsys, monkeypatch):
    real = ["experiment", "batch", "--pattern", "smoke", "--num-gpus", "0"]
    real += ["--checkpoint-dir", str(tmp_path / "ck"), "--data-dir", str(tmp_path / "data")]
    argv = [*real, "--dry-run"]
    assert main([*argv, "--max-hours", "nan"]) == 2
    assert "--max-hours='nan' is not a finite number" in capsys.readouterr().err
    assert main([*argv, "--sync-to", "bucket"]) == 2
    assert "--sync-to='bucket' is not an rclone remote" in capsys.readouterr().err
    import trm.launch.storage.sync as sync

    monkeypatch.setattr(sync.shutil, "which", lambda _name: None)  # no rclone on this host
    assert main([*real, "--sync-to", "store:b/runs"]) == 2  # a real batch: refused before it starts
    err = capsys.readouterr().err.strip()
    assert "--sync-to store:b/runs: rclone is not installed" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "ck").exists()
    monkeypatch.setenv("MAX_HOURS", "48")  # the launcher's variables are the defaults
    monkeypatch.setenv("SYNC_TO", "store:b/runs")
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert (
        "budget: --max-hours 48 for the whole batch" in printed
        and "sync: each run to store:b/runs/<run" in printed
    )
