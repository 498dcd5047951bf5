"""A launch session's out-of-memory step-downs: it starts at the micro-batch an earlier session of the run
stepped down to, and after an attempt that ran out of GPU memory it trains on with half the micro-batch
(the record and the arithmetic: trm.launch.supervision.stepdown)."""

from __future__ import annotations

from trm import exit_codes
from trm.launch.supervision.session import Session
from trm.launch.supervision.stepdown import (
    STEP_DOWN_FILE,
    StepDownRecord,
    apply_record,
    complete_steps,
    step_down,
)


def resume_step_down(session: Session) -> None:
    """An earlier session of this run ran out of memory on this plan: start at the micro-batch that fit."""
    path = session.settings.launch_dir / STEP_DOWN_FILE
    record = StepDownRecord.load(session.settings.launch_dir)
    if record is None:
        return
    why = record.mismatch(session.plan.hardware)
    if why is not None:
        session.console.log(f"{path} not applied: {why}")
        return
    session.step_downs = record
    session.train_with(apply_record(session.plan.hardware, record))
    session.console.log(
        f"MICRO-BATCH {record.micro_batch_size}: earlier attempts of this run ran out of GPU memory on "
        f"this hardware ({record.summary()}), recorded in {path}; delete that file to try micro-batch "
        f"{record.planned_micro_batch_size} again"
    )


def step_down_after_oom(session: Session, where: str) -> bool:
    """After `where` ran out of memory: train on with half the micro-batch and twice the accumulation,
    recorded (the record, an event, plan.json); False when the micro-batch is already 1."""
    s, micro = session.settings, session.plan.hardware.micro_batch_size
    steps = complete_steps(s.run_dir)
    stepped = step_down(
        session.plan.hardware,
        session.step_downs or StepDownRecord.load(s.launch_dir),
        where=where,
        resumes_from=steps[-1] if steps else None,
    )
    if stepped is None:
        session.out_of_memory = (
            f"{where} ran out of GPU memory even at micro-batch 1 (exit {exit_codes.OUT_OF_MEMORY}): this "
            f"model does not fit {session.plan.hardware.gpu_name}; train on a GPU with more memory"
        )
        return False
    layout, session.step_downs = stepped
    path = session.step_downs.save(s.launch_dir)
    session.events.write("oom_step_down", **session.step_downs.steps[-1])
    session.train_with(layout)
    session.write_plan()
    session.console.log(
        f"OUT OF MEMORY in {where} at micro-batch {micro}: training on with micro-batch "
        f"{layout.micro_batch_size} x {layout.grad_accumulation} accumulation (global batch "
        f"{layout.global_batch_size} kept), from the newest complete checkpoint; recorded in {path}"
    )
    return True


def train_on_after_oom(session: Session, label: str) -> bool:
    """`label` ran out of memory: whether to train on at the smaller micro-batch (else sets exit_code)."""
    if not step_down_after_oom(session, label):
        session.console.log(session.out_of_memory or "")
        session.exit_code = exit_codes.OUT_OF_MEMORY
        return False
    micro = session.plan.hardware.micro_batch_size
    if session.supervisor.stop_reason:
        session.console.log(
            f"stop requested ({session.supervisor.stop_reason}): not restarted; the same command resumes at "
            f"micro-batch {micro}"
        )
        session.exit_code = session.stop_code()
        return False
    if session.settings.nnodes > 1:
        session.console.log(
            f"a multi-node run restarts as a whole: exiting {exit_codes.OUT_OF_MEMORY}; the same command on "
            f"every node resumes from the newest complete checkpoint at micro-batch {micro}"
        )
        session.exit_code = exit_codes.OUT_OF_MEMORY
        return False
    return True
