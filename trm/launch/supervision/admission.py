"""The run ledger at the two ends of a launch session: whether it may train at all (not when the run's
MAX_HOURS is spent, or it ended with 78 or 2 and the configuration is the same), and the terminal end it
keeps, so that a restart policy does not repeat it (trm.launch.supervision.ledger). Node 0 keeps the ledger."""

from __future__ import annotations

import time

from trm import exit_codes
from trm.launch.supervision.ledger import TERMINAL_ENDS, RunLedger, admit, config_fingerprint
from trm.launch.supervision.session import Session


def admitted(session: Session) -> bool:
    """Whether this launch may train; an admitted session counts in the ledger (node 0)."""
    s = session.settings
    ledger = RunLedger.load(s.launch_dir)
    session.config = config_fingerprint(session.plan.train_command())
    admission = admit(
        ledger,
        max_hours=s.max_hours,
        margin_minutes=s.stop_margin_minutes,
        config=session.config,
        continue_id=s.continue_run,
    )
    for note in admission.notes:
        session.console.log(note)
    if admission.refusal:
        session.console.log(f"run {s.run_name}: {admission.refusal}")
        if s.node_rank == 0:
            ledger.refused_at = time.time()
            ledger.save()
        return False
    if s.node_rank == 0:
        ledger.refused_at = None
        ledger.sessions += 1
        ledger.save()
        session.ledger = ledger
    return True


def record_end(session: Session) -> None:
    """Keep a terminal end in the ledger, so that a restart with the same configuration stops: the
    trainer's 79, 78 or 2, an out-of-memory at micro-batch 1 (80), or a failure of the launcher itself
    after admission (a restart policy would repeat it forever)."""
    ledger = session.ledger
    if ledger is None:
        return
    if session.failure is not None:
        ledger.record_end(session.exit_code, session.config, reason=session.failure)
        ledger.save()
        session.console.log(
            f"recorded in {ledger.path}: a restart with this configuration does not start (id "
            f"{ledger.end['id'] if ledger.end else ''}); fix the cause, then set "
            f"CONTINUE_RUN to that id or change the configuration"
        )
        return
    if session.exit_code == exit_codes.OUT_OF_MEMORY and session.out_of_memory is None:
        return  # a multi-node run's step-down: every node restarts at the smaller micro-batch
    if session.exit_code not in TERMINAL_ENDS:
        return
    if session.exit_code != exit_codes.BUDGET_STOPPED and not session.trainer_ran:
        return  # a preflight or data error: a restart repeats it without training
    ledger.record_end(session.exit_code, session.config)
    ledger.save()
    session.console.log(
        f"recorded in {ledger.path}: a restart with this configuration does not train (id "
        f"{ledger.end['id'] if ledger.end else ''})"
    )
