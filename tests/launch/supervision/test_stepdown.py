"""The launcher's out-of-memory step-down: exit 80 restarts the trainer with half the micro-batch and twice the
accumulation (global batch kept) from the newest complete checkpoint, down to micro-batch 1; recorded in
launch/oom_step_down.json, plan.json and the handoff. Torchrun is faked here (its attempts' rank exit codes);
tests/launch/launcher/test_runner.py runs it with real torchrun over the fake trainer."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.launch.host.test_hardware import gpus_of
from tests.launch.launcher.test_runner import make_launch, restore_signals  # noqa: F401 (fixture)
from trm import exit_codes
from trm.launch.host.hardware import select_layout
from trm.launch.launcher.runner import Launch
from trm.launch.supervision.admission import record_end
from trm.launch.supervision.out_of_memory import resume_step_down
from trm.launch.supervision.stepdown import STEP_DOWN_FILE, StepDownRecord, apply_record, step_down
from trm.launch.supervision.supervisor import AttemptResult, read_events


def constant_global(layout) -> bool:
    return layout.micro_batch_size * layout.grad_accumulation * layout.world_size == layout.global_batch_size


def test_step_down_halves_the_micro_batch_doubles_the_accumulation_down_to_1():
    layout = select_layout(gpus_of("h100x4"))  # the reference run: 4 x 192, no accumulation
    assert (layout.micro_batch_size, layout.grad_accumulation, layout.global_batch_size) == (192, 1, 768)
    seen, record = [], None
    while (stepped := step_down(layout, record, where="train attempt 1", resumes_from=10, now=0)) is not None:
        layout, record = stepped
        assert constant_global(layout), layout
        seen.append((layout.micro_batch_size, layout.grad_accumulation))
    assert seen == [(96, 2), (48, 4), (24, 8), (12, 16), (6, 32), (3, 64), (1, 192)]
    assert record.planned_micro_batch_size == 192 and record.micro_batch_size == 1
    assert [(s["from"], s["to"]) for s in record.steps][:2] == [(192, 96), (96, 48)]
    assert record.steps[0] == {
        "from": 192, "to": 96, "grad_accumulation": 2, "resumes_from_step": 10, "where": "train attempt 1",
        "utc": "1970-01-01T00:00:00Z",
    }  # fmt: skip
    assert "stepped down to 1 x 192 accumulation (global batch 768 kept)" in layout.notes[-1]


def test_a_per_rank_batch_that_is_not_a_power_of_two_steps_through_its_divisors():
    layout = select_layout(gpus_of("a100-40gx1"), global_batch_size=24)  # one GPU: 24 rows, micro-batch 24
    micros = []
    record = None
    while (stepped := step_down(layout, record, where="w", resumes_from=None)) is not None:
        layout, record = stepped
        micros.append(layout.micro_batch_size)
        assert constant_global(layout)
    assert micros == [12, 6, 3, 1]
    assert (
        record.summary()
        == "micro-batch 24 -> 12 -> 6 -> 3 -> 1 (x1 -> x2 -> x4 -> x8 -> x24 accumulation, global batch 24 kept)"
    )


def test_a_record_applies_to_the_same_plan_only(tmp_path):
    planned = select_layout(gpus_of("h100x1"))  # 192 x 4
    stepped, record = step_down(planned, None, where="train attempt 1", resumes_from=3)
    record.save(tmp_path)
    loaded = StepDownRecord.load(tmp_path)
    assert loaded == record and loaded.mismatch(planned) is None
    again = apply_record(planned, loaded)
    assert (again.micro_batch_size, again.grad_accumulation) == (96, 8) and constant_global(again)
    assert "an earlier attempt ran out of memory: micro-batch 192 -> 96" in again.notes[-1]
    # Other hardware, another world size, another planned micro-batch: not this record's.
    assert "recorded for tier h100-80g" in loaded.mismatch(select_layout(gpus_of("a100-80gx1")))
    assert "world size 1" in loaded.mismatch(select_layout(gpus_of("h100x2")))
    assert "steps down from micro-batch 192; this launch plans 64" in loaded.mismatch(
        select_layout(gpus_of("h100x1"), micro_batch_size=64)
    )
    # A further step-down on the same plan extends it; one from another plan starts a new record.
    _, extended = step_down(stepped, loaded, where="train attempt 2", resumes_from=5)
    assert [s["to"] for s in extended.steps] == [96, 48] and extended.planned_micro_batch_size == 192
    _, fresh = step_down(
        select_layout(gpus_of("a100-80gx1")), loaded, where="train attempt 1", resumes_from=None
    )
    assert fresh.tier == "a100-80g" and [s["to"] for s in fresh.steps] == [96]
    (tmp_path / STEP_DOWN_FILE).write_text("{not json")
    assert StepDownRecord.load(tmp_path) is None


def micro_of(command: list[str]) -> int:
    (micro,) = [int(a.split("=", 1)[1]) for a in command if a.startswith("micro_batch_size=")]
    return micro


def fake_torchrun(launch: Launch, fits: int, *, codes=(exit_codes.OUT_OF_MEMORY, -15)):
    """torchrun whose ranks run out of memory above micro-batch `fits` (every attempt recorded)."""
    attempts: list[tuple[str, int]] = []

    def torchrun(cmd, log, label, stream=None):
        micro = micro_of(cmd)
        attempts.append((label, micro))
        if micro > fits:
            return AttemptResult(1, dict(enumerate(codes)))
        return AttemptResult(0, {0: 0, 1: 0})

    launch.torchrun = torchrun  # type: ignore[method-assign]
    return attempts


def complete(run_dir: Path, *steps: int) -> None:
    for step in steps:
        (run_dir / f"step_{step}").mkdir(parents=True)
        (run_dir / f"step_{step}" / "COMPLETE").write_text(f"{step}\n")


def test_train_steps_down_until_it_fits_and_records_it(tmp_path):
    launch, out = make_launch(tmp_path, "finish")
    s = launch.settings
    assert (launch.plan.hardware.micro_batch_size, launch.plan.hardware.world_size) == (4, 2)
    complete(s.run_dir, 2, 4)
    assert "exit 80 (out of memory) with half the micro-batch" in launch.plan.render(
        launch.environ
    )  # the dry run
    attempts = fake_torchrun(launch, fits=1)
    launch.actions.train(launch.plan.train_step())
    assert launch.exit_code == exit_codes.OK, out.getvalue()
    assert attempts == [("train attempt 1", 4), ("train attempt 2", 2), ("train attempt 3", 1)]
    log = out.getvalue()
    assert (
        "OUT OF MEMORY in train attempt 1 at micro-batch 4: training on with micro-batch 2 x 2 accumulation"
        in log
    )
    assert "restart 1/" not in log  # step-downs are not counted against MAX_RESTARTS
    record = json.loads((s.launch_dir / STEP_DOWN_FILE).read_text())
    assert [(x["from"], x["to"], x["resumes_from_step"], x["where"]) for x in record["steps"]] == [
        (4, 2, 4, "train attempt 1"),
        (2, 1, 4, "train attempt 2"),
    ]
    plan = json.loads((s.launch_dir / "plan.json").read_text())
    hw = plan["hardware"]
    assert (hw["micro_batch_size"], hw["grad_accumulation"], hw["world_size"], hw["global_batch_size"]) == (
        1,
        4,
        2,
        8,
    )
    assert hw["micro_batch_size"] * hw["grad_accumulation"] * hw["world_size"] == hw["global_batch_size"]
    assert "micro_batch_size=1" in plan["overrides"] and "micro_batch_size=1" in plan["train_command"]
    assert plan["oom_step_down"] == record
    events = [e for e in read_events(s.launch_dir / "events.jsonl") if e["event"] == "oom_step_down"]
    assert [(e["from"], e["to"]) for e in events] == [(4, 2), (2, 1)]


def test_out_of_memory_at_micro_batch_1_fails_with_80_and_the_message(tmp_path):
    launch, out = make_launch(tmp_path, "finish", MICRO_BATCH_SIZE="2")
    attempts = fake_torchrun(launch, fits=0, codes=(exit_codes.OUT_OF_MEMORY, 1))
    launch.actions.train(launch.plan.train_step())
    assert launch.exit_code == exit_codes.OUT_OF_MEMORY == 80
    assert [micro for _, micro in attempts] == [2, 1]
    assert re.search(
        r"train attempt 2 ran out of GPU memory even at micro-batch 1 \(exit 80\)", out.getvalue()
    )


def test_a_stop_or_another_node_ends_the_session_at_the_smaller_micro_batch(tmp_path):
    launch, out = make_launch(tmp_path / "stop", "finish")
    fake_torchrun(launch, fits=1)
    launch.supervisor.request_stop("received SIGTERM")
    launch.actions.train(launch.plan.train_step())
    assert launch.exit_code == exit_codes.SAVED_RETRY
    assert "not restarted; the same command resumes at micro-batch 2" in out.getvalue()
    assert StepDownRecord.load(launch.settings.launch_dir).micro_batch_size == 2

    launch, out = make_launch(
        tmp_path / "nodes", "finish", NNODES="2", NODE_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29400"
    )
    assert (launch.plan.hardware.world_size, launch.plan.hardware.micro_batch_size) == (4, 2)
    attempts = fake_torchrun(launch, fits=1)
    launch.actions.train(launch.plan.train_step())
    assert launch.exit_code == exit_codes.OUT_OF_MEMORY and len(attempts) == 1
    assert "a multi-node run restarts as a whole: exiting 80" in out.getvalue()
    assert StepDownRecord.load(launch.settings.launch_dir).micro_batch_size == 1
    record_end(launch)  # not a terminal end: every node's next start trains at micro-batch 1
    assert launch.ledger is None or launch.ledger.end is None


def test_the_smoke_gate_steps_down_too(tmp_path):
    launch, out = make_launch(tmp_path, "finish")
    attempts = fake_torchrun(launch, fits=2)
    launch.actions.smoke_gate(launch.plan.smoke_step())
    assert [(label, micro) for label, micro in attempts] == [
        ("smoke gate", 4),
        ("smoke gate (micro-batch 2)", 2),
    ]
    assert "smoke gate passed" in out.getvalue()
    record = StepDownRecord.load(launch.settings.launch_dir)
    assert record.steps[0]["where"] == "the smoke gate" and record.steps[0]["resumes_from_step"] is None
    assert micro_of(launch.plan.train_command()) == 2  # the long run starts at what the smoke gate fitted


def test_a_later_session_starts_at_the_recorded_micro_batch(tmp_path, restore_signals):  # noqa: F811
    first, _ = make_launch(tmp_path, "finish")
    fake_torchrun(first, fits=2)
    first.actions.train(first.plan.train_step())
    assert first.exit_code == exit_codes.OK

    again, out = make_launch(tmp_path, "finish")  # a restart: the plan says 4 again
    assert again.plan.hardware.micro_batch_size == 4
    resume_step_down(again)
    assert (again.plan.hardware.micro_batch_size, again.plan.hardware.grad_accumulation) == (2, 2)
    assert micro_of(again.plan.train_command()) == 2
    assert (
        "MICRO-BATCH 2: earlier attempts of this run ran out of GPU memory on this hardware" in out.getvalue()
    )

    forced, out = make_launch(tmp_path, "finish", MICRO_BATCH_SIZE="1")  # another plan: not applied
    resume_step_down(forced)
    assert forced.plan.hardware.micro_batch_size == 1 and forced.step_downs is None
    assert "not applied: it steps down from micro-batch 4; this launch plans 1" in out.getvalue()


def test_attempt_outcome_out_of_memory():
    assert AttemptResult(1, {0: 80, 1: -15}).outcome == "out_of_memory"
    assert AttemptResult(1, {0: 80, 1: 1}).outcome == "out_of_memory"  # its peer left the all-reduce
    assert AttemptResult(1, {0: 80, 1: 77}).outcome == "out_of_memory"  # ... or its watchdog fired
    for final in (2, 74, 78):
        assert AttemptResult(1, {0: 80, 1: final}).outcome == "failed"


@pytest.mark.parametrize("record", [None, "stepped"])
def test_the_handoff_carries_the_step_down(tmp_path, record):
    from trm.launch.handoff.handoff import collect, render_info

    run_dir = tmp_path / "run"
    (run_dir / "launch").mkdir(parents=True)
    if record:
        layout = select_layout(gpus_of("h100x1"))
        stepped, rec = step_down(layout, None, where="train attempt 1", resumes_from=1200)
        _, rec = step_down(stepped, rec, where="train attempt 2", resumes_from=None)
        rec.save(run_dir / "launch")
    data = collect(run_dir)
    info = render_info(data)
    if record is None:
        assert data["oom_step_down"] is None and "out of memory:" not in info
        return
    assert data["oom_step_down"]["micro_batch_size"] == 48
    assert (
        "out of memory:  micro-batch 192 -> 96 (train attempt 1, resumed from step 1200) -> 48 (train attempt 2, "
        "resumed from the start); global batch 768 kept"
    ) in info
