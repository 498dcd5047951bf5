"""MAX_HOURS below the expected run: a warning with both figures before anything runs, and in plan.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.launch.cost.test_estimate import ARC1_TEST, ARC1_TRAIN, write_dataset
from tests.launch.host.test_hardware import gpus_of
from tests.launch.plan.test_plan import dry_run
from trm.launch.config.settings import LaunchSettings
from trm.launch.cost.budget import budget_warning
from trm.launch.cost.estimate import RunEstimate
from trm.launch.plan.plan import build_plan
from trm.launch.provider.release import ReleasePolicy

# 40 h of training and 10 h of evaluation on 4 GPUs.
RUN = RunEstimate(
    total_steps=100_000, step_seconds=1.44, step_source="measured (probe)", evaluations=10,
    eval_seconds=3600.0, gpus=4, hourly_usd=2.5,
)  # fmt: skip


def test_no_warning_without_max_hours_or_when_the_run_fits() -> None:
    assert budget_warning(RUN, None, 10, ReleasePolicy()) is None
    assert budget_warning(RUN, 50.5, 10, ReleasePolicy()) is None  # stops at 50.33 h > 50 h


def test_a_budget_below_the_run_says_both_figures_and_what_happens_then() -> None:
    # The stop margin counts: 50.1 h - 10 min = 49.93 h < 50 h.
    kept = budget_warning(RUN, 50.1, 10, ReleasePolicy())
    assert kept is not None and "MAX_HOURS=50.1 is below the expected run time 50.0 h" in kept
    assert "(train 40.0 h + evaluation 10.0 h)" in kept and "stops the trainer at 49.9 h" in kept
    assert "will be cut" not in kept and "set MAX_HOURS >= 51" in kept
    destroy = budget_warning(RUN, 10, 10, ReleasePolicy(on_budget="destroy"))
    assert destroy is not None and "about 20 % of the way" in destroy
    assert "ON_BUDGET=destroy then releases the machine: the run will be cut there, unfinished" in destroy
    assert "resume elsewhere from SYNC_TO" in destroy
    stop = budget_warning(RUN, 10, 10, ReleasePolicy(on_budget="stop"))
    assert stop is not None and "will be cut" in stop and "start the machine again" in stop
    on_end = budget_warning(RUN, 10, 10, ReleasePolicy(on_end="destroy"))
    assert on_end is not None and "ON_END=destroy applies only to a finished run" in on_end


@pytest.mark.e2e  # a dry run and a launch in subprocesses, about 25 s on one core
def test_dry_run_warns_and_the_launch_records_it_in_plan_json(tmp_path: Path) -> None:
    write_dataset(tmp_path / "ws" / "data" / "arc1concept-aug-1000", ARC1_TRAIN, ARC1_TEST)
    proc = dry_run(
        tmp_path, "h100x4", TASK="arc1", MAX_HOURS="10", ON_BUDGET="destroy", SYNC_TO="store:b/runs",
        CONTAINER_ID="4242", CONTAINER_API_KEY="k",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    warning = next(line for line in proc.stdout.splitlines() if "WARNING: MAX_HOURS" in line)
    assert (
        "MAX_HOURS=10 is below the expected run time 37.8 h (train 32.6 h + evaluation 5.2 h)" in warning
        and "will be cut" in warning
    )
    # The warning comes in the hardware step, before the cost guard and anything that runs.
    assert proc.stdout.index("WARNING: MAX_HOURS") < proc.stdout.index("step 4: cost guard")
    assert "WARNING: MAX_HOURS" not in dry_run(tmp_path, "h100x4", TASK="arc1", MAX_HOURS="100").stdout

    from trm.launch.launcher.runner import Launch
    from trm.launch.supervision.supervisor import Console

    env = {"WORKSPACE": str(tmp_path / "ws"), "TASK": "arc1", "MAX_HOURS": "10"}
    plan = build_plan(LaunchSettings.from_env(env), gpus_of("h100x4"), env)
    plan.settings.launch_dir.mkdir(parents=True)
    Launch(plan, env, Console(plan.settings.launch_dir / "launch.log")).write_plan()
    record = json.loads((plan.settings.launch_dir / "plan.json").read_text())
    assert record["budget_warning"].startswith("WARNING: MAX_HOURS=10 is below the expected run time")
