"""What the steps of one launch share: the plan (a step-down or the compile fallback changes it), the
supervisor and its event log, the trainers' environment, and what the steps leave for the end of the
launch (the cost guard, the syncer, the ledger, the exit code)."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import IO

from trm import exit_codes
from trm.io import atomic_write_json
from trm.launch.host.hardware import BatchLayout
from trm.launch.plan.plan import LaunchFailed, LaunchPlan, resume_where
from trm.launch.storage.sync import Syncer
from trm.launch.supervision.ledger import RunLedger
from trm.launch.supervision.stepdown import StepDownRecord
from trm.launch.supervision.supervisor import AttemptResult, Console, CostGuard, EventLog, Supervisor
from trm.runlock import RunLock


class Session:
    """One invocation of the launcher over a resolved plan: the state its steps read and change."""

    def __init__(self, plan: LaunchPlan, environ: dict[str, str], console: Console) -> None:
        self.plan = plan
        self.settings = plan.settings
        self.environ = environ
        self.console = console
        self.events = EventLog(self.settings.launch_dir / "events.jsonl")
        self.supervisor = Supervisor(console, self.events, shutdown_timeout=self.settings.shutdown_timeout)
        self.child_env = {**environ, **plan.env}
        self.session_start = time.time()
        self.guard: CostGuard | None = None
        self.syncer: Syncer | None = None
        self.synced = True
        self.handoff_foreign = False  # ARTIFACTS_DIR/RUN_NAME holds another run's bundle: not uploaded
        self.exit_code = 1
        self.ledger: RunLedger | None = None
        self.trainer_ran = False  # a smoke gate, probe or training torchrun started this session
        self.config = ""  # the configuration's fingerprint, taken before the probe may change the micro-batch
        self.failure: str | None = None  # why the launcher itself failed after admission (not the trainer)
        self.lock: RunLock | None = None  # the run directory's lock (node 0), held for the whole session
        self.step_downs: StepDownRecord | None = None  # the out-of-memory step-downs this session trains with
        self.out_of_memory: str | None = None  # why training ended: out of memory even at micro-batch 1

    def check(self, cmd: list[str], label: str, failure: str, passed_on: tuple[int, ...] = ()) -> None:
        """Run a step's command; a failure stops the launch with CONFIG_ERROR, or with the command's own
        exit code when it is one of `passed_on`."""
        result = self.supervisor.run(
            cmd, env=self.child_env, logs=[self.settings.launch_dir / "launch.log"], label=label
        )
        if self.supervisor.stop_reason:
            raise LaunchFailed(128 + 15, f"stopped during {label} ({self.supervisor.stop_reason})")
        if result.returncode != 0:
            code = result.returncode if result.returncode in passed_on else exit_codes.CONFIG_ERROR
            raise LaunchFailed(code, failure.format(code=result.returncode))

    def torchrun(self, cmd: list[str], log: Path, label: str, stream: IO[str] | None = None) -> AttemptResult:
        """Run one torchrun command line under supervision, its output teed into `log`."""
        exit_dir = self.plan.exit_dir()
        self.trainer_ran = True
        # The lock's descriptor goes with torchrun: a trainer left running after this launcher was killed
        # keeps the run locked, so no second launcher trains beside it.
        keep = (self.lock.inheritable_fd(),) if self.lock is not None else ()
        return self.supervisor.run(
            cmd, env=self.child_env, logs=[log], exit_dir=exit_dir, label=label, stream=stream, pass_fds=keep
        )

    def write_plan(self) -> None:
        """Record the resolved plan in launch/plan.json (read by the handoff)."""
        plan, s = self.plan, self.settings
        atomic_write_json(
            s.launch_dir / "plan.json",
            {
                "run_name": s.run_name,
                "recipe": s.recipe,
                "run_dir": str(s.run_dir),
                "dataset_dir": str(plan.dataset_dir),
                "artifacts_dir": str(s.artifacts_run_dir),
                "hardware": plan.hardware.to_dict(),
                "gpus": [g.to_dict() for g in plan.gpus],
                "overrides": plan.overrides,
                "steps": [step.name for step in plan.steps()],
                "train_command": plan.train_command(),
                "trainer_env": plan.env,
                "resume_command": plan.resume_command(self.environ),
                "resume_where": resume_where(self.environ),
                "restore_command": plan.restore_command(),
                "gpu_hourly_usd": s.gpu_hourly_usd,
                "max_hours": s.max_hours,
                "budget_warning": plan.budget_warning(plan.estimate()),
                "oom_step_down": asdict(self.step_downs) if self.step_downs is not None else None,
                "image_digest": self.environ.get("TRM_IMAGE_DIGEST") or None,
            },
        )

    def train_with(self, layout: BatchLayout) -> None:
        """Train (and smoke-test) with `layout`'s micro-batch from now on."""
        self.plan.hardware = layout
        self.plan.overrides = self.plan.trainer_overrides(micro_batch_size=layout.micro_batch_size)

    def stop_code(self) -> int:
        """75 for a stop asked from outside (SIGTERM: retry), BUDGET_STOPPED for the cost guard's."""
        if self.supervisor.budget_stop:
            self.console.log(
                f"exit {exit_codes.BUDGET_STOPPED}: the MAX_HOURS budget is spent; orchestrators must not "
                "restart this automatically"
            )
            return exit_codes.BUDGET_STOPPED
        return exit_codes.SAVED_RETRY
