"""The whole run's expected time and cost: the paper's ARC run against its ~3 days, the dry run's lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.launch.test_hardware import gpus_of
from tests.launch.test_plan import dry_run
from trm.errors import TRMError
from trm.launch.host.hardware import select_layout
from trm.launch.planning.estimate import (
    ASSUMED_MFU,
    RunEstimate,
    estimate_run,
    evaluations,
    probe_step_seconds,
)
from trm.launch.planning.plan import build_plan
from trm.launch.planning.settings import LaunchSettings
from trm.training.config import compose
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


def test_paper_arc_run_on_4_h100_is_about_three_days_and_in_the_users_budget(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "arc1concept-aug-1000", ARC1_TRAIN, ARC1_TEST)
    est = estimate_run(paper_config(), data, select_layout(gpus_of("h100x4")), hourly_usd=2.5)
    assert isinstance(est, RunEstimate)
    assert est.total_steps == 518_250  # TRM_SPEC: 518,226 with the unrounded 4.14597 examples per puzzle
    assert est.evaluations == 125  # epochs 100000 / eval_interval 800
    assert est.step_source == f"estimate: FLOPs at MFU {ASSUMED_MFU:.2f}"
    # Upstream: about 3 days on 4xH100; our users: $400-1000 for a full run at $1.5-3.5 per GPU-hour.
    assert 2.5 * 86400 < est.wall_seconds < 4 * 86400
    assert est.cost_usd == pytest.approx(est.wall_seconds / 3600 * 4 * 2.5)
    assert 400 < est.cost_usd < 1000
    # Training FLOPs per step: 768 rows x 916 positions x (3 x 5 grad passes + 10 no-grad passes) x 2 blocks.
    assert 0.2 < est.step_seconds < 0.35


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
    cfg = compose([*get_recipe("arc2").overrides, "data_paths=[x]"])
    est = estimate_run(cfg, data, select_layout(gpus_of("h100x4")), hourly_usd=2.5)
    assert isinstance(est, RunEstimate) and est.total_steps == 722_098 and est.evaluations == 125
    assert 2.5 * 86400 < est.wall_seconds < 3.5 * 86400  # 70.7 h
    assert 400 < est.cost_usd < 1000  # $707


def test_a_measured_step_time_replaces_the_flop_estimate(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "d", ARC1_TRAIN, ARC1_TEST)
    layout = select_layout(gpus_of("h100x4"))
    flops = estimate_run(paper_config(), data, layout, hourly_usd=None)
    measured = estimate_run(paper_config(), data, layout, hourly_usd=None, measured_step_seconds=0.5)
    assert isinstance(flops, RunEstimate) and isinstance(measured, RunEstimate)
    assert measured.step_source == "measured by the probe" and measured.cost_usd is None
    # Evaluations scale with the measured rate too.
    assert measured.eval_seconds / 0.5 == pytest.approx(flops.eval_seconds / flops.step_seconds)
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
    data = write_dataset(tmp_path / "d", ARC1_TRAIN, ARC1_TEST)
    cpu = estimate_run(paper_config(), data, select_layout([]), hourly_usd=None)
    assert isinstance(cpu, str) and "on CPU" in cpu and "PROBE=1" in cpu


def test_dry_run_prints_expected_time_and_cost(tmp_path: Path) -> None:
    write_dataset(tmp_path / "ws" / "data" / "arc1concept-aug-1000", ARC1_TRAIN, ARC1_TEST)
    proc = dry_run(tmp_path, "h100x4", TASK="arc1", GPU_HOURLY_USD="2.5")
    assert proc.returncode == 0, proc.stderr
    lines = {
        line.split(None, 2)[1]: line for line in proc.stdout.splitlines() if line.startswith("  expected")
    }
    assert "518,250 steps x" in lines["time"] and "(estimate: FLOPs at MFU 0.30)" in lines["time"]
    assert "+ 125 evaluation(s) x" in lines["time"]
    assert "at $2.5/GPU-hour x 4 GPU(s)" in lines["cost"]
    # No dataset yet (the default arc2): the dry run says when the estimate comes.
    proc = dry_run(tmp_path, "h100x4")
    assert proc.returncode == 0, proc.stderr
    assert "expected time     unknown until" in proc.stdout


def test_the_launch_records_the_estimate_for_the_handoff(tmp_path: Path) -> None:
    from trm.launch.running.runner import Launch
    from trm.launch.running.supervisor import Console

    ws = tmp_path / "ws"
    write_dataset(ws / "data" / "arc1concept-aug-1000", ARC1_TRAIN, ARC1_TEST)
    env = {"WORKSPACE": str(ws), "TASK": "arc1", "GPU_HOURLY_USD": "3"}
    plan = build_plan(LaunchSettings.from_env(env), gpus_of("h100x4"), env)
    plan.settings.launch_dir.mkdir(parents=True)
    launch = Launch(plan, env, Console(plan.settings.launch_dir / "launch.log"))
    hardware = next(s for s in plan.steps() if s.name == "hardware")
    launch.hardware(hardware)
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
