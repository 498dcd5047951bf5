"""The launch itself: preflight -> data -> hardware -> (probe) -> smoke gate -> supervised torchrun."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import IO

from trm import exit_codes
from trm.errors import TRMError
from trm.io import atomic_write_json
from trm.launch.nvidia_smi import GpuInfo, NvidiaSmiMissing, Runner, query_gpus
from trm.launch.plan import LaunchPlan, build_plan, resume_where
from trm.launch.settings import LaunchSettings
from trm.launch.supervisor import AttemptResult, Console, CostGuard, EventLog, Supervisor

DATA_WAIT_S = 3600.0  # how long nodes other than 0 wait for node 0's dataset
PRODUCTION_TASKS = ("arc1", "arc2")


class LaunchFailed(Exception):
    """A step failed; `code` becomes the launcher's exit code (the message is already logged)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def detect_gpus(settings: LaunchSettings, runner: Runner | None = None) -> list[GpuInfo]:
    """GPUs from nvidia-smi; none when NUM_GPUS=0. Production tasks never fall back to CPU silently."""
    if settings.num_gpus == 0:
        return []
    try:
        return query_gpus(runner)
    except NvidiaSmiMissing as err:
        if settings.num_gpus or settings.task in PRODUCTION_TASKS:
            raise TRMError(
                f"{err}. TASK={settings.task} needs GPUs; to train on CPU on purpose set NUM_GPUS=0 "
                "(TASK=cpu-tiny is the CPU-sized run)"
            ) from None
        return []


def has_complete_checkpoint(run_dir: Path) -> bool:
    """Whether `run_dir` holds a `step_N/` with its COMPLETE marker."""
    return any((d / "COMPLETE").exists() for d in run_dir.glob("step_*") if d.is_dir())


def resolve(settings: LaunchSettings, environ: dict[str, str], runner: Runner | None = None) -> LaunchPlan:
    """Detect hardware and build the plan (used by the dry run and the real launch)."""
    return build_plan(settings, detect_gpus(settings, runner), environ)


class Launch:
    """One invocation of the launcher over a resolved plan."""

    def __init__(self, plan: LaunchPlan, environ: dict[str, str], console: Console) -> None:
        self.plan = plan
        self.s = plan.settings
        self.environ = environ
        self.console = console
        self.events = EventLog(self.s.launch_dir / "events.jsonl")
        self.supervisor = Supervisor(console, self.events)
        self.child_env = {**environ, **plan.env}
        self.exit_dir = self.s.launch_dir / "exit_codes"

    # -- helpers ---------------------------------------------------------------------------------
    def _check(self, cmd: list[str], label: str, failure: str) -> None:
        result = self.supervisor.run(
            cmd, env=self.child_env, logs=[self.s.launch_dir / "launch.log"], label=label
        )
        if self.supervisor.stop_reason:
            raise LaunchFailed(128 + 15, f"stopped during {label} ({self.supervisor.stop_reason})")
        if result.returncode != 0:
            raise LaunchFailed(exit_codes.CONFIG_ERROR, failure.format(code=result.returncode))

    def _torchrun(
        self, overrides: list[str], log: Path, label: str, stream: IO[str] | None = None
    ) -> AttemptResult:
        cmd = self.plan.torchrun(overrides, exit_dir=self.exit_dir)
        return self.supervisor.run(
            cmd, env=self.child_env, logs=[log], exit_dir=self.exit_dir, label=label, stream=stream
        )

    # -- steps -----------------------------------------------------------------------------------
    def write_plan(self) -> None:
        """Record the resolved plan in launch/plan.json (read by the handoff)."""
        plan = self.plan
        atomic_write_json(
            self.s.launch_dir / "plan.json",
            {
                "run_name": self.s.run_name,
                "task": self.s.task,
                "run_dir": str(self.s.run_dir),
                "dataset_dir": str(plan.dataset_dir),
                "artifacts_dir": str(self.s.artifacts_run_dir),
                "hardware": plan.hardware.to_dict(),
                "gpus": [g.to_dict() for g in plan.gpus],
                "overrides": plan.overrides,
                "train_command": plan.torchrun(plan.trainer_overrides(), exit_dir=self.exit_dir),
                "trainer_env": plan.env,
                "resume_command": plan.resume_command(self.environ),
                "resume_where": resume_where(self.environ),
                "gpu_hourly_usd": self.s.gpu_hourly_usd,
                "max_hours": self.s.max_hours,
                "image_digest": self.environ.get("TRM_IMAGE_DIGEST") or None,
            },
        )

    def preflight(self) -> None:
        """Step 1: the host checks; any failure stops the launch."""
        if not self.s.preflight:
            self.console.log("PREFLIGHT=0: preflight checks SKIPPED")
            return
        self._check(
            self.plan.preflight_command(),
            "preflight",
            "preflight failed (exit {code}); the fix for each failed check is printed above",
        )

    def data(self) -> None:
        """Step 2: build the dataset if missing (node 0), then verify it."""
        d = self.plan.dataset_dir
        if not d.exists():
            if self.s.node_rank == 0:
                self.console.log(f"dataset {d} is missing: building it")
                self._check(
                    self.plan.build_command(),
                    "data build",
                    f"building {d} failed (exit {{code}}); see launch/launch.log, fix the cause and rerun",
                )
            else:
                self._wait_for_dataset(d)
        self._check(
            self.plan.verify_command(),
            "data verify",
            f"dataset {d} failed verification (exit {{code}}); never train on it: remove it (rm -rf {d}) "
            "and rerun to rebuild",
        )
        self.console.log(f"dataset {d} verified")

    def _wait_for_dataset(self, d: Path) -> None:
        deadline = time.time() + DATA_WAIT_S
        self.console.log(f"node {self.s.node_rank}: waiting for node 0 to build {d}")
        while not d.exists():
            if self.supervisor.stop_reason:
                raise LaunchFailed(128 + 15, "stopped while waiting for the dataset")
            if time.time() > deadline:
                raise LaunchFailed(
                    exit_codes.CONFIG_ERROR,
                    f"{d} did not appear within {DATA_WAIT_S / 60:.0f} min; DATA_DIR must be a volume shared by "
                    "every node (ReadWriteMany), and node 0 must be running",
                )
            time.sleep(10)

    def probe(self) -> None:
        """Optional: measure the micro-batch on the real GPUs and use what fits."""
        from trm.launch.probe import run_probe

        micro = run_probe(self)
        if micro != self.plan.hardware.micro_batch_size:
            self.plan.overrides = self.plan.trainer_overrides(micro_batch_size=micro)
            self.console.log(f"probe: training with micro-batch {micro}")

    def smoke(self) -> None:
        """Step 4: a few steps of the real config in a scratch directory (fresh runs only)."""
        if self.s.smoke_steps <= 0:
            return
        if has_complete_checkpoint(self.s.run_dir):
            self.console.log("smoke gate skipped: the run already has a complete checkpoint (resuming)")
            return
        smoke_dir = self.s.launch_dir / "smoke"
        shutil.rmtree(smoke_dir, ignore_errors=True)
        self.console.log(f"smoke gate: {self.s.smoke_steps} steps of the real config")
        result = self._torchrun(
            self.plan.trainer_overrides(checkpoint_path=smoke_dir, max_steps=self.s.smoke_steps),
            self.s.launch_dir / "smoke.log",
            "smoke gate",
        )
        if self.supervisor.stop_reason:
            raise LaunchFailed(128 + 15, f"stopped during the smoke gate ({self.supervisor.stop_reason})")
        if result.returncode != 0:
            raise LaunchFailed(
                result.returncode if result.returncode > 0 else 1,
                f"smoke gate failed (exit {result.returncode}, ranks {result.rank_codes}): the long run would "
                f"fail the same way; see {self.s.launch_dir / 'smoke.log'}",
            )
        self.console.log("smoke gate passed")

    def train(self) -> int:
        """Step 5: torchrun under supervision; exit 75 without a stop request restarts (bounded)."""
        restarts = 0
        while True:
            label = f"train attempt {restarts + 1}"
            self.console.log(
                f"{label}: {' '.join(self.plan.torchrun(self.plan.trainer_overrides(), exit_dir=self.exit_dir))}"
            )
            result = self._torchrun(self.plan.trainer_overrides(), self.s.launch_dir / "train.log", label)
            if result.outcome == "ok":
                self.console.log("training finished")
                return exit_codes.OK
            if result.outcome == "saved":
                if self.supervisor.stop_reason:
                    self.console.log(
                        f"trainer saved and stopped ({self.supervisor.stop_reason}); the same command resumes"
                    )
                    return exit_codes.SAVED_RETRY
                if restarts < self.s.max_restarts:
                    restarts += 1
                    self.console.log(f"trainer saved and exited 75: restart {restarts}/{self.s.max_restarts}")
                    self.events.write("restart", restart=restarts)
                    continue
                self.console.log(
                    f"trainer exited 75 again after {restarts} restarts (MAX_RESTARTS); giving up"
                )
                return exit_codes.SAVED_RETRY
            if self.supervisor.stop_reason and not result.rank_codes and result.returncode == -15:
                # The stop arrived while torchrun was starting, before any trainer ran: nothing was lost.
                self.console.log("stopped before the trainer started; the same command resumes")
                return exit_codes.SAVED_RETRY
            code = result.returncode if result.returncode > 0 else 1
            self.console.log(
                f"training failed (torchrun exit {result.returncode}, rank exit codes {result.rank_codes}); "
                f"see {self.s.launch_dir / 'train.log'}. Fix the cause and rerun the same command to resume."
            )
            return code

    # -- the whole launch ------------------------------------------------------------------------
    def run(self) -> int:
        """All steps; returns the launcher exit code (0, 2, 75 or the trainer's failure)."""
        s = self.s
        session_start = time.time()
        self.supervisor.install_signal_handlers()
        self.write_plan()
        gpus = self.plan.hardware.world_size if self.plan.hardware.device == "cuda" else 0
        self.events.write(
            "session_start", gpus=gpus, gpus_per_node=self.plan.hardware.gpus_per_node,
            hourly_usd=s.gpu_hourly_usd, node_rank=s.node_rank, host=os.uname().nodename,
        )  # fmt: skip
        guard: CostGuard | None = None
        code = 1
        try:
            self.console.log(f"run {s.run_name}: {s.run_dir}")
            self.preflight()
            self.data()
            self.console.log(self.plan.hardware.describe())
            deadline = None
            if s.max_hours is not None:
                deadline = time.time() + s.max_hours * 3600 - s.stop_margin_minutes * 60
                self.console.log(
                    f"cost guard armed: the trainer is asked to stop at {time.strftime('%H:%M:%S', time.gmtime(deadline))} UTC"
                )
            guard = CostGuard(
                self.supervisor,
                session_start=session_start,
                deadline=deadline,
                num_gpus=self.plan.hardware.gpus_per_node if gpus else 0,
                hourly_usd=s.gpu_hourly_usd,
                log_every_s=s.cost_log_minutes * 60,
            )
            guard.start()
            if s.probe:
                self.probe()
            self.smoke()
            code = self.train()
        except LaunchFailed as err:
            self.console.log(str(err))
            code = err.code
        except TRMError as err:
            self.console.log(f"error: {err}")
            code = err.exit_code
        finally:
            if guard is not None:
                guard.stop()
                self.console.log(guard.cost_line())
            self.events.write("session_end", exit_code=code)
            if self.environ.get("TRM_LAUNCH_HANDOFF", "1") != "0":
                # Direct `python -m trm launch` (e.g. a Kubernetes Job); train_prod.sh does it from its trap.
                self.handoff()
        return code

    def handoff(self) -> None:
        """Write the handoff bundle (used when the launcher runs without train_prod.sh)."""
        from trm.launch.handoff import build_bundle

        try:
            bundle = build_bundle(self.s.run_dir, self.s.artifacts_run_dir)
            self.console.log(f"handoff bundle: {bundle}")
        except (OSError, TRMError) as err:
            self.console.log(f"handoff failed ({err}); rerun: python -m trm handoff {self.s.run_dir}")
