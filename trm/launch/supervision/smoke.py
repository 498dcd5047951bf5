"""The smoke gate: a few steps of the real configuration in a scratch directory before the long run (fresh
runs only). Out of memory steps the micro-batch down and tries again; a torch.compile failure (compile from
the hardware tier) falls back to eager once; any other failure stops the launch, which would fail the same
way."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

from trm import exit_codes
from trm.launch.plan.plan import LaunchFailed, Step
from trm.launch.supervision.compile_fallback import fall_back_to_eager, fallback_reason
from trm.launch.supervision.out_of_memory import step_down_after_oom
from trm.launch.supervision.session import Session
from trm.launch.supervision.stepdown import has_complete_checkpoint
from trm.launch.supervision.supervisor import AttemptResult
from trm.safe_remove import remove_own_temp


def smoke_gate(session: Session, step: Step) -> None:
    """A few steps of the real config in a scratch directory (fresh runs only)."""
    s, plan = session.settings, session.plan
    if has_complete_checkpoint(s.run_dir):
        session.console.log("smoke gate skipped: the run already has a complete checkpoint (resuming)")
        return
    remove_own_temp(plan.smoke_dir())
    session.console.log(f"smoke gate: {s.smoke_steps} steps of the real config")
    (command,) = step.commands
    result = session.torchrun(command, s.launch_dir / "smoke.log", "smoke gate")
    _stopped(session)
    while result.outcome == "out_of_memory" and step_down_after_oom(session, "the smoke gate"):
        remove_own_temp(plan.smoke_dir())
        (command,) = step.commands  # made again: the plan now has the smaller micro-batch
        label = f"smoke gate (micro-batch {plan.hardware.micro_batch_size})"
        result = session.torchrun(command, s.launch_dir / "smoke.log", label)
        _stopped(session)
    if session.out_of_memory is not None:
        raise LaunchFailed(exit_codes.OUT_OF_MEMORY, session.out_of_memory)
    if result.returncode != 0:
        reason = fallback_reason(session, s.launch_dir / "smoke.log")
        if reason is None:
            _failed(result, s.launch_dir / "smoke.log")
        fall_back_to_eager(session, reason)
        remove_own_temp(plan.smoke_dir())
        (command,) = step.commands  # made again: the plan now says compile=false
        result = session.torchrun(command, s.launch_dir / "smoke-eager.log", "smoke gate (eager)")
        _stopped(session)
        if result.returncode != 0:
            _failed(result, s.launch_dir / "smoke-eager.log")
    session.console.log("smoke gate passed")


def _stopped(session: Session) -> None:
    if session.supervisor.stop_reason:
        raise LaunchFailed(128 + 15, f"stopped during the smoke gate ({session.supervisor.stop_reason})")


def _failed(result: AttemptResult, log: Path) -> NoReturn:
    raise LaunchFailed(
        result.failure_code,
        f"smoke gate failed (exit {result.returncode}, ranks {result.rank_codes}): the long run would "
        f"fail the same way; see {log}",
    )
