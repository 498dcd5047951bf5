"""The launch itself: the steps of `LaunchPlan.steps()` in their order (preflight -> data -> hardware ->
cost guard -> (probe) -> (smoke gate) -> supervised torchrun -> handoff at exit)."""

from __future__ import annotations

import os
import shlex
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import IO

from trm import exit_codes
from trm.compile_setting import FALLBACK_FILE, compile_failure
from trm.errors import TRMError
from trm.io import atomic_write_json
from trm.launch.config.settings import LaunchSettings
from trm.launch.config.workspace import ensure_writable
from trm.launch.cost.estimate import ESTIMATE_FILE, RunEstimate
from trm.launch.host import cuda_visible
from trm.launch.host.hardware import BatchLayout
from trm.launch.host.nvidia_smi import GpuInfo, NvidiaSmiMissing, Runner, query_driver_cuda, query_gpus
from trm.launch.plan.plan import (
    LaunchFailed,
    LaunchPlan,
    Step,
    build_plan,
    merge_overrides,
    override_key,
    resume_where,
)
from trm.launch.storage.sync import Syncer, SyncError
from trm.launch.supervision.ledger import (
    TERMINAL_ENDS,
    RunLedger,
    admit,
    config_fingerprint,
)
from trm.launch.supervision.stepdown import STEP_DOWN_FILE, StepDownRecord, apply_record, step_down
from trm.launch.supervision.supervisor import AttemptResult, Console, CostGuard, EventLog, Supervisor
from trm.runlock import HOLDER_ENV, RunLock, RunLocked
from trm.safe_remove import remove_own_temp
from trm.training.recipes import Recipe

DATA_WAIT_S = 3600.0  # how long nodes other than 0 wait for node 0's dataset
# How long a launcher waits for the run's lock held from another host: longer than NFSv4's default lease
# (90 s), after which the server drops the lock of a node that died (trm.runlock).
LOCK_WAIT_OTHER_HOST_S = 120.0
PRODUCTION_RECIPES = ("arc1", "arc2")


def detect_gpus(
    settings: LaunchSettings, runner: Runner | None = None, environ: dict[str, str] | None = None
) -> list[GpuInfo]:
    """The GPUs nvidia-smi lists that `environ`'s CUDA_VISIBLE_DEVICES leaves; none when NUM_GPUS=0.
    Production recipes never fall back to CPU silently."""
    if settings.num_gpus == 0:
        return []
    needs_gpus = bool(settings.num_gpus) or settings.recipe in PRODUCTION_RECIPES
    on_cpu = "to train on CPU on purpose set NUM_GPUS=0 (TASK=debug-tiny is the CPU-sized run)"
    try:
        gpus = query_gpus(runner, environ)
    except NvidiaSmiMissing as err:
        if needs_gpus:
            raise TRMError(f"{err}. TASK={settings.recipe} needs GPUs; {on_cpu}") from None
        return []
    except TRMError:
        # A driver older than every image family (R470 knows no compute_cap query field): its error
        # names the fix; any other failure keeps nvidia-smi's own message.
        from trm.images.families import catalog_families, family_for_driver

        driver, _cuda = query_driver_cuda(runner)
        if driver:
            family_for_driver(driver, catalog_families())
        raise
    hiding = (os.environ if environ is None else environ).get(cuda_visible.ENV)
    if not gpus and hiding is not None and needs_gpus:
        raise TRMError(
            f"{cuda_visible.ENV}={hiding!r} hides every GPU, and TASK={settings.recipe} needs GPUs: "
            f"{cuda_visible.FIX}; {on_cpu}"
        )
    return gpus


def _read_reason(path: Path) -> str:
    import json

    try:
        return str(json.loads(path.read_text()).get("reason", "recorded earlier"))
    except (OSError, ValueError, AttributeError):
        return "recorded earlier"


def complete_steps(run_dir: Path) -> list[int]:
    """The steps of the `step_N/` folders of `run_dir` that have their COMPLETE marker, ascending."""
    return sorted(
        int(d.name[5:])
        for d in run_dir.glob("step_*")
        if d.name[5:].isdigit() and d.is_dir() and (d / "COMPLETE").exists()
    )


def has_complete_checkpoint(run_dir: Path) -> bool:
    """Whether `run_dir` holds a `step_N/` with its COMPLETE marker."""
    return bool(complete_steps(run_dir))


def resolve(
    settings: LaunchSettings,
    environ: dict[str, str],
    runner: Runner | None = None,
    recipe: Recipe | None = None,
) -> LaunchPlan:
    """Detect hardware and build the plan (used by the dry run and the real launch)."""
    return build_plan(settings, detect_gpus(settings, runner, environ), environ, recipe)


class Launch:
    """One invocation of the launcher over a resolved plan: runs `plan.steps()` in order."""

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
        self.exit_code = 1
        self.ledger: RunLedger | None = None
        self.trainer_ran = False  # a smoke gate, probe or training torchrun started this session
        self.config = ""  # the configuration's fingerprint, taken before the probe may change the micro-batch
        self.failure: str | None = None  # why the launcher itself failed after admission (not the trainer)
        self.lock: RunLock | None = None  # the run directory's lock (node 0), held for the whole session
        self.step_downs: StepDownRecord | None = None  # the out-of-memory step-downs this session trains with
        self.out_of_memory: str | None = None  # why training ended: out of memory even at micro-batch 1

    # -- helpers ---------------------------------------------------------------------------------
    def _check(self, cmd: list[str], label: str, failure: str, passed_on: tuple[int, ...] = ()) -> None:
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
                "restore_command": restore_command(s),
                "gpu_hourly_usd": s.gpu_hourly_usd,
                "max_hours": s.max_hours,
                "budget_warning": plan.budget_warning(plan.estimate()),
                "oom_step_down": asdict(self.step_downs) if self.step_downs is not None else None,
                "image_digest": self.environ.get("TRM_IMAGE_DIGEST") or None,
            },
        )

    # -- the steps, by the names LaunchPlan.steps() gives them -------------------------------------
    def preflight(self, step: Step) -> None:
        """The host checks; any failure stops the launch."""
        if not self.settings.preflight:
            self.console.log("PREFLIGHT=0: preflight checks SKIPPED")
            return
        (command,) = step.commands
        self._check(
            command,
            "preflight",
            "preflight failed (exit {code}); the fix for each failed check is printed above",
            # A fault of this node (bad GPU, NCCL) keeps its own code: orchestrators retry it elsewhere.
            passed_on=(exit_codes.NODE_FAULT,),
        )

    def data(self, step: Step) -> None:
        """Build the dataset if missing (node 0), then verify it."""
        build, verify = step.commands
        d = self.plan.dataset_dir
        if not d.exists():
            if self.settings.node_rank == 0:
                self.console.log(f"dataset {d} is missing: building it")
                self._check(
                    build,
                    "data build",
                    f"building {d} failed (exit {{code}}); see launch/launch.log, fix the cause and rerun",
                )
            else:
                self._wait_for_dataset(d)
        self._check(
            verify,
            "data verify",
            f"dataset {d} failed verification (exit {{code}}); never train on it: remove it (rm -rf {d}) "
            "and rerun to rebuild",
        )
        self.console.log(f"dataset {d} verified")

    def _wait_for_dataset(self, d: Path) -> None:
        deadline = time.time() + DATA_WAIT_S
        self.console.log(f"node {self.settings.node_rank}: waiting for node 0 to build {d}")
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

    def hardware(self, step: Step) -> None:
        """Log the tier, the batch layout and the expected time and cost (now that the dataset is built);
        the estimate is recorded in launch/estimate.json for the handoff's planned-against-actual, and
        plan.json's MAX_HOURS warning follows the built dataset's figures."""
        estimate = self.plan.estimate()
        self.console.log(self.plan.hardware_text(estimate))
        if isinstance(estimate, RunEstimate):
            atomic_write_json(self.settings.launch_dir / ESTIMATE_FILE, estimate.to_dict())
            self.write_plan()

    def cost_guard(self, step: Step) -> None:
        """Start the watcher: cost log, heartbeats for the handoff, and the MAX_HOURS stop."""
        s = self.settings
        ledger = self.ledger or RunLedger.load(s.launch_dir)
        deadline = None
        left = ledger.budget_left_hours(s.max_hours, s.stop_margin_minutes)
        if left is not None:
            deadline = time.time() + left * 3600
            self.console.log(
                f"cost guard armed: the run has spent {ledger.hours:.4g} h of MAX_HOURS={s.max_hours:g}; the "
                f"trainer is asked to stop at {time.strftime('%H:%M:%S', time.gmtime(deadline))} UTC"
            )
        hardware = self.plan.hardware
        self.guard = CostGuard(
            self.supervisor,
            session_start=self.session_start,
            deadline=deadline,
            num_gpus=hardware.gpus_per_node if hardware.device == "cuda" else 0,
            hourly_usd=s.gpu_hourly_usd,
            log_every_s=s.cost_log_minutes * 60,
            ledger=self.ledger,
            run_gpus=hardware.world_size if hardware.device == "cuda" else 0,
        )
        self.guard.start()

    def sync(self, step: Step) -> None:
        """SYNC_TO: start the background uploads (node 0; the other nodes hold no run directory of their own)."""
        if self.settings.node_rank != 0:
            self.console.log(step.what)
            return
        self.syncer = make_syncer(self.settings, self.console.log)
        try:
            self.syncer.start()
        except SyncError as err:
            raise LaunchFailed(exit_codes.CONFIG_ERROR, f"SYNC_TO={self.settings.sync_to}: {err}") from None
        self.console.log(f"sync: the run is copied to {self.settings.sync_remote} in the background")

    def probe(self, step: Step) -> None:
        """Measure the micro-batch on the real GPUs and train with what fits."""
        from trm.launch.supervision.probe import run_probe

        micro = run_probe(self)
        if micro != self.plan.hardware.micro_batch_size:
            self.train_with(self.plan.hardware.with_micro_batch(micro, f"the probe stepped down to {micro}"))
            self.console.log(f"probe: training with micro-batch {micro}")

    # -- out of memory: half the micro-batch, twice the accumulation (trm.launch.supervision.stepdown) ---------
    def train_with(self, layout: BatchLayout) -> None:
        """Train (and smoke-test) with `layout`'s micro-batch from now on."""
        self.plan.hardware = layout
        self.plan.overrides = self.plan.trainer_overrides(micro_batch_size=layout.micro_batch_size)

    def resume_step_down(self) -> None:
        """An earlier session of this run ran out of memory on this plan: start at the micro-batch that fit."""
        path = self.settings.launch_dir / STEP_DOWN_FILE
        record = StepDownRecord.load(self.settings.launch_dir)
        if record is None:
            return
        why = record.mismatch(self.plan.hardware)
        if why is not None:
            self.console.log(f"{path} not applied: {why}")
            return
        self.step_downs = record
        self.train_with(apply_record(self.plan.hardware, record))
        self.console.log(
            f"MICRO-BATCH {record.micro_batch_size}: earlier attempts of this run ran out of GPU memory on "
            f"this hardware ({record.summary()}), recorded in {path}; delete that file to try micro-batch "
            f"{record.planned_micro_batch_size} again"
        )

    def step_down_after_oom(self, where: str) -> bool:
        """After `where` ran out of memory: train on with half the micro-batch and twice the accumulation,
        recorded (the record, an event, plan.json); False when the micro-batch is already 1."""
        s, micro = self.settings, self.plan.hardware.micro_batch_size
        steps = complete_steps(s.run_dir)
        stepped = step_down(
            self.plan.hardware,
            self.step_downs or StepDownRecord.load(s.launch_dir),
            where=where,
            resumes_from=steps[-1] if steps else None,
        )
        if stepped is None:
            self.out_of_memory = (
                f"{where} ran out of GPU memory even at micro-batch 1 (exit {exit_codes.OUT_OF_MEMORY}): this "
                f"model does not fit {self.plan.hardware.gpu_name}; train on a GPU with more memory"
            )
            return False
        layout, self.step_downs = stepped
        path = self.step_downs.save(s.launch_dir)
        self.events.write("oom_step_down", **self.step_downs.steps[-1])
        self.train_with(layout)
        self.write_plan()
        self.console.log(
            f"OUT OF MEMORY in {where} at micro-batch {micro}: training on with micro-batch "
            f"{layout.micro_batch_size} x {layout.grad_accumulation} accumulation (global batch "
            f"{layout.global_batch_size} kept), from the newest complete checkpoint; recorded in {path}"
        )
        return True

    def smoke_gate(self, step: Step) -> None:
        """A few steps of the real config in a scratch directory (fresh runs only)."""
        s = self.settings
        if has_complete_checkpoint(s.run_dir):
            self.console.log("smoke gate skipped: the run already has a complete checkpoint (resuming)")
            return
        remove_own_temp(self.plan.smoke_dir())
        self.console.log(f"smoke gate: {s.smoke_steps} steps of the real config")
        (command,) = step.commands
        result = self.torchrun(command, s.launch_dir / "smoke.log", "smoke gate")
        self._smoke_stopped()
        while result.outcome == "out_of_memory" and self.step_down_after_oom("the smoke gate"):
            remove_own_temp(self.plan.smoke_dir())
            (command,) = step.commands  # made again: the plan now has the smaller micro-batch
            label = f"smoke gate (micro-batch {self.plan.hardware.micro_batch_size})"
            result = self.torchrun(command, s.launch_dir / "smoke.log", label)
            self._smoke_stopped()
        if self.out_of_memory is not None:
            raise LaunchFailed(exit_codes.OUT_OF_MEMORY, self.out_of_memory)
        if result.returncode != 0:
            reason = self._compile_fallback_reason(s.launch_dir / "smoke.log")
            if reason is None:
                self._smoke_failed(result, s.launch_dir / "smoke.log")
            self.fall_back_to_eager(reason)
            remove_own_temp(self.plan.smoke_dir())
            (command,) = step.commands  # made again: the plan now says compile=false
            result = self.torchrun(command, s.launch_dir / "smoke-eager.log", "smoke gate (eager)")
            self._smoke_stopped()
            if result.returncode != 0:
                self._smoke_failed(result, s.launch_dir / "smoke-eager.log")
        self.console.log("smoke gate passed")

    def _smoke_stopped(self) -> None:
        if self.supervisor.stop_reason:
            raise LaunchFailed(128 + 15, f"stopped during the smoke gate ({self.supervisor.stop_reason})")

    def _smoke_failed(self, result: AttemptResult, log: Path) -> None:
        raise LaunchFailed(
            result.returncode if result.returncode > 0 else 1,
            f"smoke gate failed (exit {result.returncode}, ranks {result.rank_codes}): the long run would "
            f"fail the same way; see {log}",
        )

    def compile_explicit(self) -> bool:
        """COMPILE=true/false or a compile= trainer override: the user's choice, never changed for them."""
        s = self.settings
        return s.compile is not None or any(override_key(o) == "compile" for o in s.train_overrides)

    def _compile_fallback_reason(self, log: Path) -> str | None:
        """Why the smoke gate failed when it was torch.compile (and compile came from the hardware tier)."""
        if self.compile_explicit() or not self.plan.hardware.compile:
            return None
        try:
            return compile_failure(log.read_text(errors="replace")[-200_000:])
        except OSError:
            return None

    def fall_back_to_eager(self, reason: str, *, recorded: bool = False) -> None:
        """Train this run eager: the plan's overrides get compile=false, one loud line says so, and
        launch/compile_fallback.json (plus an event and plan.json) records it for restarts and the handoff."""
        s = self.settings
        self.plan.overrides = merge_overrides(self.plan.overrides, ["compile=false"])
        path = s.launch_dir / FALLBACK_FILE
        if not recorded:
            atomic_write_json(path, {"compile": False, "reason": reason, "time": time.time()})
            self.events.write("compile_fallback", reason=reason)
        self.write_plan()
        self.console.log(
            f"COMPILE OFF: torch.compile failed on this host ({reason}); this run trains EAGER (slower), recorded "
            f"in {path}. Set COMPILE=true to make a compile failure stop the run instead; delete that file to "
            "try compile again on the next start."
        )

    def train(self, step: Step) -> None:
        """torchrun under supervision; exit 75 or 77 without a stop request restarts from the newest
        complete checkpoint (at most MAX_RESTARTS restarts in all), exit 80 with half the micro-batch (down
        to 1; not counted). Sets exit_code."""
        s = self.settings
        restarts = attempt = 0
        while True:
            attempt += 1
            label = f"train attempt {attempt}"
            (command,) = step.commands
            self.console.log(f"{label}: {' '.join(command)}")
            result = self.torchrun(command, s.launch_dir / "train.log", label)
            if result.outcome == "ok":
                self.console.log("training finished")
                self.exit_code = exit_codes.OK
                return
            if result.outcome == "out_of_memory":
                if self._after_oom(label):
                    continue
                return
            if result.outcome in ("saved", "hung"):
                what = (
                    "trainer saved and exited 75"
                    if result.outcome == "saved"
                    else f"trainer hung and its watchdog exited {exit_codes.HUNG} (thread stacks: "
                    f"{s.run_dir / 'hang_rank*.txt'})"
                )
                code = exit_codes.SAVED_RETRY if result.outcome == "saved" else exit_codes.HUNG
                if self.supervisor.stop_reason and result.outcome == "saved":
                    self.console.log(
                        f"trainer saved and stopped ({self.supervisor.stop_reason}); the same command resumes"
                    )
                    self.exit_code = self._stop_code()
                    return
                if self.supervisor.stop_reason:  # hung while a stop was asked: nothing saved, not restarted
                    self.console.log(f"{what}; stop requested ({self.supervisor.stop_reason}): not restarted")
                    self.exit_code = code
                    return
                if s.nnodes > 1:
                    # Another node's stop (an evicted pod) or hang ended every rank; a restart here alone would
                    # wait at the rendezvous for nodes that are not coming back: the run restarts as a whole.
                    self.console.log(
                        f"{what} (node {s.node_rank} of {s.nnodes}: the stop or hang may have come from another "
                        f"node); a multi-node run restarts as a whole: exiting {code}, the same command on every "
                        "node resumes from the newest complete checkpoint"
                    )
                    self.exit_code = code
                    return
                if restarts < s.max_restarts:
                    restarts += 1
                    self.console.log(
                        f"{what}: restart {restarts}/{s.max_restarts} from the newest complete checkpoint"
                    )
                    self.events.write("restart", restart=restarts, outcome=result.outcome)
                    continue
                self.console.log(f"{what} after {restarts} restarts (MAX_RESTARTS); giving up")
                self.exit_code = code
                return
            if self.supervisor.stop_reason and not result.rank_codes and result.returncode == -15:
                # The stop arrived while torchrun was starting, before any trainer ran: nothing was lost.
                self.console.log("stopped before the trainer started; the same command resumes")
                self.exit_code = self._stop_code()
                return
            code = result.returncode if result.returncode > 0 else 1
            for own in (exit_codes.DISK_FULL, exit_codes.NONFINITE):
                if own in result.rank_codes.values():
                    # torchrun reports 1 for any failed child; the trainer's own code says what to do.
                    code = own
            self.console.log(
                f"training failed (torchrun exit {result.returncode}, rank exit codes {result.rank_codes}); "
                f"see {s.launch_dir / 'train.log'}. Fix the cause and rerun the same command to resume."
            )
            self.exit_code = code
            return

    def _after_oom(self, label: str) -> bool:
        """`label` ran out of memory: whether to train on at the smaller micro-batch (else sets exit_code)."""
        if not self.step_down_after_oom(label):
            self.console.log(self.out_of_memory or "")
            self.exit_code = exit_codes.OUT_OF_MEMORY
            return False
        micro = self.plan.hardware.micro_batch_size
        if self.supervisor.stop_reason:
            self.console.log(
                f"stop requested ({self.supervisor.stop_reason}): not restarted; the same command resumes at "
                f"micro-batch {micro}"
            )
            self.exit_code = self._stop_code()
            return False
        if self.settings.nnodes > 1:
            self.console.log(
                f"a multi-node run restarts as a whole: exiting {exit_codes.OUT_OF_MEMORY}; the same command on "
                f"every node resumes from the newest complete checkpoint at micro-batch {micro}"
            )
            self.exit_code = exit_codes.OUT_OF_MEMORY
            return False
        return True

    def handoff(self, step: Step) -> None:
        """Write the handoff bundle (at exit, whatever the outcome)."""
        try:
            bundle = hand_off(self.settings)
        except (OSError, TRMError) as err:
            self.console.log(f"handoff failed ({err}); rerun: {' '.join(self.plan.handoff_command())}")
            return
        self.console.log(f"handoff bundle: {bundle}" if bundle else "handoff: no run directory yet")

    def final_sync(self, step: Step) -> None:
        """The last upload, after the handoff bundle (node 0)."""
        if self.settings.node_rank != 0:
            return
        syncer = self.syncer or make_syncer(self.settings, self.console.log)
        self.synced = syncer.final()

    def release(self, step: Step) -> None:
        """ON_END / ON_BUDGET, once the bundle is written and synced."""
        from trm.launch.provider.release import release

        release(self.settings.release, self.exit_code, self.environ, self.console.log, synced=self.synced)

    def _check_release_ready(self) -> None:
        """ON_END / ON_BUDGET must be able to act at the end: find out now, before any training."""
        from trm.launch.provider.release import readiness_problem

        problem = readiness_problem(self.settings.release, self.environ)
        if problem:
            raise LaunchFailed(exit_codes.CONFIG_ERROR, f"release not possible: {problem}")

    def _stop_code(self) -> int:
        """75 for a stop asked from outside (SIGTERM: retry), BUDGET_STOPPED for the cost guard's."""
        if self.supervisor.budget_stop:
            self.console.log(
                f"exit {exit_codes.BUDGET_STOPPED}: the MAX_HOURS budget is spent; orchestrators must not "
                "restart this automatically"
            )
            return exit_codes.BUDGET_STOPPED
        return exit_codes.SAVED_RETRY

    # -- the whole launch ------------------------------------------------------------------------
    def step_action(self, step: Step) -> Callable[[Step], None]:
        """The method that executes `step` (named like the step: `smoke gate` -> `smoke_gate`)."""
        action = getattr(self, step.name.replace(" ", "_"), None)
        if action is None:  # pragma: no cover - a step added to the plan without its action
            raise TypeError(f"the launcher has no action for step {step.name!r}")
        return action

    def _execute(self, number: int, step: Step) -> None:
        self.console.log(f"step {number}: {step.name}")
        if not step.at_exit:  # at-exit steps run after session_end, which stays the session's last event
            self.events.write("step", name=step.name)
        self.step_action(step)(step)

    def admitted(self) -> bool:
        """Whether this launch may train (trm.launch.supervision.ledger): not when the run's MAX_HOURS is spent or it
        ended with 78 or 2 and the configuration is the same. Node 0 keeps the ledger."""
        s = self.settings
        ledger = RunLedger.load(s.launch_dir)
        self.config = config_fingerprint(self.plan.train_command())
        admission = admit(
            ledger,
            max_hours=s.max_hours,
            margin_minutes=s.stop_margin_minutes,
            config=self.config,
            continue_id=s.continue_run,
        )
        for note in admission.notes:
            self.console.log(note)
        if admission.refusal:
            self.console.log(f"run {s.run_name}: {admission.refusal}")
            if s.node_rank == 0:
                ledger.refused_at = time.time()
                ledger.save()
            return False
        if s.node_rank == 0:
            ledger.refused_at = None
            ledger.sessions += 1
            ledger.save()
            self.ledger = ledger
        return True

    def record_end(self) -> None:
        """Keep a terminal end in the ledger, so that a restart with the same configuration stops: the
        trainer's 79, 78 or 2, an out-of-memory at micro-batch 1 (80), or a failure of the launcher itself
        after admission (a restart policy would repeat it forever)."""
        if self.ledger is None:
            return
        if self.failure is not None:
            self.ledger.record_end(self.exit_code, self.config, reason=self.failure)
            self.ledger.save()
            self.console.log(
                f"recorded in {self.ledger.path}: a restart with this configuration does not start (id "
                f"{self.ledger.end['id'] if self.ledger.end else ''}); fix the cause, then set "
                f"CONTINUE_RUN to that id or change the configuration"
            )
            return
        if self.exit_code == exit_codes.OUT_OF_MEMORY and self.out_of_memory is None:
            return  # a multi-node run's step-down: every node restarts at the smaller micro-batch
        if self.exit_code not in TERMINAL_ENDS:
            return
        if self.exit_code != exit_codes.BUDGET_STOPPED and not self.trainer_ran:
            return  # a preflight or data error: a restart repeats it without training
        self.ledger.record_end(self.exit_code, self.config)
        self.ledger.save()
        self.console.log(
            f"recorded in {self.ledger.path}: a restart with this configuration does not train (id "
            f"{self.ledger.end['id'] if self.ledger.end else ''})"
        )

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
        if not self.admitted():
            return exit_codes.OK
        self.resume_step_down()
        self.write_plan()
        hardware = self.plan.hardware
        gpus = hardware.world_size if hardware.device == "cuda" else 0
        self.events.write(
            "session_start", gpus=gpus, gpus_per_node=hardware.gpus_per_node,
            hourly_usd=s.gpu_hourly_usd, node_rank=s.node_rank, host=os.uname().nodename,
        )  # fmt: skip
        steps = list(enumerate(self.plan.steps(), 1))
        fallback = s.launch_dir / FALLBACK_FILE
        if fallback.is_file() and not self.compile_explicit():
            # an earlier start of this run found torch.compile broken here: stay eager
            self.fall_back_to_eager(_read_reason(fallback), recorded=True)
        try:
            self.console.log(f"run {s.run_name}: {s.run_dir}")
            self._check_release_ready()
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
            self.record_end()
            self.events.write("session_end", exit_code=self.exit_code)
            for number, step in steps:
                if step.at_exit:
                    self._execute(number, step)
        return self.exit_code


def hand_off(settings: LaunchSettings) -> Path | None:
    """Bundle the run these settings name into ARTIFACTS_DIR/RUN_NAME; None when it has no directory yet.

    The handoff step of a launch and `python -m trm launch --handoff` (by hand) both call this."""
    from trm.launch.handoff.handoff import build_bundle

    if not settings.run_dir.is_dir():
        return None
    return build_bundle(settings.run_dir, settings.artifacts_run_dir)


def restore_command(settings: LaunchSettings) -> str | None:
    """With SYNC_TO: the command that brings this run to a new machine (before its resume command)."""
    if not settings.sync_to:
        return None
    return shlex.join(["python", "-m", "trm", "sync", "--from", settings.sync_remote, str(settings.run_dir)])


def make_syncer(settings: LaunchSettings, log: Callable[[str], None]) -> Syncer:
    """The uploader of this run to SYNC_TO/RUN_NAME (the handoff bundle into its handoff/)."""
    return Syncer(
        settings.run_dir,
        settings.sync_remote,
        log,
        every_s=settings.sync_every_minutes * 60,
        handoff_dir=settings.artifacts_run_dir,
        prune=settings.sync_prune,
    )


def finish_unplanned(settings: LaunchSettings, exit_code: int) -> None:
    """The at-exit steps of a launch that failed before its plan existed (a bad setting found while resolving
    the hardware): the handoff bundle of the run, if it has a directory, and its final sync. Nothing is
    released: ON_END / ON_BUDGET act on exits 0 and 79 only."""
    if not settings.run_dir.is_dir():
        return
    log = Console(settings.launch_dir / "launch.log").log
    try:
        bundle = hand_off(settings)
    except (OSError, TRMError) as err:
        log(f"handoff failed ({err}); rerun: python -m trm launch --handoff")
        return
    log(f"exit {exit_code} before the launch started; handoff bundle: {bundle}")
    if settings.sync_to and settings.node_rank == 0:
        make_syncer(settings, log).final()


def probe_configured_launch(environ: dict[str, str], stream: IO[str]) -> tuple[int, Path]:
    """`select-config --probe`: the data and probe steps of the launch the environment configures.

    Returns the micro-batch that trains and the record (launch/probe.json); raises LaunchFailed."""
    settings = LaunchSettings.from_env(environ)
    plan = resolve(settings, environ)
    ensure_writable(settings)
    launch = Launch(plan, environ, Console(settings.launch_dir / "launch.log", stream))
    launch.supervisor.install_signal_handlers()
    launch.data(plan.data_step())
    from trm.launch.supervision.probe import run_probe

    return run_probe(launch), settings.launch_dir / "probe.json"
