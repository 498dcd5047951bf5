"""The whole run's expected time and cost: the paper's ARC run against its ~3 days, the dry run's lines."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.launch.host.test_hardware import gpus_of
from tests.launch.plan.test_plan import dry_run
from trm.errors import TRMError
from trm.launch.config.settings import LaunchSettings
from trm.launch.cost.dataset_sizes import recorded_sizes
from trm.launch.cost.estimate import (
    ASSUMED_MFU,
    EvalSchedule,
    RunEstimate,
    estimate_run,
    eval_schedule,
    evaluations,
    probe_step_seconds,
)
from trm.launch.host.hardware import select_layout
from trm.launch.plan.plan import build_plan
from trm.training.config import compose, evaluation_work
from trm.training.recipes import get_recipe

# ARC-AGI-1 + ConceptARC at 1000 augmentations, as measured (TRM_SPEC §8.2).
ARC1_TRAIN = {"seq_len": 900, "vocab_size": 12, "num_puzzle_identifiers": 876_406, "total_groups": 960,
              "mean_puzzle_examples": 4.146, "total_puzzles": 876_405}  # fmt: skip
ARC1_TEST = {**ARC1_TRAIN, "total_groups": 400, "mean_puzzle_examples": 1.048, "total_puzzles": 368_150}


def write_dataset(root: Path, train: dict, test: dict) -> Path:
    for split, data in (("train", train), ("test", test)):
        (root / split).mkdir(parents=True)
        (root / split / "dataset.json").write_text(json.dumps(data))
    return root


def paper_config(*extra: str):
    return compose([*get_recipe("arc1").overrides, "data_paths=[x]", *extra])


# The arc recipes evaluate a subset in-run; these tests of the step and one evaluation's time evaluate in full.
EVERY_EVAL_FULL = ("eval_subset.fraction=1.0", "best.top_k=0")


def test_paper_arc_run_on_4_a100_comes_from_flops_labelled_estimate(tmp_path: Path) -> None:
    # The A100 tier has no [tier.speed]: the step and the evaluations come from FLOPs at the assumed MFU.
    data = write_dataset(tmp_path / "arc1concept-aug-1000", ARC1_TRAIN, ARC1_TEST)
    est = estimate_run(paper_config(), data, select_layout(gpus_of("a100-80gx4")), hourly_usd=2.5)
    assert isinstance(est, RunEstimate)
    assert est.total_steps == 518_250  # TRM_SPEC: 518,226 with the unrounded 4.14597 examples per puzzle
    assert est.evaluations == 125  # epochs 100000 / eval_interval 800
    assert est.step_source == est.eval_source == f"estimate: FLOPs at MFU {ASSUMED_MFU:.2f}"
    assert est.cost_usd == pytest.approx(est.wall_seconds / 3600 * 4 * 2.5)
    # Training FLOPs per step: 768 rows x 916 positions x (3 x 5 grad passes + 10 no-grad passes) x 2 blocks,
    # at 312 TFLOP/s (A100 bf16) x 4 x 0.30.
    assert 0.6 < est.step_seconds < 1.0


def test_paper_arc_run_on_4_h100_is_derived_from_the_one_h100_measurement(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "arc1concept-aug-1000", ARC1_TRAIN, ARC1_TEST)
    est = estimate_run(paper_config(*EVERY_EVAL_FULL), data, select_layout(gpus_of("h100x4")), hourly_usd=2.5)
    assert isinstance(est, RunEstimate) and est.total_steps == 518_250 and est.evaluations == 125
    # 0.907 s per 768-row step on one H100 -> each of 4 GPUs runs 192 rows: 192 x 0.907 / 768 s.
    assert est.step_seconds == pytest.approx(192 * 0.907 / 768)
    assert est.step_source.startswith("derived from measured (2026-11-26, 1x NVIDIA H100 80GB HBM3)")
    assert "192 rows per GPU" in est.step_source and "all-reduce is not in it" in est.step_source
    # 368,150 x 1.048 = 385,821 test rows at 4 x 80 rows/s.
    assert est.eval_rows == round(368_150 * 1.048)
    assert est.eval_seconds == pytest.approx(est.eval_rows / 320)
    assert est.eval_source.startswith(
        "derived from measured (2026-11-26, 1x NVIDIA H100 80GB HBM3): 4 GPUs x 80"
    )
    # Upstream: about 3 days on 4xH100; our users: $400-1000 for a full run at $1.5-3.5 per GPU-hour.
    assert 2.5 * 86400 < est.wall_seconds < 3.5 * 86400  # 32.6 h training + 41.9 h evaluation
    assert 400 < est.cost_usd < 1000
    # The recipe as shipped (subset in-run, best 3 in full): 32.6 h + 41.9 h x 15.5 / 125 = 37.8 h.
    shipped = estimate_run(paper_config(), data, select_layout(gpus_of("h100x4")), hourly_usd=2.5)
    assert isinstance(shipped, RunEstimate) and shipped.train_seconds == est.train_seconds
    assert shipped.wall_seconds / 3600 == pytest.approx(37.8, abs=0.05) and shipped.eval_share < 0.14


def test_one_h100_at_the_measured_batch_is_measured_not_derived(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "d", ARC1_TRAIN, ARC1_TEST)
    est = estimate_run(paper_config(), data, select_layout(gpus_of("h100x1")), hourly_usd=None)
    assert isinstance(est, RunEstimate) and est.step_seconds == pytest.approx(0.907)
    assert est.step_source == "measured (2026-11-26, 1x NVIDIA H100 80GB HBM3)"
    assert est.eval_source == "measured (2026-11-26, 1x NVIDIA H100 80GB HBM3): 80 rows/s"


def test_a_deeper_config_of_the_measured_model_scales_by_its_flops(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "d", ARC1_TRAIN, ARC1_TEST)
    layout = select_layout(gpus_of("h100x1"))
    base = estimate_run(paper_config(), data, layout, hourly_usd=None)
    deeper = estimate_run(paper_config("arch.L_cycles=6"), data, layout, hourly_usd=None)
    assert isinstance(base, RunEstimate) and isinstance(deeper, RunEstimate)
    # L_cycles 4 -> 6: each of the H_cycles runs 6 + 1 block passes instead of 4 + 1.
    ratio = deeper.step_seconds / base.step_seconds
    assert 1.2 < ratio < 1.5 and deeper.eval_seconds > base.eval_seconds
    assert deeper.step_source.startswith("derived from measured (2026-11-26, 1x NVIDIA H100 80GB HBM3)")
    assert f"x {ratio:.3g} for this config's FLOPs per row against the measured arc2's" in deeper.step_source


def test_another_workload_on_the_measured_tier_is_an_estimate(tmp_path: Path) -> None:
    # The H100 measurement is arch trm at 916 tokens per row; Sudoku (81 cells) is not that workload.
    data = write_dataset(tmp_path / "d", *recorded_sizes("sudoku-extreme-1k-aug-1000"))
    cfg = compose([*get_recipe("sudoku-att").overrides, "data_paths=[x]"])
    est = estimate_run(cfg, data, select_layout(gpus_of("h100x4")), hourly_usd=None)
    assert isinstance(est, RunEstimate) and est.step_source.startswith("estimate: FLOPs")
    assert est.eval_source.startswith("estimate: FLOPs") and est.eval_rows == 422_786


def test_paper_arc2_run_on_4_h100_is_about_three_days_too(tmp_path: Path) -> None:
    # arc2concept-aug-1000 as `python -m trm data build-arc` writes it (the recipe's dataset, default TASK).
    train = {**ARC1_TRAIN, "num_puzzle_identifiers": 1_191_730, "total_groups": 1280,
             "mean_puzzle_examples": 4.332593232186176, "total_puzzles": 1_191_729}  # fmt: skip
    test = {
        **train,
        "total_groups": 120,
        "mean_puzzle_examples": 1.4346951147634845,
        "total_puzzles": 118_766,
    }
    data = write_dataset(tmp_path / "arc2concept-aug-1000", train, test)
    layout = select_layout(gpus_of("h100x4"))
    # Every evaluation full (the recipe before its subset default): 722,098 x 0.2267 s = 45.5 h of training
    # + 125 x 170,393 rows / 320 rows/s = 18.5 h of evaluation.
    full = estimate_run(
        compose([*get_recipe("arc2").overrides, "data_paths=[x]", "eval_subset.fraction=1.0"]),
        data,
        layout,
        hourly_usd=2.5,
    )
    assert isinstance(full, RunEstimate) and full.total_steps == 722_098 and full.evaluations == 125
    assert full.train_seconds / 3600 == pytest.approx(45.5, abs=0.05)
    assert full.eval_total_seconds / 3600 == pytest.approx(18.5, abs=0.05)
    assert full.eval_share == pytest.approx(18.5 / 64.0, abs=0.002)
    assert full.cost_usd == pytest.approx(639.71, abs=0.01)
    # The recipe: a tenth of the augmentations in-run, the best 3 in full at the end: 125 x 0.1 + 3 = 15.5 full
    # evaluations' work, 2.29 h; 4.8 % of 47.8 h.
    est = estimate_run(
        compose([*get_recipe("arc2").overrides, "data_paths=[x]"]), data, layout, hourly_usd=2.5
    )
    assert isinstance(est, RunEstimate) and est.evaluations == 125
    assert est.train_seconds == full.train_seconds
    assert est.eval_total_seconds == pytest.approx(full.eval_total_seconds * 15.5 / 125, rel=1e-9)
    assert est.eval_share == pytest.approx(0.048, abs=0.001) and est.eval_share <= 0.05
    assert est.cost_usd == pytest.approx(477.75, abs=0.01)


def test_a_measured_step_time_replaces_the_flop_estimate(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "d", ARC1_TRAIN, ARC1_TEST)
    layout = select_layout(gpus_of("h100x4"))
    flops = estimate_run(paper_config(), data, layout, hourly_usd=None)
    measured = estimate_run(paper_config(), data, layout, hourly_usd=None, measured_step_seconds=0.5)
    assert isinstance(flops, RunEstimate) and isinstance(measured, RunEstimate)
    assert measured.step_source == "measured (probe)" and measured.cost_usd is None
    # The evaluations keep the tier's own measurement.
    assert measured.eval_seconds == flops.eval_seconds and measured.eval_source == flops.eval_source
    # On a tier without one they scale with the probe's rate by FLOPs.
    a100 = select_layout(gpus_of("a100-80gx4"))
    by_flops = estimate_run(paper_config(), data, a100, hourly_usd=None)
    probed = estimate_run(paper_config(), data, a100, hourly_usd=None, measured_step_seconds=0.5)
    assert isinstance(by_flops, RunEstimate) and isinstance(probed, RunEstimate)
    assert probed.eval_seconds / 0.5 == pytest.approx(by_flops.eval_seconds / by_flops.step_seconds)
    assert probed.eval_source == "derived from the probe's step time by FLOPs"
    assert "unknown (set GPU_HOURLY_USD" in measured.describe()


def test_max_steps_caps_steps_and_evaluations(tmp_path: Path) -> None:
    cfg = paper_config("max_steps=1000")
    data = write_dataset(tmp_path / "d", ARC1_TRAIN, ARC1_TEST)
    est = estimate_run(cfg, data, select_layout(gpus_of("h100x4")), hourly_usd=2.0)
    assert isinstance(est, RunEstimate) and est.total_steps == 1000 and est.evaluations == 1
    assert evaluations(paper_config("min_eval_interval=100"), 518_250, 518_250) == 25


def test_unknown_without_the_dataset_or_on_cpu(tmp_path: Path) -> None:
    missing = estimate_run(
        paper_config(), tmp_path / "nope", select_layout(gpus_of("h100x4")), hourly_usd=2.0
    )
    assert isinstance(missing, str) and "unknown until" in missing and "is built" in missing
    # A recipe's dataset not built yet: its recorded sizes stand in, and the estimate says so.
    recorded = estimate_run(
        paper_config(), tmp_path / "arc1concept-aug-1000", select_layout(gpus_of("h100x4")), hourly_usd=2.0
    )
    assert isinstance(recorded, RunEstimate) and recorded.total_steps == 518_250
    assert "arc1concept-aug-1000 is not built yet: its recorded sizes stand in" in recorded.describe()
    data = write_dataset(tmp_path / "d", ARC1_TRAIN, ARC1_TEST)
    cpu = estimate_run(paper_config(), data, select_layout([]), hourly_usd=None)
    assert isinstance(cpu, str) and "on CPU" in cpu and "PROBE=1" in cpu


@pytest.mark.e2e  # tens of seconds: out of the default suite, run by make test-e2e
def test_dry_run_prints_expected_time_and_cost(tmp_path: Path) -> None:
    write_dataset(tmp_path / "ws" / "data" / "arc1concept-aug-1000", ARC1_TRAIN, ARC1_TEST)
    proc = dry_run(tmp_path, "h100x4", TASK="arc1", GPU_HOURLY_USD="2.5")
    assert proc.returncode == 0, proc.stderr
    lines = {
        line.split(None, 2)[1]: line for line in proc.stdout.splitlines() if line.startswith("  expected")
    }
    assert (
        "= train " in lines["time"]
        and "+ evaluation " in lines["time"]
        and "% of the hours)" in lines["time"]
    )
    train = next(line for line in proc.stdout.splitlines() if line.startswith("    train "))
    evaluation = next(line for line in proc.stdout.splitlines() if line.startswith("    evaluation "))
    assert "518,250 steps x 0.227 s (derived from measured (2026-11-26, 1x NVIDIA H100 80GB HBM3)" in train
    assert (
        "0 full + 125 subset (10 % of the rows) + 3 full at the end (best.top_k) evaluation(s); a full one: "
        "385,821 rows in"
        in evaluation
        and "80 rows/s per GPU" in evaluation
    )
    assert "at $2.5/GPU-hour x 4 GPU(s) = train $" in lines["cost"] and "+ evaluation $" in lines["cost"]
    # No dataset yet (the default arc2): its recorded sizes stand in, and the dry run says so.
    proc = dry_run(tmp_path, "h100x4")
    assert proc.returncode == 0, proc.stderr
    assert "722,098 steps x" in proc.stdout and "arc2concept-aug-1000 is not built yet" in proc.stdout
    # A dataset neither built nor recorded: the dry run says when the estimate comes.
    proc = dry_run(tmp_path, "h100x4", TASK="arc2-smoke")
    assert proc.returncode == 0, proc.stderr
    assert "expected time     unknown until" in proc.stdout


def test_the_launch_records_the_estimate_for_the_handoff(tmp_path: Path) -> None:
    from trm.launch.launcher.runner import Launch
    from trm.launch.supervision.supervisor import Console

    ws = tmp_path / "ws"
    write_dataset(ws / "data" / "arc1concept-aug-1000", ARC1_TRAIN, ARC1_TEST)
    env = {"WORKSPACE": str(ws), "TASK": "arc1", "GPU_HOURLY_USD": "3"}
    plan = build_plan(LaunchSettings.from_env(env), gpus_of("h100x4"), env)
    plan.settings.launch_dir.mkdir(parents=True)
    launch = Launch(plan, env, Console(plan.settings.launch_dir / "launch.log"))
    hardware = next(s for s in plan.steps() if s.name == "hardware")
    launch.actions.hardware(hardware)
    record = json.loads((plan.settings.launch_dir / "estimate.json").read_text())
    assert record["total_steps"] == 518_250 and record["gpus"] == 4 and record["hourly_usd"] == 3.0
    assert record["cost_usd"] == pytest.approx(record["wall_seconds"] / 3600 * 4 * 3, abs=0.01)
    assert "expected cost" in (plan.settings.launch_dir / "launch.log").read_text()


def test_probe_record_and_a_broken_dataset_json(tmp_path: Path) -> None:
    launch = tmp_path / "launch"
    launch.mkdir()
    assert probe_step_seconds(launch) is None
    attempts = [{"micro_batch_size": 192, "step_seconds": None, "out_of_memory": True},
                {"micro_batch_size": 96, "step_seconds": 0.41}]  # fmt: skip
    (launch / "probe.json").write_text(json.dumps({"chosen_micro_batch_size": 96, "attempts": attempts}))
    assert probe_step_seconds(launch) == 0.41
    broken = {k: v for k, v in ARC1_TRAIN.items() if k != "total_groups"}
    data = write_dataset(tmp_path / "d", broken, ARC1_TEST)
    with pytest.raises(
        TRMError, match=r"train/dataset.json has no 'total_groups'; `python -m trm data verify"
    ):
        estimate_run(paper_config(), data, select_layout(gpus_of("h100x4")), hourly_usd=None)


def test_eval_schedule_reads_the_subset_keys_with_their_defaults() -> None:
    # Absent (today's trainer config, or a run.json config without them): every evaluation is full.
    assert (
        eval_schedule(paper_config(*EVERY_EVAL_FULL))
        == EvalSchedule(fraction=1.0, full_every=0, top_k=0)
        == EvalSchedule()
    )
    assert eval_schedule(paper_config()) == EvalSchedule(fraction=0.1, full_every=0, top_k=3)  # the recipe
    assert eval_schedule({"epochs": 10}) == EvalSchedule()
    # Present, as a dict (run.json) or as config sections (the trainer's dataclasses).
    config = {"eval_subset": {"fraction": 0.1, "full_every": 25}, "best": {"top_k": 3}}
    assert eval_schedule(config) == EvalSchedule(fraction=0.1, full_every=25, top_k=3)
    sections = SimpleNamespace(eval_subset=SimpleNamespace(fraction=0.25, full_every=0), best=None)
    assert eval_schedule(sections) == EvalSchedule(fraction=0.25, full_every=0, top_k=0)
    with pytest.raises(TRMError, match=r"eval_subset.fraction=0 must be in \(0, 1\]"):
        eval_schedule({"eval_subset": {"fraction": 0}})
    with pytest.raises(TRMError, match=r"best.top_k='three' is not a number"):
        eval_schedule({"best": {"top_k": "three"}})


def test_subset_evaluations_cost_their_fraction_and_the_top_k_are_full(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "d", ARC1_TRAIN, ARC1_TEST)
    full = estimate_run(
        paper_config(*EVERY_EVAL_FULL), data, select_layout(gpus_of("h100x4")), hourly_usd=2.5
    )
    assert isinstance(full, RunEstimate)
    assert full.eval_total_seconds == pytest.approx(125 * full.eval_seconds)
    schedule = EvalSchedule(fraction=0.1, full_every=25, top_k=3)
    subset = replace(full, schedule=schedule)
    # 125 in-run: every one scores the subset (10 % of the rows), every 25th also the full set (5), then 3
    # full at the end = 20.5 full ones; the trainer's own count (evaluation_work) says the same.
    assert schedule.counts(125) == (5, 125, 3)
    assert subset.full_evaluations == pytest.approx(5 + 3 + 125 * 0.1)
    cfg = paper_config("eval_subset.fraction=0.1", "eval_subset.full_every=25", "best.top_k=3")
    assert subset.full_evaluations == pytest.approx(evaluation_work(cfg, 125))
    assert subset.eval_total_seconds == pytest.approx(20.5 * full.eval_seconds)
    assert subset.eval_share < full.eval_share and subset.cost_usd < full.cost_usd
    assert "5 full + 125 subset (10 % of the rows) + 3 full at the end (best.top_k)" in subset.describe()
    assert f"({100 * subset.eval_share:.1f} % of the hours)" in subset.describe()
    # No full evaluation in-run (full_every 0); with fraction 1.0 the other keys change nothing.
    assert EvalSchedule(fraction=0.2, full_every=0, top_k=2).counts(10) == (0, 10, 2)
    assert EvalSchedule(fraction=0.2, full_every=5, top_k=2).counts(10) == (2, 10, 2)
    assert EvalSchedule(fraction=1.0, full_every=0, top_k=5).counts(10) == (10, 0, 0)
    record = subset.to_dict()
    assert record["schedule"] == {"fraction": 0.1, "full_every": 25, "top_k": 3}
    assert record["eval_share"] == round(subset.eval_share, 4)


# Sudoku-Extreme 1k x 1000 shuffles (sizes as the builder writes them; one shared puzzle identifier).
SUDOKU_TRAIN = {"seq_len": 81, "vocab_size": 11, "num_puzzle_identifiers": 1, "total_groups": 1000,
                "mean_puzzle_examples": 1001.0, "total_puzzles": 1000}  # fmt: skip
SUDOKU_TEST = {**SUDOKU_TRAIN, "total_groups": 1000, "mean_puzzle_examples": 1.0}


def test_the_depth_curriculum_counts_its_cheaper_steps_and_says_so(tmp_path: Path) -> None:
    from trm.model.registry import model_config
    from trm.training.curriculum import depth_config, run_schedule
    from trm.training.throughput import act_step_flops

    data = write_dataset(tmp_path / "sudoku-extreme-1k-aug-1000", SUDOKU_TRAIN, SUDOKU_TEST)
    layout = select_layout(gpus_of("h100x4"))

    def estimate(recipe: str) -> RunEstimate:
        cfg = compose([*get_recipe(recipe).overrides, "data_paths=[x]"])
        est = estimate_run(cfg, data, layout, hourly_usd=2.5)
        assert isinstance(est, RunEstimate)
        return est

    plain, cgar = estimate("sudoku-mlp"), estimate("sudoku-curriculum")
    assert plain.train_flops_ratio == 1 and "depth curriculum" not in plain.describe()
    # The same full-depth step time and steps; training time at the schedule's mean FLOPs per step: (1, 2)
    # cycles for the first 30 % of the steps, (2, 4) for the next 30 %, then (3, 6).
    assert cgar.step_seconds == plain.step_seconds and cgar.total_steps == plain.total_steps
    cfg = compose([*get_recipe("sudoku-curriculum").overrides, "data_paths=[x]"])
    model = model_config(
        cfg.arch, batch_size=1, seq_len=81, vocab_size=11, num_puzzle_identifiers=1, forward_dtype="bfloat16"
    )
    stages = run_schedule(cfg, cgar.total_steps)
    per_stage = [act_step_flops(depth_config(model, s)).train * (s.last - s.first + 1) for s in stages]
    expected = sum(per_stage) / (act_step_flops(model).train * cgar.total_steps)
    assert cgar.train_flops_ratio == pytest.approx(expected) and 0.55 < expected < 0.65
    assert cgar.train_seconds == pytest.approx(plain.train_seconds * expected)
    assert cgar.eval_seconds == plain.eval_seconds  # evaluation runs at full depth
    train = next(line for line in cgar.describe().splitlines() if line.startswith("  train "))
    assert f"x {expected:.3g} (depth curriculum" in train and "as if step time scaled with FLOPs" in train


def test_with_early_stopping_the_estimate_is_the_whole_schedule_stated_as_an_upper_bound(
    tmp_path: Path,
) -> None:
    data = write_dataset(tmp_path / "d", ARC1_TRAIN, ARC1_TEST)
    layout = select_layout(gpus_of("h100x4"))
    plain = estimate_run(paper_config(), data, layout, hourly_usd=2.5)
    stopping = estimate_run(paper_config("early_stop.patience=5"), data, layout, hourly_usd=2.5)
    assert isinstance(plain, RunEstimate) and isinstance(stopping, RunEstimate)
    # No saving is claimed: the same steps, evaluations, hours and cost; only the wording says "at most".
    assert (stopping.wall_seconds, stopping.cost_usd, stopping.evaluations) == (
        plain.wall_seconds, plain.cost_usd, plain.evaluations,
    )  # fmt: skip
    assert "early stop" not in plain.describe() and plain.to_dict()["early_stop_patience"] == 0
    line = next(x for x in stopping.describe().splitlines() if x.startswith("  early stop"))
    assert "early_stop.patience=5" in line and "upper bound" in line and "may end sooner" in line
    assert stopping.to_dict()["early_stop_patience"] == 5
