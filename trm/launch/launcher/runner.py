"""The launch itself: admission, then the steps of `LaunchPlan.steps()` in their order, each running its
own action (preflight -> data -> hardware -> cost guard -> (sync) -> (probe) -> (smoke gate) -> supervised
torchrun; at exit, whatever happened: handoff -> (final sync) -> release)."""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path
from typing import IO

from trm import exit_codes
from trm.errors import TRMError
from trm.launch.config.settings import LaunchSettings
from trm.launch.config.workspace import ensure_writable
from trm.launch.launcher.steps import check_release_ready, data_step, step_actions
from trm.launch.plan.plan import LaunchFailed, LaunchPlan, Step
from trm.launch.plan.resolve import resolve
from trm.launch.supervision.admission import admitted, record_end
from trm.launch.supervision.compile_fallback import stay_eager_if_recorded
from trm.launch.supervision.out_of_memory import resume_step_down
from trm.launch.supervision.probe import run_probe
from trm.launch.supervision.session import Session
from trm.launch.supervision.supervisor import Console
from trm.runlock import HOLDER_ENV, RunLock, RunLocked

# How long a launcher waits for the run's lock held from another host: longer than NFSv4's default lease
# (90 s), after which the server drops the lock of a node that died (trm.runlock).
LOCK_WAIT_OTHER_HOST_S = 120.0


class Launch(Session):
    """One invocation of the launcher over a resolved plan: `run()` takes the run's lock, is admitted by the
    run's ledger, then runs `plan.steps()` in order, the at-exit ones whatever happened before them."""

    def __init__(self, plan: LaunchPlan, environ: dict[str, str], console: Console) -> None:
        super().__init__(plan, environ, console)
        self.actions = step_actions(self)

    def run(self) -> int:
        """Every step of the plan in order; returns the launcher exit code (0, 2, 74-80 or the trainer's).

        A launch the ledger refuses returns 0 at once: nothing runs, nothing is released. A launch whose run
        directory another launcher or trainer owns (trm.runlock) returns CONFIG_ERROR and touches nothing."""
        if not self.take_lock():
            return exit_codes.CONFIG_ERROR
        try:
            return self._run_locked()
        finally:
            if self.lock is not None:
                self.lock.release()

    def take_lock(self) -> bool:
        """Own the run directory (node 0; the other nodes share it on a ReadWriteMany volume) before the
        ledger or anything else is touched; False, with one line on stderr naming the holder, when another
        launcher or trainer owns it."""
        if self.settings.node_rank != 0:
            return True
        try:
            self.lock = RunLock(self.settings.run_dir, "launch").acquire(
                " ".join([sys.executable, *sys.argv]), wait_other_host_s=LOCK_WAIT_OTHER_HOST_S, log=print
            )
        except RunLocked as err:
            print(f"error: {err}", file=sys.stderr)
            return False
        self.child_env[HOLDER_ENV] = str(os.getpid())
        return True

    def _run_locked(self) -> int:
        s = self.settings
        self.session_start = time.time()
        # From here on a stop request (SIGTERM/SIGINT/SIGHUP) reaches whatever runs, and the at-exit steps
        # (handoff, final sync, release) still run.
        self.supervisor.install_signal_handlers()
        if not admitted(self):
            return exit_codes.OK
        resume_step_down(self)
        self.write_plan()
        self._session_started()
        steps = list(enumerate(self.plan.steps(self.actions), 1))
        stay_eager_if_recorded(self)
        try:
            self.console.log(f"run {s.run_name}: {s.run_dir}")
            check_release_ready(self)
            for number, step in steps:
                if not step.at_exit:
                    self._execute(number, step)
        except LaunchFailed as err:
            self.console.log(str(err))
            self.exit_code = err.code
        except TRMError as err:
            self.console.log(f"error: {err}")
            self.exit_code = err.exit_code
        except Exception as err:  # a defect of the launcher itself, recorded below
            self.console.log(
                f"the launcher failed after admission ({type(err).__name__}: {err}); traceback:\n"
                + traceback.format_exc().rstrip()
            )
            self.exit_code = 1
            self.failure = f"the launcher failed after admission ({type(err).__name__}: {err})"
        finally:
            if self.guard is not None:
                self.guard.stop()
                self.console.log(self.guard.cost_line())
            record_end(self)
            self.events.write("session_end", exit_code=self.exit_code, node_rank=self.settings.node_rank)
            for number, step in steps:
                if step.at_exit:
                    self._execute(number, step)
        return self.exit_code

    def _session_started(self) -> None:
        hardware, s = self.plan.hardware, self.settings
        gpus = hardware.world_size if hardware.device == "cuda" else 0
        self.events.write(
            "session_start", gpus=gpus, gpus_per_node=hardware.gpus_per_node,
            hourly_usd=s.gpu_hourly_usd, node_rank=s.node_rank, host=os.uname().nodename,
        )  # fmt: skip

    def _execute(self, number: int, step: Step) -> None:
        self.console.log(f"step {number}: {step.name}")
        if not step.at_exit:  # at-exit steps run after session_end, which stays the session's last event
            self.events.write("step", name=step.name)
        step.run()


def probe_configured_launch(environ: dict[str, str], stream: IO[str]) -> tuple[int, Path]:
    """`select-config --probe`: the data and probe steps of the launch the environment configures.

    Returns the micro-batch that trains and the record (launch/probe.json); raises LaunchFailed."""
    settings = LaunchSettings.from_env(environ)
    plan = resolve(settings, environ)
    ensure_writable(settings)
    session = Session(plan, environ, Console(settings.launch_dir / "launch.log", stream))
    session.supervisor.install_signal_handlers()
    data_step(session, plan.data_step())
    return run_probe(session), settings.launch_dir / "probe.json"
