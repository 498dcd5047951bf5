"""What a run directory says: finished or not (skip / resume), final and best metrics, best checkpoint."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from trm.experiments import outcome
from trm.experiments.batch import Batch, Options, log_tail
from trm.experiments.suite import Catalog
from trm.io import atomic_write_json
from trm.training.checkpointing.layout import build_manifest, save_torch


def fake_checkpoint(run_dir: Path, step: int, *, finished: bool) -> Path:
    """A complete step_N/ as the trainer publishes it, holding only the progress."""
    folder = run_dir / f"step_{step}"
    folder.mkdir(parents=True)
    progress = {"step": step, "iteration": 0, "pass_done": finished, "finished": finished}
    save_torch({"progress": progress}, folder / "state.pt")
    atomic_write_json(folder / "manifest.json", build_manifest(folder, {"step": step}))
    (folder / "COMPLETE").write_text(f"{step}\n")
    return folder


def write_metrics(run_dir: Path, rows: list[dict]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"wall_time": 1.0, **row}) for row in rows]
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + '\n{"step": 9, "torn')


def test_finished_means_the_newest_complete_checkpoint_says_so(tmp_path):
    run = tmp_path / "run"
    assert not outcome.is_finished(run) and not outcome.has_checkpoint(run)
    fake_checkpoint(run, 2, finished=False)
    assert not outcome.is_finished(run) and outcome.has_checkpoint(run)
    fake_checkpoint(run, 4, finished=True)
    assert outcome.is_finished(run)
    (run / "step_6").mkdir()  # a torn save after it (no COMPLETE) changes nothing
    assert outcome.is_finished(run)


def test_a_damaged_final_checkpoint_does_not_mark_the_run_finished(tmp_path, caplog):
    """A resume skips a checkpoint whose files fail their sha256; so does the batch's skip check: the run
    resumes from the older one instead of being skipped as done."""
    run = tmp_path / "run"
    fake_checkpoint(run, 2, finished=False)
    final = fake_checkpoint(run, 4, finished=True)
    state = final / "state.pt"
    data = bytearray(state.read_bytes())
    data[-1] ^= 0xFF  # same size, still a loadable file: only the sha256 tells
    state.write_bytes(bytes(data))
    with caplog.at_level("WARNING"):
        assert not outcome.is_finished(run)
    assert f"skipping checkpoint {final}" in caplog.text and "sha256" in caplog.text
    fake_checkpoint(run, 6, finished=True)  # a newer intact final save counts again
    assert outcome.is_finished(run)


def test_the_best_checkpoint_is_the_best_kept_one_not_the_last(tmp_path):
    run = tmp_path / "run"
    write_metrics(
        run,
        [
            {"step": 1, "train/lm_loss": 2.0},
            {"step": 2, "ARC/pass@2": 0.25, "eval/all/exact_accuracy": 0.1},
            {"step": 3, "train/lm_loss": 1.5},
            {"step": 4, "ARC/pass@2": 0.5, "eval/all/exact_accuracy": 0.2},
            {"step": 6, "ARC/pass@2": 0.125, "eval/all/exact_accuracy": 0.3},
        ],
    )
    for step in (2, 4, 6):
        fake_checkpoint(run, step, finished=step == 6)
    best = outcome.best(run)
    assert best is not None
    assert (best.metric, best.step, best.value, best.checkpoint) == ("ARC/pass@2", 4, 0.5, run / "step_4")
    assert best.metrics["eval/all/exact_accuracy"] == 0.2
    by_exact = outcome.best(run, "eval/all/exact_accuracy")
    assert by_exact is not None and by_exact.checkpoint == run / "step_6"
    # The best evaluation's checkpoint was pruned: the best one still on disk is named.
    import shutil

    shutil.rmtree(run / "step_4")
    best = outcome.best(run)
    assert best is not None and best.step == 4 and best.checkpoint == run / "step_2"
    final = outcome.final_metrics(outcome.read_metrics(run))
    assert final == {"train/lm_loss": 1.5, "ARC/pass@2": 0.125, "eval/all/exact_accuracy": 0.3, "step": 6}


def test_without_arc_the_evaluations_exact_accuracy_picks_the_best(tmp_path):
    run = tmp_path / "run"
    write_metrics(
        run, [{"step": 5, "eval/all/exact_accuracy": 0.7}, {"step": 10, "eval/all/exact_accuracy": 0.6}]
    )
    best = outcome.best(run)
    assert best is not None and (best.metric, best.step, best.checkpoint) == (
        "eval/all/exact_accuracy",
        5,
        None,
    )
    assert outcome.best(tmp_path / "none") is None
    assert outcome.last_step(run) == 10


def test_a_rerun_skips_finished_runs_resumes_interrupted_ones_and_starts_the_rest(tmp_path):
    exps = Catalog.load().select(pattern="smoke")
    options = Options(data_dir=tmp_path / "d", checkpoint_dir=tmp_path / "c", dry_run=True, num_gpus=0)
    fake_checkpoint(tmp_path / "c" / exps[0].run_name, 8, finished=True)
    fake_checkpoint(tmp_path / "c" / exps[1].run_name, 3, finished=False)
    out = io.StringIO()
    batch = Batch(exps, options, out=out, gpus=[])
    assert batch.run() == 0
    text = out.getvalue()
    assert "smoke-a  [skip (finished)]" in text
    assert "smoke-b  [resume]" in text
    assert "smoke-c  [start]" in text
    assert [r.status for r in batch.runs] == ["skipped", "pending", "pending"]
    # The dry run builds the missing dataset first, then verifies it, and writes nothing.
    assert f"data build-arc --output-dir {tmp_path / 'd' / 'arc2-tiny'}" in text
    assert not (tmp_path / "c" / "batches").exists()


def test_the_log_tail_keeps_the_last_lines_and_splits_progress_redraws(tmp_path):
    log = tmp_path / "x_stderr.log"
    log.write_text("".join(f"line {i}\n" for i in range(30)) + "step 1\rstep 2\rerror: boom\n")
    tail = log_tail(log).splitlines()
    assert len(tail) == 20 and tail[-1] == "error: boom" and tail[-2] == "step 2"


def test_the_experiment_file_is_a_wandb_config_file_with_the_swept_values(tmp_path):
    from trm.experiments.batch import write_experiment_file

    (exp,) = Catalog.load().select(["exp03b"])
    path = write_experiment_file(tmp_path, exp, "batch-x")
    config_util = pytest.importorskip("wandb.sdk.lib.config_util")
    assert config_util.dict_from_config_file(str(path)) == {
        "experiment": "exp03b",
        "suite": "exp03",
        "label": "L_cycles-4",
        "swept": {"arch.L_cycles": 4},
        "batch": "batch-x",
    }
