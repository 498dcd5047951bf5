"""The launcher's supervision with real torchrun (2 CPU processes) over a fake trainer."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from trm import exit_codes
from trm.launch.config.settings import LaunchSettings
from trm.launch.launcher.runner import Launch
from trm.launch.plan.plan import build_plan, merge_overrides
from trm.launch.supervision.supervisor import AttemptResult, Console, CostGuard, read_events

ROOT = Path(__file__).resolve().parents[3]
FAKE_DIR = ROOT / "tests" / "fixtures" / "launch"


@pytest.fixture
def restore_signals():
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def make_launch(tmp_path: Path, mode: str, **env: str) -> tuple[Launch, io.StringIO]:
    environ = {
        **{k: v for k, v in os.environ.items() if k not in ("TASK", "RUN_NAME", "MAX_HOURS")},
        "PYTHONPATH": os.pathsep.join([str(FAKE_DIR), str(ROOT)]),
        "FAKE_TRAINER_MODE": mode,
        "TASK": "debug-tiny",
        "NUM_GPUS": "0",
        "CPU_PROCS": "2",
        "WORKSPACE": str(tmp_path / "ws"),
        "PYTHON": sys.executable,
        "SMOKE_STEPS": "2",
        **env,
    }
    settings = LaunchSettings.from_env(environ)
    plan = build_plan(settings, [], environ)
    plan.trainer_module = "fake_trainer"
    plan.dataset_dir.mkdir(parents=True, exist_ok=True)
    plan.verify_command = lambda: [sys.executable, "-c", "print('verified')"]  # type: ignore[method-assign]
    out = io.StringIO()
    return Launch(plan, environ, Console(settings.launch_dir / "launch.log", out)), out


def test_attempt_outcomes():
    assert AttemptResult(0).outcome == "ok"
    assert AttemptResult(1, {0: 75, 1: 75}).outcome == "saved"
    assert AttemptResult(1, {0: 75, 1: 0}).outcome == "saved"
    assert AttemptResult(1, {0: -15, 1: 75}).outcome == "saved"  # killed by torchrun while exiting
    assert AttemptResult(1, {0: -15, 1: 143}).outcome == "failed"  # nobody saved
    assert AttemptResult(1, {0: 75, 1: 1}).outcome == "failed"
    assert AttemptResult(1, {0: -9}).outcome == "failed"
    assert AttemptResult(1, {}).outcome == "failed"
    # The hang watchdog's 77: a rank that failed in a collective its hung peer left, or that ignored
    # torchrun's SIGTERM and was SIGKILLed, is part of the hang; a code that forbids a retry is not.
    assert AttemptResult(1, {0: 77, 1: 77}).outcome == "hung"
    assert AttemptResult(1, {0: 77, 1: -9}).outcome == "hung"
    assert AttemptResult(1, {0: 77, 1: -15, 2: 0}).outcome == "hung"
    assert AttemptResult(1, {0: 1, 1: 77}).outcome == "hung"
    for final in (2, 74, 78):
        assert AttemptResult(1, {0: 77, 1: final}).outcome == "failed"
    assert AttemptResult(1, {0: -9}).outcome == "failed"
    assert AttemptResult(1, {0: 78, 1: -15}).outcome == "failed"


def test_worker_records_and_forwards(tmp_path):
    exit_dir = tmp_path / "codes"
    code = subprocess.call(
        [sys.executable, "-m", "trm.launch.supervision.worker", f"--exit-dir={exit_dir}", "--", sys.executable, "-c",
         "import sys; sys.exit(75)"],
        env={**os.environ, "RANK": "3"},
    )  # fmt: skip
    assert code == 75
    assert json.loads((exit_dir / "rank_3.json").read_text())["exit_code"] == 75
    child = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(75))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trm.launch.supervision.worker",
            f"--exit-dir={exit_dir}",
            "--",
            sys.executable,
            "-c",
            child,
        ],
        env={**os.environ, "RANK": "0"},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 75
    assert json.loads((exit_dir / "rank_0.json").read_text())["exit_code"] == 75


@pytest.mark.slow
@pytest.mark.launch
@pytest.mark.dist
def test_exit_75_restarts_and_the_run_finishes(tmp_path, restore_signals):
    launch, out = make_launch(tmp_path, "exit75-once")
    assert launch.run() == 0, out.getvalue()
    log = out.getvalue()
    assert "smoke gate passed" in log
    assert "trainer saved and exited 75: restart 1/3" in log and "training finished" in log
    run_dir = launch.settings.run_dir
    assert (run_dir / "step_6" / "COMPLETE").exists()
    assert (launch.settings.launch_dir / "smoke" / "step_2" / "COMPLETE").exists()
    train_log = (launch.settings.launch_dir / "train.log").read_text()
    assert train_log.count("===== train attempt") == 2 and "start at step 3" in train_log
    events = [e["event"] for e in read_events(launch.settings.launch_dir / "events.jsonl")]
    assert events[0] == "session_start" and events[-1] == "session_end" and "restart" in events
    plan = json.loads((launch.settings.launch_dir / "plan.json").read_text())
    assert plan["hardware"]["world_size"] == 2 and "resume_command" in plan


@pytest.mark.slow
@pytest.mark.launch
@pytest.mark.dist
def test_cost_guard_stops_then_the_same_command_resumes(tmp_path, restore_signals):
    launch, out = make_launch(
        tmp_path,
        "wait",
        SMOKE_STEPS="0",
        MAX_HOURS="0.004",
        STOP_MARGIN_MINUTES="0",
        GPU_HOURLY_USD="2",
        COST_LOG_MINUTES="0.02",
        FAKE_STEP_SECONDS="0.5",
        PREFLIGHT="0",
    )
    assert launch.run() == exit_codes.BUDGET_STOPPED, out.getvalue()
    log = out.getvalue()
    assert "stop requested (cost guard: MAX_HOURS reached" in log
    assert "trainer saved and stopped" in log and "cost so far $" in log
    saved = max(int(p.name[5:]) for p in launch.settings.run_dir.glob("step_*") if (p / "COMPLETE").exists())
    again, out2 = make_launch(
        tmp_path / "unused", "finish", WORKSPACE=str(tmp_path / "ws"), FAKE_TRAINER_STEPS=str(saved + 2),
        PREFLIGHT="0",
    )  # fmt: skip
    again.plan.verify_command = launch.plan.verify_command  # type: ignore[method-assign]
    assert again.run() == 0, out2.getvalue()
    assert "smoke gate skipped" in out2.getvalue()
    assert (launch.settings.run_dir / f"step_{saved + 2}" / "COMPLETE").exists()
    assert f"start at step {saved}," in (launch.settings.launch_dir / "train.log").read_text()


@pytest.mark.dist
@pytest.mark.e2e
def test_crash_fails_without_restart(tmp_path, restore_signals):
    launch, out = make_launch(tmp_path, "crash", SMOKE_STEPS="0", PREFLIGHT="0")
    code = launch.run()
    assert code == 1
    # Every rank crashes at step 2; whichever exits first, torchrun stops the other (it may leave no code).
    assert "training failed" in out.getvalue(), out.getvalue()
    assert re.search(r"rank exit codes \{[^}]*\b[01]: 1\b", out.getvalue()), out.getvalue()
    assert "restart" not in out.getvalue()


@pytest.mark.dist
@pytest.mark.e2e
def test_a_hang_restarts_from_the_newest_checkpoint(tmp_path, restore_signals):
    """Both ranks block after step 3; their watchdogs dump and exit 77; the launcher restarts, it resumes."""
    launch, out = make_launch(tmp_path, "hang-once", SMOKE_STEPS="0", PREFLIGHT="0", FAKE_STEP_SECONDS="0.05")
    assert launch.run() == 0, out.getvalue()
    log = out.getvalue()
    assert "trainer hung and its watchdog exited 77" in log
    assert "restart 1/3 from the newest complete checkpoint" in log and "training finished" in log
    run_dir = launch.settings.run_dir
    events = read_events(launch.settings.launch_dir / "events.jsonl")
    first = next(e for e in events if e["event"] == "process_end" and e["label"] == "train attempt 1")
    # Whichever rank's watchdog fired first, torchrun then stopped the other one (it may not have hung yet).
    hung = [int(rank) for rank, code in first["rank_codes"].items() if code == exit_codes.HUNG]
    assert first["outcome"] == "hung" and hung, first
    for rank in hung:
        stacks = (run_dir / f"hang_rank{rank}.txt").read_text()
        assert f"rank {rank}" in stacks and "after step 3" in stacks
        assert "block_forever_in_fake_loader" in stacks
    train_log = (launch.settings.launch_dir / "train.log").read_text()
    assert train_log.count("===== train attempt") == 2 and "start at step 3" in train_log
    assert (run_dir / "step_6" / "COMPLETE").exists()
    restarts = [e for e in events if e["event"] == "restart"]
    assert [e["outcome"] for e in restarts] == ["hung"]


@pytest.mark.dist
@pytest.mark.e2e
def test_hang_beyond_max_restarts_exits_77_nonfinite_exits_78(tmp_path, restore_signals):
    launch, out = make_launch(
        tmp_path / "hang", "hang-once", SMOKE_STEPS="0", PREFLIGHT="0", FAKE_STEP_SECONDS="0.05", MAX_RESTARTS="0",
    )  # fmt: skip
    assert launch.run() == exit_codes.HUNG == 77, out.getvalue()
    assert "after 0 restarts (MAX_RESTARTS); giving up" in out.getvalue()
    launch, out = make_launch(tmp_path / "nan", "nonfinite", SMOKE_STEPS="0", PREFLIGHT="0")
    assert launch.run() == exit_codes.NONFINITE == 78, out.getvalue()
    assert "training failed" in out.getvalue() and "restart 1/" not in out.getvalue()


@pytest.mark.parametrize(("preflight_code", "expected"), [(76, exit_codes.NODE_FAULT), (2, 2), (1, 2)])
def test_a_node_fault_found_by_the_preflight_is_the_launchers_exit_code(
    tmp_path, restore_signals, preflight_code, expected
):
    """A Job retries exit 76 on a new pod; every other preflight failure stays a configuration error."""
    launch, out = make_launch(tmp_path, "finish")
    launch.plan.preflight_command = lambda: [sys.executable, "-c", f"import sys; sys.exit({preflight_code})"]  # type: ignore[method-assign]
    assert launch.run() == expected, out.getvalue()
    assert f"preflight failed (exit {preflight_code})" in out.getvalue()
    assert not (launch.settings.launch_dir / "train.log").exists()


def test_failed_verification_never_trains(tmp_path, restore_signals):
    launch, out = make_launch(tmp_path, "finish", PREFLIGHT="0")
    launch.plan.verify_command = lambda: [sys.executable, "-c", "import sys; sys.exit(2)"]  # type: ignore[method-assign]
    assert launch.run() == 2
    assert "failed verification" in out.getvalue() and "rm -rf" in out.getvalue()
    assert not (launch.settings.launch_dir / "train.log").exists()


@pytest.mark.slow
@pytest.mark.launch
@pytest.mark.dist
def test_probe_steps_down_on_out_of_memory(tmp_path, restore_signals):
    launch, out = make_launch(
        tmp_path, "finish", PROBE="1", PROBE_STEPS="5", FAKE_OOM_ABOVE="1", SMOKE_STEPS="0", PREFLIGHT="0",
        FAKE_STEP_SECONDS="0.05", FAKE_TRAINER_STEPS="5",
    )  # fmt: skip
    assert launch.run() == 0, out.getvalue()
    probe = json.loads((launch.settings.launch_dir / "probe.json").read_text())
    assert [a["micro_batch_size"] for a in probe["attempts"]] == [4, 2, 1]
    assert [a["out_of_memory"] for a in probe["attempts"]] == [True, True, False]
    assert probe["chosen_micro_batch_size"] == 1 and probe["table_micro_batch_size"] == 4
    assert probe["attempts"][-1]["step_seconds"] is not None
    assert any("stepped down to 1" in note for note in probe["drift"])
    assert "micro 1" in (launch.settings.launch_dir / "train.log").read_text()


@pytest.mark.dist
@pytest.mark.e2e
def test_out_of_memory_in_training_halves_the_micro_batch_and_resumes_from_the_checkpoint(
    tmp_path, restore_signals
):
    """Both ranks run out of memory at step 3 above micro-batch 1 (exit 80): the launcher restarts at 2, then
    at 1, each time from the step-2 checkpoint, and the run finishes; a later session starts at 1."""
    launch, out = make_launch(
        tmp_path, "finish", SMOKE_STEPS="0", PREFLIGHT="0", FAKE_OOM_ABOVE="1", FAKE_OOM_AT_STEP="3",
        FAKE_STEP_SECONDS="0.05",
    )  # fmt: skip
    planned = launch.plan.hardware
    assert (planned.micro_batch_size, planned.grad_accumulation, planned.world_size) == (4, 1, 2)
    assert launch.run() == 0, out.getvalue()
    s = launch.settings
    train_log = (s.launch_dir / "train.log").read_text()
    assert train_log.count("===== train attempt") == 3
    assert re.findall(r"rank 0: start at step (\d+), mode finish, micro (\d+)", train_log) == [
        ("0", "4"), ("2", "2"), ("2", "1"),
    ]  # fmt: skip
    assert (s.run_dir / "step_6" / "COMPLETE").exists()
    plan = json.loads((s.launch_dir / "plan.json").read_text())
    hw = plan["hardware"]
    assert (hw["micro_batch_size"], hw["grad_accumulation"]) == (1, 4)
    assert hw["micro_batch_size"] * hw["grad_accumulation"] * hw["world_size"] == planned.global_batch_size
    steps = plan["oom_step_down"]["steps"]
    assert [(x["from"], x["to"], x["resumes_from_step"]) for x in steps] == [(4, 2, 2), (2, 1, 2)]
    from trm.launch.handoff.handoff import collect

    assert collect(s.run_dir)["oom_step_down"] == plan["oom_step_down"]
    info = (s.artifacts_run_dir / "run.info").read_text()
    assert "micro-batch 1 x 4 accumulation" in info and "out of memory:  micro-batch 4 -> 2" in info

    again, out2 = make_launch(
        tmp_path / "unused", "finish", WORKSPACE=str(tmp_path / "ws"), SMOKE_STEPS="0", PREFLIGHT="0",
        FAKE_OOM_ABOVE="1", FAKE_STEP_SECONDS="0.05", FAKE_TRAINER_STEPS="8",
    )  # fmt: skip
    assert again.run() == 0, out2.getvalue()
    assert "MICRO-BATCH 1: earlier attempts of this run ran out of GPU memory" in out2.getvalue()
    assert "start at step 6, mode finish, micro 1" in (s.launch_dir / "train.log").read_text()
    assert "OUT OF MEMORY" not in out2.getvalue()


@pytest.mark.slow
@pytest.mark.launch
@pytest.mark.dist
def test_the_real_trainer_out_of_memory_is_stepped_down_and_resumes_from_its_checkpoint(
    tmp_path, restore_signals
):
    """The real trainer (tests/fixtures/launch/oom_trainer.py: torch's OutOfMemoryError at step 3 while the
    micro-batch is above 2) on the real dataset under torchrun: it exits 80 with its one line, the launcher
    restarts it at micro-batch 2 x 2 accumulation and it resumes from its step-2 checkpoint."""
    environ = {
        **{k: v for k, v in os.environ.items() if k not in ("TASK", "RUN_NAME", "MAX_HOURS")},
        "PYTHONPATH": os.pathsep.join([str(FAKE_DIR), str(ROOT)]),
        "TASK": "debug-tiny", "NUM_GPUS": "0", "CPU_PROCS": "2", "WORKSPACE": str(tmp_path / "ws"),
        "PYTHON": sys.executable, "SMOKE_STEPS": "0", "PREFLIGHT": "0",
        "TRAIN_OVERRIDES": "epochs=4 eval_interval=1 evaluate=false checkpoint.every_steps=2",
        "OOM_TRAINER_FITS": "2", "OOM_TRAINER_AT_STEP": "3",
    }  # fmt: skip
    settings = LaunchSettings.from_env(environ)
    plan = build_plan(settings, [], environ)
    plan.trainer_module = "oom_trainer"
    out = io.StringIO()
    launch = Launch(plan, environ, Console(settings.launch_dir / "launch.log", out))
    assert (plan.hardware.micro_batch_size, plan.hardware.grad_accumulation) == (4, 1)
    assert launch.run() == 0, out.getvalue()
    train_log = (settings.launch_dir / "train.log").read_text()
    assert train_log.count("===== train attempt") == 2
    assert (
        "error: CUDA out of memory after step 2 with micro_batch_size=4 (1 accumulation step(s)" in train_log
    )
    first = train_log.split("===== train attempt 2")[0]
    # The trainer's one line, not its traceback (torchrun still prints its own ChildFailedError for exit 80).
    assert "trm/training/loop.py" not in first and "OutOfMemoryError" not in first
    assert f"resumed from {settings.run_dir / 'step_2'} (step 2)" in train_log
    run_json = json.loads((settings.run_dir / "run.json").read_text())
    assert (run_json["micro_batch_size"], run_json["accum_steps"], run_json["world_size"]) == (2, 2, 2)
    assert run_json["resumed_from"] == str(settings.run_dir / "step_2")
    record = json.loads((settings.launch_dir / "oom_step_down.json").read_text())
    assert [(x["from"], x["to"], x["resumes_from_step"]) for x in record["steps"]] == [(4, 2, 2)]


def test_probe_step_time_from_metrics(tmp_path):
    from trm.launch.supervision.probe import step_seconds

    rows = ["step,wall_time,name,value"] + [
        f"{s},{100 + 2 * s + (5 if s == 1 else 0)},train/lm_loss,1" for s in range(1, 8)
    ]
    (tmp_path / "metrics.csv").write_text("\n".join(rows) + "\n")
    seconds, measured = step_seconds(tmp_path / "metrics.csv")
    assert seconds == pytest.approx(2.0) and measured == 4


def test_memory_sampler_keeps_the_peak(tmp_path, monkeypatch):
    from tests.helpers import FIXTURES, install_fake_smi
    from trm.launch.supervision.probe import MemorySampler

    shape = tmp_path / "shape"
    shape.mkdir()
    (shape / "query.csv").write_text((FIXTURES / "h100x2" / "query.csv").read_text())
    (shape / "memory-used.csv").write_text("0, 51234\n1, 49876\n")
    install_fake_smi(monkeypatch, tmp_path, "h100x2")
    monkeypatch.setenv("FAKE_NVIDIA_SMI_DIR", str(shape))
    sampler = MemorySampler(interval_s=0.05)
    sampler.start()
    import time

    time.sleep(0.3)
    assert sampler.stop() == {0: 51234, 1: 49876}


def _step_lines(text: str) -> list[str]:
    """`step N: name` lines, in order, whatever prefix the line has (the launcher's time stamp)."""
    return [m.group(1) for m in re.finditer(r"(?m)(step \d+: [a-z ]+)$", text)]


@pytest.mark.dist
@pytest.mark.e2e
def test_the_run_executes_the_steps_the_dry_run_prints(tmp_path, restore_signals):
    launch, out = make_launch(
        tmp_path, "finish", PROBE="1", PROBE_STEPS="2", MAX_HOURS="1", GPU_HOURLY_USD="1", PREFLIGHT="0",
        FAKE_STEP_SECONDS="0", FAKE_TRAINER_STEPS="3", CPU_PROCS="1",
    )  # fmt: skip
    printed = _step_lines(launch.plan.render(launch.environ))
    assert [line.split(": ", 1)[1] for line in printed] == [
        "preflight", "data", "hardware", "cost guard", "probe", "smoke gate", "train", "handoff", "release"
    ]  # fmt: skip
    assert launch.run() == 0, out.getvalue()
    assert _step_lines((launch.settings.launch_dir / "launch.log").read_text()) == printed
    assert "handoff bundle:" in out.getvalue()
    events = read_events(launch.settings.launch_dir / "events.jsonl")
    assert [e["name"] for e in events if e["event"] == "step"] == [p.split(": ", 1)[1] for p in printed[:-2]]
    assert json.loads((launch.settings.launch_dir / "plan.json").read_text())["steps"][-2:] == [
        "handoff",
        "release",
    ]
    # the commands the dry run prints are the ones the run started (torchrun banners in the logs)
    train_log = (launch.settings.launch_dir / "train.log").read_text()
    assert "===== train attempt 1 started" in train_log and " ".join(launch.plan.train_command()) in train_log


def _train(launch) -> int:
    launch.actions.train(launch.plan.train_step())
    return launch.exit_code


@pytest.mark.parametrize(
    ("budget", "code"), [(True, exit_codes.BUDGET_STOPPED), (False, exit_codes.SAVED_RETRY)]
)
def test_a_budget_stop_exits_with_its_own_code(tmp_path, budget, code):
    """MAX_HOURS must end a Kubernetes Job (exit 79, FailJob); a SIGTERM stop stays 75 (retried)."""
    launch, out = make_launch(tmp_path, "finish")
    launch.supervisor.request_stop("cost guard: MAX_HOURS reached" if budget else "SIGTERM", budget=budget)
    launch.torchrun = lambda *args, **kwargs: AttemptResult(1, {0: 75, 1: 75})  # type: ignore[method-assign]
    assert _train(launch) == code, out.getvalue()
    # Stopped while torchrun was still starting: same distinction.
    launch.torchrun = lambda *args, **kwargs: AttemptResult(-15, {})  # type: ignore[method-assign]
    assert _train(launch) == code


def test_the_cost_guard_marks_its_stop_as_a_budget_stop(tmp_path):
    launch, _out = make_launch(tmp_path, "finish")
    guard = CostGuard(
        launch.supervisor, session_start=0.0, deadline=10.0, num_gpus=1, hourly_usd=None, log_every_s=60,
        clock=lambda: 11.0,
    )  # fmt: skip
    guard.run()  # returns once it has asked for the stop
    assert launch.supervisor.budget_stop and "MAX_HOURS reached" in (launch.supervisor.stop_reason or "")
    launch.supervisor.request_stop("SIGTERM")  # a later request does not change the first one's kind
    assert launch.supervisor.budget_stop


def test_a_trainer_disk_full_is_the_launchers_exit_code(tmp_path):
    """torchrun exits 1 whatever its child's code; a Job must still see 74 to stop retrying."""
    launch, out = make_launch(tmp_path, "finish")
    launch.torchrun = lambda *args, **kwargs: AttemptResult(1, {0: 74, 1: -15})  # type: ignore[method-assign]
    assert _train(launch) == exit_codes.DISK_FULL, out.getvalue()
    launch.torchrun = lambda *args, **kwargs: AttemptResult(1, {0: 1, 1: -15})  # type: ignore[method-assign]
    assert _train(launch) == 1


@pytest.mark.parametrize("smoke_steps", ["0", "2"])
@pytest.mark.parametrize("code", [exit_codes.CONFIG_ERROR, exit_codes.NONFINITE])
def test_a_trainers_terminal_code_ends_the_launch_and_a_restart_does_not_train(
    tmp_path, restore_signals, smoke_steps, code
):
    """torchrun exits 1 for a trainer's 2 or 78, in training or in the smoke gate; the launcher must exit
    with the trainer's code (a Job's podFailurePolicy fails on it at once) and keep it in the ledger, so that
    a restart policy's next launch with the same configuration exits 0 without training."""
    calls: list[str] = []

    def failing_trainer(launch: Launch) -> None:
        def torchrun(cmd: object, log: Path, label: str, stream: object = None) -> AttemptResult:
            launch.trainer_ran = True
            calls.append(label)
            return AttemptResult(1, {0: code, 1: -15})

        launch.torchrun = torchrun  # type: ignore[method-assign]

    env = {"PREFLIGHT": "0", "SMOKE_STEPS": smoke_steps}
    launch, out = make_launch(tmp_path, "finish", **env)
    failing_trainer(launch)
    assert launch.run() == code, out.getvalue()
    assert calls == ["smoke gate" if smoke_steps != "0" else "train attempt 1"]
    ledger = json.loads((launch.settings.launch_dir / "ledger.json").read_text())
    assert ledger["end"]["exit_code"] == code, ledger
    again, out = make_launch(tmp_path, "finish", **env)
    failing_trainer(again)
    assert again.run() == exit_codes.OK, out.getvalue()
    assert len(calls) == 1 and "does not train again" in out.getvalue()


def _compiling(launch: Launch) -> Launch:
    """The hardware tier turns compile on (as every GPU tier does); the CPU test plan does not."""
    import dataclasses

    launch.plan.hardware = dataclasses.replace(launch.plan.hardware, compile=True)
    launch.plan.overrides = merge_overrides(launch.plan.overrides, ["compile=true"])
    return launch


@pytest.mark.dist
@pytest.mark.e2e
def test_a_compile_failure_in_the_smoke_gate_trains_eager_and_stays_eager(tmp_path, restore_signals):
    """compile=auto: the smoke gate's torch.compile failure falls back to eager with one loud line and a
    record; a restart of the run stays eager. Before, the launch failed at the smoke gate."""
    launch, out = make_launch(tmp_path, "compile-fails", PREFLIGHT="0")
    assert _compiling(launch).run() == 0, out.getvalue()
    log = out.getvalue()
    (line,) = [x for x in log.splitlines() if "COMPILE OFF" in x]
    assert "InductorError" in line and "ptxas fatal" in line and "trains EAGER" in line
    assert "smoke gate passed" in log and "training finished" in log
    launch_dir = launch.settings.launch_dir
    record = json.loads((launch_dir / "compile_fallback.json").read_text())
    assert record["compile"] is False and "ptxas" in record["reason"]
    assert "compile=false" in json.loads((launch_dir / "plan.json").read_text())["overrides"]
    assert "compile_fallback" in [e["event"] for e in read_events(launch_dir / "events.jsonl")]
    from trm.launch.handoff.handoff import collect

    assert collect(launch.settings.run_dir)["compile_fallback"]["reason"] == record["reason"]
    again, out2 = make_launch(
        tmp_path / "unused",
        "compile-fails",
        WORKSPACE=str(tmp_path / "ws"),
        FAKE_TRAINER_STEPS="8",
        PREFLIGHT="0",
    )
    again.plan.verify_command = launch.plan.verify_command  # type: ignore[method-assign]
    assert _compiling(again).run() == 0, out2.getvalue()
    assert "COMPILE OFF" in out2.getvalue() and "smoke gate skipped" in out2.getvalue()
    assert (launch.settings.run_dir / "step_8" / "COMPLETE").exists()


@pytest.mark.dist
@pytest.mark.e2e
def test_a_compile_failure_with_compile_asked_for_fails_the_smoke_gate(tmp_path, restore_signals):
    launch, out = make_launch(tmp_path, "compile-fails", PREFLIGHT="0", COMPILE="true")
    assert launch.plan.hardware.compile
    assert launch.run() == 1, out.getvalue()
    assert "smoke gate failed" in out.getvalue() and "COMPILE OFF" not in out.getvalue()
    assert not (launch.settings.launch_dir / "compile_fallback.json").exists()


def test_compile_failure_reads_the_error_line_only():
    from trm.compile_setting import compile_failure

    assert compile_failure("step 1\nFile torch/_dynamo/eval_frame.py, line 3\nok\n") is None
    text = "x\ntorch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\nRuntimeError: boom\n"
    assert compile_failure(text) == "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:"
    assert compile_failure("torch.OutOfMemoryError: CUDA out of memory") is None
