"""The train step: torchrun of the run under supervision, restarted from the newest complete checkpoint on
exit 75 (saved) or 77 (hung) without a stop request, at most MAX_RESTARTS times, and on exit 80 (out of
memory) with half the micro-batch (not counted); a multi-node run restarts as a whole instead."""

from __future__ import annotations

from trm import exit_codes
from trm.launch.plan.plan import Step
from trm.launch.supervision.out_of_memory import train_on_after_oom
from trm.launch.supervision.session import Session
from trm.launch.supervision.supervisor import AttemptResult


def train(session: Session, step: Step) -> None:
    """torchrun under supervision; exit 75 or 77 without a stop request restarts from the newest
    complete checkpoint (at most MAX_RESTARTS restarts in all), exit 80 with half the micro-batch (down
    to 1; not counted). Sets exit_code."""
    s = session.settings
    restarts = attempt = 0
    while True:
        attempt += 1
        label = f"train attempt {attempt}"
        (command,) = step.commands
        session.console.log(f"{label}: {' '.join(command)}")
        result = session.torchrun(command, s.launch_dir / "train.log", label)
        if result.outcome == "ok":
            session.console.log("training finished")
            session.exit_code = exit_codes.OK
            return
        if result.outcome == "out_of_memory":
            if train_on_after_oom(session, label):
                continue
            return
        if result.outcome in ("saved", "hung"):
            if _restart(session, result, restarts):
                restarts += 1
                continue
            return
        if session.supervisor.stop_reason and not result.rank_codes and result.returncode == -15:
            # The stop arrived while torchrun was starting, before any trainer ran: nothing was lost.
            session.console.log("stopped before the trainer started; the same command resumes")
            session.exit_code = session.stop_code()
            return
        session.console.log(
            f"training failed (torchrun exit {result.returncode}, rank exit codes {result.rank_codes}); "
            f"see {s.launch_dir / 'train.log'}. Fix the cause and rerun the same command to resume."
        )
        session.exit_code = result.failure_code
        return


def _restart(session: Session, result: AttemptResult, restarts: int) -> bool:
    """The trainer saved (75) or hung (77): whether to restart it (restart `restarts + 1`), else sets
    exit_code."""
    s = session.settings
    what = (
        "trainer saved and exited 75"
        if result.outcome == "saved"
        else f"trainer hung and its watchdog exited {exit_codes.HUNG} (thread stacks: "
        f"{s.run_dir / 'hang_rank*.txt'})"
    )
    code = exit_codes.SAVED_RETRY if result.outcome == "saved" else exit_codes.HUNG
    if session.supervisor.stop_reason and result.outcome == "saved":
        session.console.log(
            f"trainer saved and stopped ({session.supervisor.stop_reason}); the same command resumes"
        )
        session.exit_code = session.stop_code()
        return False
    if session.supervisor.stop_reason:  # hung while a stop was asked: nothing saved, not restarted
        session.console.log(f"{what}; stop requested ({session.supervisor.stop_reason}): not restarted")
        session.exit_code = code
        return False
    if s.nnodes > 1:
        # Another node's stop (an evicted pod) or hang ended every rank; a restart here alone would
        # wait at the rendezvous for nodes that are not coming back: the run restarts as a whole.
        session.console.log(
            f"{what} (node {s.node_rank} of {s.nnodes}: the stop or hang may have come from another "
            f"node); a multi-node run restarts as a whole: exiting {code}, the same command on every "
            "node resumes from the newest complete checkpoint"
        )
        session.exit_code = code
        return False
    if restarts < s.max_restarts:
        session.console.log(
            f"{what}: restart {restarts + 1}/{s.max_restarts} from the newest complete checkpoint"
        )
        session.events.write("restart", restart=restarts + 1, outcome=result.outcome)
        return True
    session.console.log(f"{what} after {restarts} restarts (MAX_RESTARTS); giving up")
    session.exit_code = code
    return False
