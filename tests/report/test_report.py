"""Reports of a batch and of run directories: the plotted data read back from the figures, the tables,
valid PNGs, and the same bytes for the same inputs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from PIL import Image

from trm.evaluation.arc import COUNT
from trm.report.build import figures, report_batch, report_runs
from trm.report.collect import read_run_dirs
from trm.report.markdown import evaluated_count
from trm.report.plots import MAX_SCALING_KEYS
from trm.training.config import count_metric

from .runs import recipe_config, size_batch, write_run


def line_data(ax) -> dict[str, tuple[list[float], list[float]]]:
    return {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()}


def assert_png(path: Path, fig) -> None:
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.format == "PNG"
        assert image.size == tuple(round(d * 100) for d in fig.get_size_inches())


def test_batch_report_plots_every_run_with_data_and_lists_the_failed_one(tmp_path):
    report = report_batch(size_batch(tmp_path), tmp_path / "out")
    assert sorted(report.figures) == [
        "eval_metrics.png", "scaling_size_arch-hidden-size.png", "timing.png", "train_loss.png",
    ]  # fmt: skip
    for name, fig in report.figures.items():
        assert_png(tmp_path / "out" / name, fig)

    (loss_ax,) = report.figures["train_loss.png"].axes
    curves = line_data(loss_ax)
    assert sorted(curves) == ["size-h16", "size-h32"]  # the failed run has no curve
    assert curves["size-h16"] == ([5, 10, 15, 20], [2.0 / s for s in (5, 10, 15, 20)])

    (eval_ax,) = report.figures["eval_metrics.png"].axes  # counts are not plotted
    assert eval_ax.get_title() == "eval/all/exact_accuracy"
    assert line_data(eval_ax)["size-h32"] == ([10, 20], [0.4, 0.35])

    (scaling_ax,) = report.figures["scaling_size_arch-hidden-size.png"].axes
    scaling = line_data(scaling_ax)
    # a size sweep: parameters on the x axis, final and best of the headline metric; the failed run has none
    assert scaling == {"final": ([5000.0, 20000.0], [0.3, 0.35]), "best": ([5000.0, 20000.0], [0.3, 0.4])}
    assert scaling_ax.get_xscale() == "log"
    assert sorted(t.get_text() for t in scaling_ax.texts) == ["hidden_size=16", "hidden_size=32"]

    rate_ax, wall_ax = report.figures["timing.png"].axes
    # 0.5 s per step between training logs, once the 3 s evaluations in between are taken out
    assert [p.get_height() for p in rate_ax.patches] == pytest.approx([2.0, 2.0])
    assert [p.get_height() for p in wall_ax.patches] == pytest.approx([5.0, 5.0, 2.5 / 60])
    assert wall_ax.get_title() == "wall time (minutes)"

    text = (tmp_path / "out" / "report.md").read_text()
    assert "3 runs (1 failed, 2 finished) from batch results batch_results.json." in text
    assert "\nBatch: host test-host, id b1, started 2026-11-23T10:00:00Z.\n" in text
    assert "| size-h32 | size | arch.hidden_size=32 | finished | 0 | 20 | 20.0k | eval/all/exact_accuracy " \
        "| 35.00 % @ 20 | 40.00 % @ 10 | 2 | 5 min |" in text  # fmt: skip
    assert "| size-h64 | size | arch.hidden_size=64 | failed | 1 | — | — | — | — | — | — | 2.5 s |" in text
    assert "- size-h64: log: RuntimeError: out of memory; run directory" in text
    # no run trained a published recipe: the paper's numbers alone, with their intervals
    assert "No run trained a recipe with published numbers unchanged" in text
    assert (
        "| sudoku-att | Sudoku-Extreme | TRM-Att (7M) exact accuracy | 74.7 % [74.6, 74.8] of 423,000 puzzles |"
        in text
    )
    for name in report.figures:
        assert f"]({name})" in text


def test_same_inputs_give_the_same_report_bytes(tmp_path):
    batch = size_batch(tmp_path)
    report_batch(batch, tmp_path / "a")
    # the runs listed in another order, in a file of the same name elsewhere: the same report
    data = json.loads(batch.read_text())
    data["runs"].reverse()
    (tmp_path / "again").mkdir()
    (tmp_path / "again" / "batch_results.json").write_text(json.dumps(data))
    report_batch(tmp_path / "again" / "batch_results.json", tmp_path / "b")
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "b").iterdir())
    for name in files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    report_batch(batch, tmp_path / "a")  # an earlier report's directory is replaced
    assert (tmp_path / "a" / "report.md").read_bytes() == (tmp_path / "b" / "report.md").read_bytes()


def test_paper_vs_achieved_with_wilson_intervals_from_the_logged_counts(tmp_path):
    counted = write_run(
        tmp_path / "arc1-run",
        recipe_config("arc1", run_name="arc1-run"),
        eval_values={"ARC/pass@2": [0.5, 0.4], COUNT: [400.0, 400.0]},
    )
    uncounted = write_run(
        tmp_path / "maze-run",
        recipe_config("maze", run_name="maze-run"),
        eval_values={"ARC/pass@2": [0.1, 0.2]},
    )
    changed = write_run(tmp_path / "other", recipe_config("arc1", "arch.L_cycles=2", run_name="other"))
    report_runs([counted, uncounted, changed], tmp_path / "out")
    text = (tmp_path / "out" / "report.md").read_text()
    # 200 of 400: Wilson 95 % [45.1, 54.9]; 160 of 400: [35.3, 44.9]; the paper's 44.6 % of 400 tasks
    assert (
        "| arc1 | ARC-AGI-1 | TRM-Att (7M) pass@2 | 44.6 % [39.8, 49.5] of 400 tasks | arc1-run | ARC/pass@2 "
        "| 40.00 % [35.3, 44.9] of 400 @ 20 | 50.00 % [45.1, 54.9] of 400 @ 10 |"
    ) in text
    assert (
        "| maze | Maze-Hard | TRM-Att (7M) exact accuracy | 85.3 % [83.0, 87.4] of 1,000 mazes | maze-run"
        in text
    )
    assert "20.00 % @ 20 (no count logged: no interval)" in text
    assert "| other |" not in text.split("## Paper vs achieved")[1].split("## Plots")[0]


def test_run_directories_compare_the_config_keys_that_differ(tmp_path):
    dirs = [
        write_run(tmp_path / f"L{n}", recipe_config("debug-tiny", f"arch.L_cycles={n}", run_name=f"L{n}"))
        for n in (2, 1)
    ]
    records = read_run_dirs(dirs)
    assert [(r.name, r.swept, r.suite, r.status) for r in records] == [
        ("L2", {"arch.L_cycles": 2}, "runs", "finished"),
        ("L1", {"arch.L_cycles": 1}, "runs", "finished"),
    ]
    report = report_runs(dirs, tmp_path / "out")
    (ax,) = report.figures["scaling_runs_arch-l-cycles.png"].axes
    assert line_data(ax)["final"] == ([1.0, 2.0], [0.2, 0.2])  # not a size key: the swept value on x
    assert ax.get_xlabel() == "arch.L_cycles"


def test_runs_that_differ_in_many_keys_get_no_scaling_plots(tmp_path):
    arc = write_run(tmp_path / "arc", recipe_config("arc1", run_name="arc"))
    sudoku = write_run(tmp_path / "sudoku", recipe_config("sudoku-mlp", run_name="sudoku"))
    records = read_run_dirs([arc, sudoku])
    assert len(records[0].swept) > MAX_SCALING_KEYS
    assert [name for _, name, _ in figures(records)] == ["train_loss.png", "eval_metrics.png", "timing.png"]


def test_a_real_tiny_training_run(tmp_path):
    """The trainer's own run directory: debug-tiny on 2 shipped ARC tasks, with the ARC evaluator."""
    from tests.helpers import train_in_process
    from trm.data.build_arc import build_arc_dataset
    from trm.training.recipes import get_recipe

    dataset, run_dir = tmp_path / "ds", tmp_path / "run"
    build_arc_dataset(
        dataset, subsets=["training", "evaluation"], test_set_name="evaluation", num_aug=1, max_puzzles=2
    )
    overrides = [
        *get_recipe("debug-tiny").overrides,
        "device=cpu",
        "compile=false",
        f"checkpoint_path={run_dir}",
    ]
    train_in_process([*overrides, f"data_paths=[{dataset}]"])
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    report = report_runs([run_dir], tmp_path / "out")
    (record,) = report.records
    assert (record.status, record.headline) == ("finished", "ARC/pass@2")
    assert record.num_params == rows[0]["num_params"] > 0
    assert evaluated_count(record, "ARC/pass@2", record.last_step) == 2  # the 2 evaluation tasks
    (loss_ax,) = report.figures["train_loss.png"].axes
    ((steps, losses),) = line_data(loss_ax).values()
    logged = [(r["step"], r["train/lm_loss"]) for r in rows if "train/lm_loss" in r]
    assert list(zip(steps, losses, strict=True)) == logged
    panels = [ax.get_title() for ax in report.figures["eval_metrics.png"].axes]
    assert panels == [
        "ARC/pass@1",
        "ARC/pass@2",
        "eval/all/accuracy",
        "eval/all/exact_accuracy",
        "eval/all/lm_loss",
    ]
    assert all(len(ax.get_lines()) == 1 for ax in report.figures["eval_metrics.png"].axes)
    assert record.steps_per_second is not None and record.steps_per_second > 0
    for name, fig in report.figures.items():
        assert_png(tmp_path / "out" / name, fig)


def test_a_launched_run_takes_status_and_wall_time_from_the_launcher_sessions(tmp_path):
    run_dir = write_run(tmp_path / "r", recipe_config("debug-tiny"), step_limit=1000)
    (run_dir / "launch").mkdir()
    events = [
        {"event": "session_start", "time": 0.0, "utc": "a", "gpus": 1},
        {"event": "session_end", "time": 3600.0, "utc": "b", "exit_code": 0},
        {"event": "session_start", "time": 9000.0, "utc": "c", "gpus": 1},
        {"event": "session_end", "time": 9900.0, "utc": "d", "exit_code": 79},
    ]
    (run_dir / "launch" / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (record,) = read_run_dirs([run_dir])
    assert (record.status, record.exit_code, record.wall_seconds) == ("stopped", 79, 4500.0)
    assert record.wall_source == "launcher sessions"
    (run_dir / "launch" / "events.jsonl").unlink()
    (record,) = read_run_dirs([run_dir])  # no launcher: step 20 of 1000, the metrics' own span
    assert (record.status, record.exit_code, record.wall_source) == ("incomplete", None, "metrics.jsonl span")
    assert record.wall_seconds == 20 * 0.5 + 2 * 3.0
    # Ended by early stopping at step 20 of 1000: finished, not incomplete.
    run_json = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(
        json.dumps({**run_json, "early_stop": {"step": 20, "step_limit": 1000}})
    )
    (record,) = read_run_dirs([run_dir])
    assert record.status == "finished"


def test_a_torn_last_metrics_line_is_skipped(tmp_path):
    run_dir = write_run(tmp_path / "r", recipe_config("debug-tiny"))
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write('{"step": 25, "train/lm')
    (record,) = read_run_dirs([run_dir])
    assert record.last_step == 20


def test_a_subset_run_reports_its_own_choice_and_plots_its_subset_curve_apart(tmp_path):
    """eval_subset.fraction < 1: in-run evaluations log `subset/ARC/...`; the run's end scores its top-k fully
    and records the choice in run.json `best`. The report's best is that choice, with the interval of the full
    count; the subset curve gets its own panel; the recipe still counts as the published one."""
    config = recipe_config("arc2", "eval_subset.fraction=0.1", "best.top_k=2", run_name="arc2-subset")
    run = write_run(
        tmp_path / "arc2-subset",
        config,
        eval_values={"subset/ARC/pass@2": [0.05, 0.10], "subset/ARC/count": [120.0, 120.0]},
    )
    record = json.loads((run / "run.json").read_text())
    record["best"] = {
        "path": str(run / "step_10"), "step": 10, "metric": "ARC/pass@2", "value": 0.075, "evaluation": "full",
        "candidates": [
            {"step": 20, "subset/ARC/pass@2": 0.10, "ARC/pass@2": 0.05, "full_count": 120.0},
            {"step": 10, "subset/ARC/pass@2": 0.05, "ARC/pass@2": 0.075, "full_count": 120.0},
        ],
    }  # fmt: skip
    (run / "run.json").write_text(json.dumps(record))
    report_runs([run], tmp_path / "out")
    text = (tmp_path / "out" / "report.md").read_text()
    # the choice: 9 of 120, Wilson 95 % [4.0, 13.6] over the full count; no full evaluation in-run: no final
    assert "| arc2-subset | runs | — | finished | — | 20 | 1.0k | ARC/pass@2 | — | 7.50 % @ 10 |" in text
    assert (
        "| arc2 | ARC-AGI-2 | TRM-Att (7M) pass@2 | 7.8 % [4.2, 14.0] of 120 tasks | arc2-subset | ARC/pass@2 | — "
        "| 7.50 % [4.0, 13.6] of 120 @ 10 |"
    ) in text
    assert "best: the run's choice, step 10 on the full evaluation of its top 2 by subset score" in text
    fig = {name: f for _, name, f in figures(read_run_dirs([run]))}["eval_metrics.png"]
    panels = {ax.get_title(): line_data(ax) for ax in fig.axes}
    assert set(panels) == {"subset/ARC/pass@2"}  # never drawn as the full metric
    assert panels["subset/ARC/pass@2"]["arc2-subset"] == ([10, 20], [0.05, 0.10])


def test_the_count_metric_is_the_one_the_evaluators_log():
    assert count_metric("ARC/pass@2") == COUNT
    assert count_metric("eval/all/exact_accuracy") == "eval/all/count"
    assert count_metric("train/lm_loss") is None


def test_a_batch_whose_run_directories_are_gone_still_reports_from_its_metrics(tmp_path):
    batch = size_batch(tmp_path)
    shutil.rmtree(tmp_path / "h16")
    data = json.loads(batch.read_text())
    # as the batch runner writes them: last values (+ the last step), the best evaluation's row
    data["runs"][0]["final_metrics"] = {"eval/all/exact_accuracy": 0.25, "num_params": 5000, "step": 20}
    data["runs"][0]["best_metrics"] = {
        "metric": "eval/all/exact_accuracy",
        "step": 10,
        "eval/all/exact_accuracy": 0.3,
    }
    batch.write_text(json.dumps(data))
    report = report_batch(batch, tmp_path / "out")
    assert sorted(line_data(report.figures["train_loss.png"].axes[0])) == ["size-h32"]
    scaling = line_data(report.figures["scaling_size_arch-hidden-size.png"].axes[0])
    assert scaling["final"] == ([5000.0, 20000.0], [0.25, 0.35])
    assert (
        "| size-h16 | size | arch.hidden_size=16 | finished | 0 | 20 | 5.0k | eval/all/exact_accuracy | 25.00 % @ 20 "
        "| 30.00 % @ 10 |" in (tmp_path / "out" / "report.md").read_text()
    )


def test_best_ties_go_to_the_later_step_and_every_ranking_uses_one_metric_rule():
    from trm.experiments.outcome import best_metric_name
    from trm.report.collect import RunRecord
    from trm.training.config import headline_metric

    record = RunRecord(name="r", suite="s", status="finished")
    record.series["ARC/pass@2"] = [(10, 0.25), (20, 0.5), (30, 0.5), (40, 0.125)]
    assert record.best("ARC/pass@2") == (30, 0.5)  # as `python -m trm best` and the batch runner
    names = ["eval/hard/exact_accuracy", "eval/all/exact_accuracy", "train/lm_loss"]
    assert headline_metric(names) == "eval/all/exact_accuracy"
    assert headline_metric([*names, "ARC/pass@2"]) == "ARC/pass@2"
    assert (
        headline_metric(["eval/zz/exact_accuracy", "eval/hard/exact_accuracy"]) == "eval/hard/exact_accuracy"
    )
    assert best_metric_name([{"step": 1, n: 0.5} for n in names]) == "eval/all/exact_accuracy"
