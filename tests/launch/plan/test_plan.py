from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

import pytest

from tests.helpers import fake_smi_env, trm_in_process
from trm.errors import TRMError
from trm.launch.config.settings import LaunchSettings
from trm.launch.config.variables import ALL_VARS, ENV_VARS, Derived, help_text, markdown_table, read_all
from trm.launch.plan.plan import LAUNCHER_ENV, build_plan, merge_overrides

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "train_prod.sh"
LAUNCH_VARS = [v.name for v in ALL_VARS]


def script_env(tmp_path: Path, shape: str | None, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS and k != "TMUX"}
    env = fake_smi_env(tmp_path, shape, base)
    env.update(PYTHON=sys.executable, WORKSPACE=str(tmp_path / "ws"))
    env.update(extra)
    return env


def dry_run(tmp_path: Path, shape: str | None, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), "--dry-run"],
        env=script_env(tmp_path, shape, **extra),
        capture_output=True,
        text=True,
    )


@pytest.fixture
def dry_run_here(tmp_path, monkeypatch, capsys) -> Callable[..., subprocess.CompletedProcess[str]]:
    """`dry_run` in this process: `python -m trm launch --dry-run` in the environment scripts/train_prod.sh
    gives it (script_env and the script's TRM_LAUNCHER). The script itself runs in the tests that start it
    (test_dry_run_prints_steps_tier_and_torchrun[h100x4], test_script_reports_a_bad_setting_once_and_exits_2,
    test_a_launch_that_fails_before_its_plan_still_hands_off_the_run, test_a_python_without_torch_...)."""

    def run(shape: str | None, **extra: str) -> subprocess.CompletedProcess[str]:
        env = {**script_env(tmp_path, shape, **extra), LAUNCHER_ENV: SCRIPT.relative_to(ROOT).as_posix()}
        return trm_in_process(monkeypatch, capsys, ["launch", "--dry-run"], env)

    return run


def test_defaults_from_an_empty_environment():
    s = LaunchSettings.from_env({})
    assert s.recipe == "arc2" and s.run_name == "trm-arc2"
    assert s.run_dir == Path("/workspace/checkpoints/trm-arc2")
    assert s.artifacts_run_dir == Path("/workspace/artifacts/trm-arc2")
    assert s.checkpoint_keep == 3 and s.smoke_steps == 3 and s.max_restarts == 3
    assert s.max_hours is None and s.wandb == "off" and not s.use_tmux


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TASK": "sudoku"}, "TASK='sudoku' is not a recipe"),
        ({"NUM_GPUS": "four"}, "NUM_GPUS='four' is not an integer"),
        ({"WANDB": "online"}, "needs WANDB_API_KEY"),
        ({"NNODES": "2"}, "needs MASTER_ADDR"),
        ({"MAX_HOURS": "0.1", "STOP_MARGIN_MINUTES": "10"}, "leaves no training time"),
        ({"TRAIN_OVERRIDES": "lr='1"}, "TRAIN_OVERRIDES cannot be split"),
        ({"PROBE": "maybe"}, "PROBE='maybe': use 1 or 0"),
    ],
)
def test_bad_settings_name_the_variable(env, message):
    with pytest.raises(TRMError, match=message):
        LaunchSettings.from_env(env)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        # Before: NaN and infinity passed (every comparison with NaN is False) and crashed the launcher after
        # admission; a negative or zero MAX_HOURS passed too.
        ({"MAX_HOURS": "nan"}, r"^MAX_HOURS='nan' is not a finite number; set e\.g\. MAX_HOURS=2\.5"),
        ({"MAX_HOURS": "inf"}, "^MAX_HOURS='inf' is not a finite number"),
        ({"MAX_HOURS": "-1"}, "^MAX_HOURS=-1 must be > 0"),
        ({"MAX_HOURS": "0"}, "^MAX_HOURS=0 must be > 0"),
        ({"MAX_HOURS": "1e9"}, "^MAX_HOURS=1e\\+09 must be <= 8784"),
        ({"GPU_HOURLY_USD": "NaN"}, "^GPU_HOURLY_USD='NaN' is not a finite number"),
        ({"GPU_HOURLY_USD": "250000"}, "^GPU_HOURLY_USD=250000 must be <= 1000"),
        ({"STOP_MARGIN_MINUTES": "-inf"}, "^STOP_MARGIN_MINUTES='-inf' is not a finite number"),
        ({"COST_LOG_MINUTES": "inf"}, "^COST_LOG_MINUTES='inf' is not a finite number"),
        ({"SYNC_EVERY_MINUTES": "nan"}, "^SYNC_EVERY_MINUTES='nan' is not a finite number"),
        ({"MASTER_PORT": "70000"}, "^MASTER_PORT=70000 must be <= 65535"),
    ],
)
def test_numbers_reject_nan_infinity_and_out_of_range(env, message):
    with pytest.raises(TRMError, match=message) as caught:
        LaunchSettings.from_env(env)
    assert "\n" not in str(caught.value)


def test_a_nan_max_hours_exits_2_with_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("TASK", "RUN_NAME")}
    for value in ("nan", "inf", "-1"):
        proc = subprocess.run(
            [sys.executable, "-m", "trm", "launch", "--dry-run"],
            env={
                **env,
                "MAX_HOURS": value,
                "TASK": "debug-tiny",
                "NUM_GPUS": "0",
                "WORKSPACE": str(tmp_path),
            },
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stderr.strip().count("\n") == 0 and "MAX_HOURS=" in proc.stderr
        assert "Traceback" not in proc.stderr


def test_user_overrides_replace_task_and_table_values():
    assert merge_overrides(["a=1", "+b=2"], ["b=3", "c=4"]) == ["a=1", "b=3", "c=4"]
    settings = LaunchSettings.from_env({"TRAIN_OVERRIDES": "eval_interval=400 compile=false"}, ("lr=3e-4",))
    from tests.helpers import FIXTURES
    from trm.launch.host.nvidia_smi import parse_query_csv

    plan = build_plan(settings, parse_query_csv((FIXTURES / "h100x4" / "query.csv").read_text()), {})
    assert plan.overrides.count("compile=false") == 1 and "compile=true" not in plan.overrides
    assert "eval_interval=400" in plan.overrides and "eval_interval=800" not in plan.overrides
    assert plan.overrides[-1] == "lr=3e-4"
    assert (
        plan.resume_command(
            {"TASK": "arc2", "WANDB_API_KEY": "secret", "TRM_LAUNCHER": "scripts/train_prod.sh"}
        )
        == "TASK=arc2 bash scripts/train_prod.sh lr=3e-4"
    )
    # Started as `python -m trm launch` (the image, which has no scripts/): the bundle says that command.
    image_env = {"TASK": "arc2", "TRM_IMAGE_VARIANT": "sm90", "TRM_IMAGE_CUDA": "13.0"}
    assert plan.resume_command(image_env) == "TASK=arc2 python -m trm launch lr=3e-4"
    smoke = plan.trainer_overrides(checkpoint_path=Path("/x/smoke"), max_steps=3)
    assert "checkpoint_path=/x/smoke" in smoke and f"checkpoint_path={settings.run_dir}" not in smoke


@pytest.mark.parametrize(
    ("shape", "nproc", "tier", "micro", "accum", "through_the_script"),
    [
        ("h100x4", 4, "h100-80g", 192, 1, True),  # bash scripts/train_prod.sh, a process of its own
        ("h200x8", 8, "h200-141g", 96, 1, False),  # the other shapes: the same command in this process
        ("rtx4090x2", 2, "rtx4090-24g", 32, 12, False),
    ],
)
def test_dry_run_prints_steps_tier_and_torchrun(
    tmp_path, dry_run_here, shape, nproc, tier, micro, accum, through_the_script
):
    settings = {"MAX_HOURS": "72", "GPU_HOURLY_USD": "2.49"}
    proc = dry_run(tmp_path, shape, **settings) if through_the_script else dry_run_here(shape, **settings)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    steps = [line for line in out.splitlines() if line.startswith("step ")]
    assert [s.split(": ", 1)[1] for s in steps] == [
        "preflight", "data", "hardware", "cost guard", "smoke gate", "train", "handoff", "release"
    ]  # fmt: skip
    assert "keep the machine (ON_END=keep, ON_BUDGET=keep)" in out
    assert f"tier              {tier}" in out
    assert f"per-rank batch    {768 // nproc} = {accum} accumulation step(s) x micro-batch {micro}" in out
    assert f"global_batch_size=768 micro_batch_size={micro} compile=true device=cuda" in out
    train = [line for line in out.splitlines() if "torch.distributed.run" in line][-1]
    assert f"--standalone --nproc-per-node={nproc}" in train
    assert "-m trm.launch.supervision.worker" in train and "-m trm.train" in train
    assert f"checkpoint_path={tmp_path}/ws/checkpoints/trm-arc2" in train and "max_steps" not in train
    assert "$2.49/GPU-hour" in out
    resume = out.splitlines()[-1]
    assert resume.startswith(f"resume with: WORKSPACE={tmp_path}/ws MAX_HOURS=72 GPU_HOURLY_USD=2.49 PYTHON=")
    assert resume.endswith(" bash scripts/train_prod.sh")
    assert (
        out.splitlines()[-2]
        == "resume in:   the trm-stack checkout and venv that ran it, from the checkout's root"
    )
    assert not (tmp_path / "ws").exists()  # a dry run writes nothing


def test_resume_where_names_the_image_digest_or_asks_for_it():
    from trm.launch.plan.plan import resume_where

    pinned = resume_where({"TRM_IMAGE_VARIANT": "sm90", "TRM_IMAGE_DIGEST": "sha256:" + "a" * 64})
    assert pinned.startswith("inside the trm image sha256:aaaa") and "same volumes" in pinned
    assert "pass -e TRM_IMAGE_DIGEST" in resume_where({"TRM_IMAGE_VARIANT": "sm90"})
    assert "re-apply the same overlay" in resume_where(
        {"TRM_IMAGE_VARIANT": "sm90", "TRM_IMAGE_DIGEST": "sha256:b", "KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    )


def test_dry_run_multi_node_uses_rendezvous_from_env(dry_run_here):
    proc = dry_run_here("h100x8", NNODES="2", NODE_RANK="1", MASTER_ADDR="10.0.0.5", MASTER_PORT="29400")
    assert proc.returncode == 0, proc.stderr
    train = [line for line in proc.stdout.splitlines() if "torch.distributed.run" in line][-1]
    assert "--standalone" not in train
    assert "--nnodes=2 --node-rank=1 --master-addr=10.0.0.5 --master-port=29400 --nproc-per-node=8" in train
    assert "per-rank batch    48 = 1 accumulation step(s) x micro-batch 48" in proc.stdout


def test_dry_run_without_nvidia_smi_refuses_a_production_task(tmp_path):
    proc = dry_run(tmp_path, None)
    assert proc.returncode == 2
    assert "not found on PATH" in proc.stderr and "NUM_GPUS=0" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_dry_run_debug_tiny_recipe(dry_run_here):
    proc = dry_run_here(None, TASK="debug-tiny", CPU_PROCS="2", SMOKE_STEPS="0")
    assert proc.returncode == 0, proc.stderr
    assert "tier              cpu" in proc.stdout and "smoke gate" not in proc.stdout
    assert "--cpu --checkpoint-dir" in proc.stdout
    assert "global_batch_size=8 micro_batch_size=4 compile=false device=cpu" in proc.stdout
    assert "--nproc-per-node=2" in proc.stdout


def test_dry_run_bad_micro_batch_is_a_clean_error(dry_run_here):
    proc = dry_run_here("l40sx4", MICRO_BATCH_SIZE="100")
    assert proc.returncode == 2 and "MICRO_BATCH_SIZE=100 must divide the per-rank batch 192" in proc.stderr


def test_help_lists_every_variable_with_its_default(tmp_path):
    proc = subprocess.run(
        ["bash", str(SCRIPT), "--help"], env=script_env(tmp_path, None), capture_output=True, text=True
    )
    assert proc.returncode == 0
    assert proc.stdout.strip() == help_text().strip()
    for var in ALL_VARS:
        line = next(line for line in proc.stdout.splitlines() if line.strip().startswith(var.name + " "))
        assert f"[{var.default}]" in line


def test_the_docs_document_the_same_variables_and_defaults():
    page = (ROOT / "docs" / "launch.md").read_text()
    section = page.split("\n## Environment\n", 1)[1].split("\n## ", 1)[0]
    for var in ALL_VARS:
        row = next((line for line in section.splitlines() if line.startswith(f"| `{var.name}` |")), None)
        assert row is not None, (
            f"docs/launch.md 'Environment' table lacks {var.name}: regenerate it with python -m trm launch --markdown-env"
        )
        assert f"| {var.default} |" in row, f"docs/launch.md default of {var.name} differs from --help"
    documented = {
        m.group(1) for line in section.splitlines() if (m := re.match(r"\| `([A-Z0-9_]+)` \|", line))
    }
    assert documented == set(LAUNCH_VARS)


def test_the_docs_table_is_the_rendered_declarations():
    page = (ROOT / "docs" / "launch.md").read_text()
    assert markdown_table() in page, (
        "docs/launch.md 'Environment' table: regenerate it with python -m trm launch --markdown-env"
    )


def test_every_variable_fills_a_setting_or_is_read_where_it_is_used():
    """One declaration per variable: each one with a setting names a LaunchSettings field, and every field
    (but the two the launcher composes) comes from one variable."""
    names = {f.name for f in fields(LaunchSettings)}
    settings_of = [var.setting for var in ENV_VARS if var.setting is not None]
    assert len(settings_of) == len(set(settings_of))
    assert set(settings_of) == names - {"cli_overrides", "release"}
    # the others are read where they are used: the release (ON_END, ON_BUDGET, RELEASE_VIA, PRIME_*), the
    # workspace (the default of DATA_DIR, CHECKPOINT_DIR, ARTIFACTS_DIR)
    source = (ROOT / "trm" / "launch" / "provider" / "release.py").read_text()
    for var in ENV_VARS:
        if var.setting is None and var.name.startswith("PRIME_"):
            assert f'"{var.name}"' in source, var.name


def test_the_default_shown_is_the_value_an_unset_variable_gets():
    values = read_all({})
    for var in ENV_VARS:
        shown = var.default
        if isinstance(var.unset, Derived) or shown.startswith(("(", "$")) or var.unset is None:
            continue
        assert var.parse(var.name, shown) == var.unset == values[var.name], var.name
    s = LaunchSettings.from_env({"TASK": "debug-tiny", "WORKSPACE": "/w"})
    assert (s.data_dir, s.run_name, s.wandb_project) == (Path("/w/data"), "trm-debug-tiny", "trm-debug-tiny")
    assert s.release.on_budget == s.release.on_end == "keep"


def test_train_prod_sets_no_default_of_the_launcher():
    """scripts/train_prod.sh picks the interpreter and execs the launcher; every other default is Python's."""
    script = SCRIPT.read_text()
    for var in ENV_VARS:
        if var.name != "PYTHON":
            assert not re.search(rf"\b{var.name}\b", script.split("set -euo pipefail", 1)[1]), var.name
    assert script.rstrip().endswith('exec "${PYTHON:-python}" -m trm launch "$@"')


def test_tmux_session_inherits_the_environment(tmp_path):
    import shutil
    import time

    from trm.launch.supervision.tmux import start_in_tmux, tmux_command

    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    marker = tmp_path / "marker"
    fake = tmp_path / "fake_launch.sh"
    fake.write_text(f'#!/usr/bin/env bash\necho "$TRM_IN_TMUX $SECRET_FOR_TEST $*" > {marker}\n')
    env = script_env(tmp_path, None, RUN_NAME=f"t{os.getpid()}", SECRET_FOR_TEST="s3cret")
    settings = LaunchSettings.from_env(env)
    try:
        text = start_in_tmux(settings, ["bash", str(fake), "lr=1"], env)
        assert f"tmux -L trm-t{os.getpid()} attach -t t{os.getpid()}" in text
        deadline = time.time() + 20
        while not marker.exists() and time.time() < deadline:
            time.sleep(0.1)
        assert marker.read_text().strip() == "1 s3cret lr=1"
        # the secret travelled through the environment, never through the tmux command line
        assert not any("s3cret" in a for a in tmux_command(settings, ["bash", str(fake), "lr=1"]))
    finally:
        subprocess.run(["tmux", "-L", f"trm-t{os.getpid()}", "kill-server"], capture_output=True)


@pytest.mark.parametrize(("inside_tmux", "dry_run"), [(False, False), (True, False), (False, True)])
def test_use_tmux_reruns_this_launch_in_tmux_once(tmp_path, monkeypatch, inside_tmux, dry_run):
    """USE_TMUX=1 outside tmux: the launcher starts `python -m trm launch` with the same arguments in tmux
    and returns; inside the session ($TMUX) and for --dry-run it goes on itself."""
    from trm.commands import main
    from trm.launch.plan import resolve
    from trm.launch.supervision import tmux

    for key, value in script_env(tmp_path, None, TASK="debug-tiny", NUM_GPUS="0", USE_TMUX="1").items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("TMUX", raising=False)
    if inside_tmux:
        monkeypatch.setenv("TMUX", "/tmp/tmux-0/default,1,0")
    started: list[list[str]] = []
    monkeypatch.setattr(
        tmux, "start_in_tmux", lambda settings, command, environ: started.append(command) or ""
    )

    class Ran(Exception):
        pass

    def launched(*args: object, **kwargs: object) -> None:
        raise Ran

    monkeypatch.setattr(resolve, "resolve", launched)
    argv = ["launch", *(["--dry-run"] if dry_run else []), "lr=1"]
    if inside_tmux or dry_run:
        with pytest.raises(Ran):
            main(argv)
        assert started == []
    else:
        assert main(argv) == 0
        assert started == [[sys.executable, "-m", "trm", "launch", "lr=1"]]


def test_a_launch_whose_handoff_would_replace_another_runs_bundle_is_refused_before_anything_runs(
    tmp_path, dry_run_here
):
    """Another run of the same RUN_NAME (another CHECKPOINT_DIR) left its bundle in ARTIFACTS_DIR/RUN_NAME: the
    handoff at exit would be refused after the whole run, so the launch (and its dry run) refuse at the start."""
    artifacts = tmp_path / "ws" / "artifacts" / "r1"
    artifacts.mkdir(parents=True)
    (artifacts / "handoff.json").write_text(json.dumps({"run_dir": str(tmp_path / "elsewhere" / "r1")}))
    proc = dry_run_here(None, TASK="debug-tiny", NUM_GPUS="0", RUN_NAME="r1")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert (
        f"the handoff folder {artifacts}: refusing to replace it: it holds the bundle of another run"
        in proc.stderr
    )
    assert not (tmp_path / "ws" / "checkpoints" / "r1").exists()  # nothing of the run was started
    # Its own earlier bundle (the same run) is no obstacle.
    (artifacts / "handoff.json").write_text(
        json.dumps({"run_dir": str(tmp_path / "ws" / "checkpoints" / "r1")})
    )
    assert dry_run_here(None, TASK="debug-tiny", NUM_GPUS="0", RUN_NAME="r1").returncode == 0


def test_unwritable_workspace_is_a_clean_error(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    env = script_env(tmp_path, None, TASK="debug-tiny", NUM_GPUS="0", WORKSPACE=str(blocker / "ws"))
    proc = trm_in_process(monkeypatch, capsys, ["launch"], env)
    assert proc.returncode == 2 and "cannot write to" in proc.stderr and "set CHECKPOINT_DIR" in proc.stderr


def test_script_reports_a_bad_setting_once_and_exits_2(tmp_path):
    proc = subprocess.run(
        ["bash", str(SCRIPT)], env=script_env(tmp_path, None, TASK="sudoku"), capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.count("TASK='sudoku' is not a recipe") == 1 and "Traceback" not in proc.stderr
    assert proc.stdout == ""  # no run these settings could name: nothing to hand off, nothing else said


def test_dry_run_shows_sync_and_release_after_the_handoff(dry_run_here):
    proc = dry_run_here(
        "h100x4", SYNC_TO="store:bucket/runs", ON_BUDGET="destroy", MAX_HOURS="10",
        CONTAINER_ID="4242", CONTAINER_API_KEY="scoped-key-never-printed",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    steps = [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("step ")]
    assert steps == [
        "preflight", "data", "hardware", "cost guard", "sync", "smoke gate", "train", "handoff", "final sync",
        "release",
    ]  # fmt: skip
    assert (
        "store:bucket/runs/trm-arc2" in out and "python -m trm sync --from store:bucket/runs/trm-arc2" in out
    )
    assert "exit 0 -> keep, exit 79 (MAX_HOURS) -> destroy" in out and "via vast" in out
    assert "the launcher bundles the run" in out and "the launcher copies the run" in out
    assert "scoped-key-never-printed" not in out


def test_probe_of_a_one_step_epoch_recipe_trains_past_the_warm_up(tmp_path):
    """arc2-smoke's epoch is one optimizer step: the probe must still run PROBE_STEPS steps, so that steps
    after WARMUP_STEPS are timed (before, max_steps=4 met a 1-step schedule and nothing was measured)."""
    from tests.helpers import FIXTURES
    from trm.launch.host.nvidia_smi import parse_query_csv
    from trm.launch.supervision.probe import WARMUP_STEPS
    from trm.training.config import compose
    from trm.training.throughput import total_steps

    settings = LaunchSettings.from_env(
        {"TASK": "arc2-smoke", "PROBE_STEPS": "4", "WORKSPACE": str(tmp_path), "NUM_GPUS": "1"}
    )
    plan = build_plan(settings, parse_query_csv((FIXTURES / "h100x4" / "query.csv").read_text()), {})
    cmd = plan.probe_command(plan.hardware.micro_batch_size)
    trainer_args = cmd[cmd.index(plan.trainer_module) + 1 :]
    epochs = int(next(a for a in trainer_args if a.startswith("epochs=")).split("=")[1])
    assert f"eval_interval={epochs}" in trainer_args and "max_steps=4" in trainer_args
    cfg = compose(trainer_args)
    assert cfg.epochs == epochs
    assert cfg.evaluate is False  # the probe times steps; arc2-smoke's evaluation took 183 s on an H100
    # One epoch of arc2-smoke is one step (1.5 global batches of rows, rounded down).
    groups, mean, batch = 768, 1.5, cfg.global_batch_size
    assert total_steps(1, groups, mean, batch) == 1
    assert min(total_steps(cfg.epochs, groups, mean, batch), 4) > WARMUP_STEPS + 1


def test_a_python_without_torch_gets_one_line_not_a_traceback(tmp_path):
    """The laptop rehearsal with no venv activated: the script's Python cannot train; it says what to do."""
    no_torch = tmp_path / "bin" / "python"
    no_torch.parent.mkdir()
    no_torch.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    no_torch.chmod(0o755)  # the same Python without its site-packages: no torch (nor numpy)
    proc = dry_run(tmp_path, "h100x4", PYTHON=str(no_torch))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "has no torch; set PYTHON to the project's venv" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_dry_run_does_not_load_torch(tmp_path):
    """Planning reads configs and torch's version, never torch itself (~2 s of a dry run's ~2.5 s)."""
    probe = (
        "import runpy, sys\n"
        "sys.argv = ['trm', 'launch', '--dry-run']\n"
        "try:\n    runpy.run_module('trm', run_name='__main__')\n"
        "except SystemExit as stop:\n    print('exit', stop.code, 'torch' in sys.modules)\n"
    )
    env = {**script_env(tmp_path, "h100x4"), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert proc.stdout.strip().splitlines()[-1] == "exit 0 False", proc.stdout[-2000:] + proc.stderr


def test_torchrun_command_parses_with_this_torchs_torchrun(tmp_path, monkeypatch, capsys):
    """Every flag we pass is one this torch's torchrun accepts (torch 2.10/2.11 have no --shutdown-timeout
    and exited 2 on it); where the flag is missing, the command drops it, silently: the launcher's stop
    requests go to the ranks, which get SHUTDOWN_TIMEOUT on every torch (tests/launch/supervision/test_supervisor.py)."""
    from torch.distributed.run import get_args_parser

    from trm.launch.plan import plan

    cmd = plan.torchrun_command(
        sys.executable, ["epochs=1"], exit_dir=tmp_path, nproc_per_node=2, shutdown_timeout=300
    )
    assert cmd[1:3] == ["-m", "torch.distributed.run"]
    args = get_args_parser().parse_args(cmd[3:])
    assert args.nproc_per_node == "2" and args.standalone
    # The launcher reads torch's version instead of importing torch: it agrees with this torch's parser.
    parsed = any("--shutdown-timeout" in action.option_strings for action in get_args_parser()._actions)
    assert plan.torchrun_has_shutdown_timeout() == parsed
    if parsed:
        assert args.shutdown_timeout == 300
    monkeypatch.setattr(plan, "torchrun_has_shutdown_timeout", lambda: False)
    old = plan.torchrun_command(
        sys.executable, ["epochs=1"], exit_dir=tmp_path, nproc_per_node=2, shutdown_timeout=120
    )
    assert not any(a.startswith("--shutdown-timeout") for a in old)
    assert old == [a for a in cmd if not a.startswith("--shutdown-timeout")]
    assert capsys.readouterr().err == ""
    assert cmd[cmd.index("trm.launch.supervision.worker") + 1 :][:3] == [
        f"--exit-dir={tmp_path}",
        "--saved-exits-zero",
        "--",
    ]


def test_a_launch_that_fails_before_its_plan_still_hands_off_the_run(tmp_path):
    """A bad setting found while resolving the hardware (a resumed run, MICRO_BATCH_SIZE wrong for this
    host): exit 2 with one error, and the launcher still bundles the run it names."""
    run_dir = tmp_path / "ws" / "checkpoints" / "trm-arc2"
    (run_dir / "launch").mkdir(parents=True)
    (run_dir / "launch" / "launch.log").write_text("an earlier session\n")
    proc = subprocess.run(
        ["bash", str(SCRIPT)], env=script_env(tmp_path, "l40sx4", MICRO_BATCH_SIZE="100"), capture_output=True,
        text=True,
    )  # fmt: skip
    assert proc.returncode == 2 and "MICRO_BATCH_SIZE=100 must divide" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert (tmp_path / "ws" / "artifacts" / "trm-arc2" / "handoff.json").is_file()
    assert "exit 2 before the launch started; handoff bundle:" in proc.stdout


def test_the_probe_of_a_depth_curriculum_runs_at_full_depth(tmp_path):
    """A depth curriculum's first steps are its shallowest: the probe that times steps and sizes the
    micro-batch turns it off, so it measures the run's full-depth steps."""
    from tests.helpers import FIXTURES
    from trm.launch.host.nvidia_smi import parse_query_csv
    from trm.training.config import compose

    query = parse_query_csv((FIXTURES / "h100x4" / "query.csv").read_text())
    for task, probed_ramp in (("sudoku-curriculum", 0.0), ("sudoku-mlp", 0.0)):
        settings = LaunchSettings.from_env({"TASK": task, "WORKSPACE": str(tmp_path / task), "NUM_GPUS": "1"})
        plan = build_plan(settings, query, {})
        cmd = plan.probe_command(plan.hardware.micro_batch_size)
        trainer_args = cmd[cmd.index(plan.trainer_module) + 1 :]
        assert compose(trainer_args).depth_curriculum.ramp == probed_ramp
        run_args = plan.train_command()[plan.train_command().index(plan.trainer_module) + 1 :]
        assert compose(run_args).depth_curriculum.ramp == (0.6 if task == "sudoku-curriculum" else 0.0)
    assert not any(a.startswith("depth_curriculum") for a in trainer_args)  # sudoku-mlp's probe: unchanged


def test_the_preflight_disk_check_counts_the_runs_best_checkpoints(tmp_path):
    """The launcher's preflight needs disk for every best checkpoint the trainer will keep: a subset run
    keeps its best.top_k candidates (TRAIN_ARGS may turn the subset on or off)."""
    from tests.helpers import FIXTURES
    from trm.launch.host.nvidia_smi import parse_query_csv

    query = parse_query_csv((FIXTURES / "h100x4" / "query.csv").read_text())
    for train_args, keep_best in (("", "3"), ("best.top_k=4", "4"), ("eval_subset.fraction=1.0", "1")):
        env = {"TASK": "arc2", "WORKSPACE": str(tmp_path), "NUM_GPUS": "1", "TRAIN_OVERRIDES": train_args}
        plan = build_plan(LaunchSettings.from_env(env), query, {})
        assert f"--keep-best={keep_best}" in plan.preflight_command(), train_args


def test_each_step_runs_its_own_action(tmp_path):
    """A step carries its action (no name -> method lookup): `plan.steps(actions)` binds one `StepActions`
    field to each step, every optional step included; a plan's steps without actions (the dry run's) say
    which step has none when run."""
    from trm.launch.plan.plan import StepActions

    env = {"TASK": "debug-tiny", "NUM_GPUS": "0", "WORKSPACE": str(tmp_path), "SYNC_TO": "s3:b", "PROBE": "1"}
    plan = build_plan(LaunchSettings.from_env(env), [], env)
    ran: list[tuple[str, str]] = []
    actions = StepActions(
        **{f.name: lambda step, f=f.name: ran.append((f, step.name)) for f in fields(StepActions)}
    )
    for step in plan.steps(actions):
        step.run()
    assert ran == [
        ("preflight", "preflight"), ("data", "data"), ("hardware", "hardware"), ("cost_guard", "cost guard"),
        ("sync", "sync"), ("probe", "probe"), ("smoke_gate", "smoke gate"), ("train", "train"),
        ("handoff", "handoff"), ("final_sync", "final sync"), ("release", "release"),
    ]  # fmt: skip
    with pytest.raises(TypeError, match="step 'smoke gate' was planned without its action"):
        plan.smoke_step().run()
