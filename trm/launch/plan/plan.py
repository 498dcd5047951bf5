"""Turn the launch settings and the detected hardware into concrete steps and commands (printed by --dry-run)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import cache, cached_property
from pathlib import Path

from trm.errors import TRMError
from trm.launch.config.settings import LaunchSettings
from trm.launch.config.variables import ENV_VARS, arch_override
from trm.launch.cost.budget import budget_warning
from trm.launch.cost.estimate import RunEstimate, estimate_run, probe_step_seconds
from trm.launch.host.hardware import BatchLayout, select_layout, workload_of
from trm.launch.host.nvidia_smi import GpuInfo
from trm.training.config import TrainConfig, best_checkpoints_kept, compose, override_key
from trm.training.recipes import Recipe, get_recipe

# scripts/train_prod.sh exports TRM_LAUNCHER=scripts/train_prod.sh, so the resume command names it; the
# image has no scripts/ and runs `python -m trm launch` directly.
SCRIPT = "scripts/train_prod.sh"
LAUNCHER_ENV = "TRM_LAUNCHER"

# Process environment for every trainer process (only set when the user has not set them).
TRAINER_ENV_DEFAULTS = {
    "PYTHONUNBUFFERED": "1",
    "HYDRA_FULL_ERROR": "1",
    "OMP_NUM_THREADS": "1",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    # CUDA device i is nvidia-smi's GPU i, so the UUIDs in preflight and handoff name the right devices.
    "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
}


def merge_overrides(base: list[str] | tuple[str, ...], extra: list[str] | tuple[str, ...]) -> list[str]:
    """`base` then `extra`, where an extra override replaces a base one with the same key (in place)."""
    out = list(base)
    for item in extra:
        keys = [override_key(o) for o in out]
        key = override_key(item)
        if key in keys:
            out[keys.index(key)] = item
        else:
            out.append(item)
    return out


def probe_schedule(overrides: list[str], recipe_epochs: int, probe_steps: int) -> list[str]:
    """Overrides that stretch a run's schedule to at least `probe_steps` optimizer steps, without evaluation.

    A recipe whose epoch is a single optimizer step (arc2-smoke) would stop the probe at step 1, before
    the probe's warm-up steps, so no step would be timed. A run of E epochs with at least one step has at
    least `probe_steps` steps over E × probe_steps epochs. The probe does not evaluate: at the paper size the
    end-of-run evaluation of arc2-smoke's 14,645 test rows took 183 s of a 259 s probe on an H100.
    """
    epochs = recipe_epochs
    for item in overrides:
        key, _, value = item.lstrip("+").partition("=")
        if key == "epochs" and value.isdigit():
            epochs = int(value)
    longer = epochs * probe_steps
    # A depth curriculum's first steps are its shallowest: the probe times (and sizes the micro-batch for)
    # full-depth steps, the run's most expensive and most memory-hungry ones.
    curriculum = (
        ["depth_curriculum.ramp=0"]
        if any(override_key(o).startswith("depth_curriculum.") for o in overrides)
        else []
    )
    return [f"epochs={longer}", f"eval_interval={longer}", "evaluate=false", *curriculum]


# torchrun's --shutdown-timeout first shipped with torch 2.12.
SHUTDOWN_TIMEOUT_SINCE = (2, 12)


@cache
def torchrun_has_shutdown_timeout() -> bool:
    """Whether this torch's torchrun takes --shutdown-timeout (torch 2.12 and later). Older ones (2.10, 2.11)
    reject the flag and kill the ranks 30 s after a SIGTERM that reaches torchrun itself. Read off the
    installed torch's version, not its parser: importing torch (~2 s) is all a dry run would otherwise spend
    on it (tests/launch/plan/test_plan.py checks the two agree on each torch the tests run)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("torch")
    except PackageNotFoundError:
        return False
    major, minor = (int(part) for part in re.findall(r"\d+", installed)[:2])
    return (major, minor) >= SHUTDOWN_TIMEOUT_SINCE


def shutdown_timeout_args(shutdown_timeout: int) -> list[str]:
    """torchrun's --shutdown-timeout where this torch has it; else nothing.

    It matters only when a SIGTERM reaches torchrun itself: the launcher's own stop requests go to the
    ranks directly and give them SHUTDOWN_TIMEOUT on every torch (trm.launch.supervision.supervisor)."""
    return [f"--shutdown-timeout={shutdown_timeout}"] if torchrun_has_shutdown_timeout() else []


def torchrun_command(
    python: str,
    overrides: list[str],
    *,
    exit_dir: Path,
    nproc_per_node: int,
    shutdown_timeout: int,
    trainer_module: str = "trm.train",
    rendezvous: list[str] | None = None,
) -> list[str]:
    """torchrun (`--standalone` without `rendezvous` flags) of `nproc_per_node` ranks, each running the
    trainer under `trm.launch.supervision.worker`, which records its exit code in `exit_dir`."""
    return [
        *(python, "-m", "torch.distributed.run"),
        *(rendezvous or ["--standalone"]),
        f"--nproc-per-node={nproc_per_node}",
        *shutdown_timeout_args(shutdown_timeout),
        *("-m", "trm.launch.supervision.worker", f"--exit-dir={exit_dir}", "--saved-exits-zero", "--"),
        *(python, "-m", trainer_module),
        *overrides,
    ]


def unbound(step: Step) -> None:
    """The action of a step planned without the launcher's actions (the dry run prints such steps)."""
    raise TypeError(
        f"step {step.name!r} was planned without its action: pass StepActions to LaunchPlan.steps()"
    )


@dataclass(frozen=True)
class Step:
    """One step of the launch: --dry-run prints it, `Launch.run()` runs it (`run()`: its own action), in the
    order of `LaunchPlan.steps()`. Commands are made when read, so they follow the plan (a probe may change
    the micro-batch before the train step runs)."""

    name: str
    what: str
    command_makers: tuple[Callable[[], list[str]], ...] = ()
    at_exit: bool = False
    """Runs when the launch ends, success or failure (after the steps before it, or after a failure)."""
    action: Callable[[Step], None] = unbound
    """What the step does (one of `StepActions`, which trm.launch.launcher provides)."""

    @property
    def commands(self) -> list[list[str]]:
        """The command lines of this step, as they are run."""
        return [make() for make in self.command_makers]

    def run(self) -> None:
        """Do this step."""
        self.action(self)


StepAction = Callable[[Step], None]


@dataclass(frozen=True)
class StepActions:
    """What each step a plan can hold does, one field per step (the launcher's; every field is required,
    so a step added here without its action fails where the launcher binds them)."""

    preflight: StepAction
    data: StepAction
    hardware: StepAction
    cost_guard: StepAction
    sync: StepAction
    probe: StepAction
    smoke_gate: StepAction
    train: StepAction
    handoff: StepAction
    final_sync: StepAction
    release: StepAction


UNBOUND = StepActions(**{f.name: unbound for f in fields(StepActions)})


class LaunchFailed(Exception):
    """A step failed; `code` becomes the launcher's exit code (the message is already logged)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class LaunchPlan:
    """Everything a launch will do, resolved up front."""

    settings: LaunchSettings
    recipe: Recipe
    hardware: BatchLayout
    gpus: list[GpuInfo]
    dataset_dir: Path
    overrides: list[str]
    env: dict[str, str]
    trainer_module: str = "trm.train"
    environ: dict[str, str] = field(default_factory=dict)
    """The launch's environment (where the release step detects its platform)."""

    @property
    def checkpoint_bytes(self) -> int:
        """Size of the newest complete checkpoint of this run, else the recipe's estimate."""
        run_dir = self.settings.run_dir
        done = sorted(
            (p for p in run_dir.glob("step_*") if (p / "COMPLETE").exists()),
            key=lambda p: int(p.name.split("_", 1)[1]) if p.name.split("_", 1)[1].isdigit() else -1,
        )
        if done:
            return sum(f.stat().st_size for f in done[-1].rglob("*") if f.is_file())
        return self.recipe.checkpoint_bytes

    @cached_property
    def train_config(self) -> TrainConfig:
        """The configuration the trainer will run (the overrides composed as `python -m trm.train` does)."""
        return compose(self.overrides)

    def estimate(self) -> RunEstimate | str:
        """The whole run's expected time and cost, or why it is unknown yet (trm.launch.cost.estimate)."""
        return estimate_run(
            self.train_config,
            self.dataset_dir,
            self.hardware,
            hourly_usd=self.settings.gpu_hourly_usd,
            measured_step_seconds=probe_step_seconds(self.settings.launch_dir),
        )

    def budget_warning(self, estimate: RunEstimate | str) -> str | None:
        """The warning when MAX_HOURS ends the run before its expected end (trm.launch.cost.budget)."""
        if not isinstance(estimate, RunEstimate):
            return None
        s = self.settings
        return budget_warning(estimate, s.max_hours, s.stop_margin_minutes, s.release)

    def hardware_text(self, estimate: RunEstimate | str) -> str:
        """The tier and batch layout, then the expected time and cost, and the MAX_HOURS warning if any."""
        what = estimate.describe() if isinstance(estimate, RunEstimate) else f"expected time     {estimate}"
        warning = self.budget_warning(estimate)
        return f"{self.hardware.describe()}\n{what}" + (f"\n{warning}" if warning else "")

    def trainer_overrides(
        self,
        *,
        checkpoint_path: Path | None = None,
        max_steps: int | None = None,
        micro_batch_size: int | None = None,
    ) -> list[str]:
        """The run's overrides, optionally redirected (smoke gate, probe) or with a different micro-batch."""
        extra = []
        if checkpoint_path is not None:
            extra.append(f"checkpoint_path={checkpoint_path}")
        if micro_batch_size is not None:
            extra.append(f"micro_batch_size={micro_batch_size}")
        if max_steps is not None:
            extra.append(f"max_steps={max_steps}")
        return merge_overrides(self.overrides, extra)

    def torchrun(self, overrides: list[str], *, exit_dir: Path) -> list[str]:
        """The torchrun command line: each rank runs the trainer under the exit-code recorder."""
        s = self.settings
        return torchrun_command(
            s.python,
            overrides,
            exit_dir=exit_dir,
            nproc_per_node=self.hardware.gpus_per_node,
            shutdown_timeout=s.shutdown_timeout,
            trainer_module=self.trainer_module,
            rendezvous=[]
            if s.nnodes == 1
            else [
                f"--nnodes={s.nnodes}",
                f"--node-rank={s.node_rank}",
                f"--master-addr={s.master_addr}",
                f"--master-port={s.master_port}",
            ],
        )

    def preflight_command(self) -> list[str]:
        """`python -m trm preflight …` for this plan (GPU or CPU mode, disk need, report file)."""
        s = self.settings
        cmd = [s.python, "-m", "trm", "preflight", "--cpu" if self.hardware.device == "cpu" else "--gpu"]
        if self.hardware.device != "cpu":
            cmd.append(f"--num-gpus={self.hardware.gpus_per_node}")
        return [
            *cmd,
            f"--checkpoint-dir={s.run_dir}",
            f"--checkpoint-gb={self.checkpoint_bytes / 1024**3:.3g}",
            f"--keep={s.checkpoint_keep}",
            f"--keep-best={best_checkpoints_kept(self.train_config)}",
            f"--report={s.launch_dir / 'preflight.json'}",
        ]

    def build_command(self) -> list[str]:
        """`python -m trm data build-arc …` (or the recipe's other builder) for the recipe's dataset."""
        return [
            self.settings.python,
            "-m",
            "trm",
            "data",
            self.recipe.builder,
            "--output-dir",
            str(self.dataset_dir),
            *self.recipe.build_args,
        ]

    def verify_command(self) -> list[str]:
        """`python -m trm data verify D`."""
        return [self.settings.python, "-m", "trm", "data", "verify", str(self.dataset_dir)]

    def handoff_command(self) -> list[str]:
        """`python -m trm launch --handoff`: the bundle of the run these settings name (by hand)."""
        return [self.settings.python, "-m", "trm", "launch", "--handoff"]

    def exit_dir(self) -> Path:
        """Where each rank of this node records its exit code (trm.launch.supervision.worker): one folder per
        node, since the nodes of a multi-node run share the run directory and each launcher clears its
        folder before an attempt."""
        return self.settings.launch_dir / "exit_codes" / f"node_{self.settings.node_rank}"

    def smoke_dir(self) -> Path:
        """The smoke gate's scratch run directory."""
        return self.settings.launch_dir / "smoke"

    def probe_dir(self, micro_batch_size: int) -> Path:
        """The scratch run directory of the probe at one micro-batch."""
        return self.settings.launch_dir / "probe" / f"micro_{micro_batch_size}"

    def probe_command(self, micro_batch_size: int) -> list[str]:
        """torchrun of PROBE_STEPS steps at `micro_batch_size` into its probe directory."""
        overrides = self.trainer_overrides(
            checkpoint_path=self.probe_dir(micro_batch_size),
            max_steps=self.settings.probe_steps,
            micro_batch_size=micro_batch_size,
        )
        schedule = probe_schedule(overrides, self.recipe.config.epochs, self.settings.probe_steps)
        return self.torchrun(merge_overrides(overrides, schedule), exit_dir=self.exit_dir())

    def smoke_command(self) -> list[str]:
        """torchrun of SMOKE_STEPS steps of the real config into the smoke directory."""
        overrides = self.trainer_overrides(
            checkpoint_path=self.smoke_dir(), max_steps=self.settings.smoke_steps
        )
        return self.torchrun(overrides, exit_dir=self.exit_dir())

    def train_command(self) -> list[str]:
        """torchrun of the run itself."""
        return self.torchrun(self.trainer_overrides(), exit_dir=self.exit_dir())

    def resume_command(self, environ: dict[str, str]) -> str:
        """The exact command that continues this run where it ran: the launch variables that were set, then
        the entry point that started it (`bash scripts/train_prod.sh` in a checkout, which exports
        `TRM_LAUNCHER`; `python -m trm launch` otherwise, e.g. inside a trm image, which has no scripts/).
        A variable naming this machine (PRIME_POD_ID) is left out: on another machine the launch then asks
        for that machine's id at its start instead of releasing this one."""
        names = [v.name for v in ENV_VARS if environ.get(v.name, "") != "" and not v.this_machine]
        assigns = [f"{n}={shlex.quote(environ[n])}" for n in names]
        entry = ["bash", SCRIPT] if environ.get(LAUNCHER_ENV) == SCRIPT else ["python", "-m", "trm", "launch"]
        return " ".join([*assigns, *entry, *(shlex.quote(o) for o in self.settings.cli_overrides)])

    def steps(self, actions: StepActions = UNBOUND) -> list[Step]:
        """The ordered steps of the launch, each with its action from `actions`: what --dry-run prints
        (without actions) and what `Launch.run()` runs."""
        s, a = self.settings, actions
        steps = [
            self.preflight_step(a.preflight),
            self.data_step(a.data),
            self.hardware_step(a.hardware),
            self.cost_guard_step(a.cost_guard),
        ]
        if s.sync_to:
            steps.append(self.sync_step(a.sync))
        if s.probe:
            steps.append(self.probe_step(a.probe))
        if s.smoke_steps > 0:
            steps.append(self.smoke_step(a.smoke_gate))
        steps += [self.train_step(a.train), self.handoff_step(a.handoff)]
        if s.sync_to:
            steps.append(self.final_sync_step(a.final_sync))
        return [*steps, self.release_step(a.release)]

    def preflight_step(self, action: StepAction = unbound) -> Step:
        """Host checks; any failure stops the launch."""
        disabled = "" if self.settings.preflight else " (DISABLED by PREFLIGHT=0)"
        what = f"check the host; stop with the fix on any failure{disabled}"
        return Step("preflight", what, (self.preflight_command,), action=action)

    def data_step(self, action: StepAction = unbound) -> Step:
        """Build the dataset if it is missing (node 0), then verify it."""
        what = (
            f"build {self.dataset_dir} if it is missing (node 0 only), then verify its manifest; "
            "never train on an unverified dataset"
        )
        return Step("data", what, (self.build_command, self.verify_command), action=action)

    def hardware_step(self, action: StepAction = unbound) -> Step:
        """The tier and batch layout, and the run's expected time and cost (logged)."""
        return Step("hardware", self.hardware_text(self.estimate()), action=action)

    def cost_guard_step(self, action: StepAction = unbound) -> Step:
        """The watcher that logs time and cost and stops the trainer at MAX_HOURS."""
        s = self.settings
        if s.max_hours is not None:
            what = (
                f"starts after data verification: SIGTERM to the trainer when the run (every session "
                f"together, launch/ledger.json) reaches {s.max_hours:g} h - {s.stop_margin_minutes:g} min "
                "(it saves; the launcher exits 79)"
            )
        else:
            what = "starts after data verification: no deadline (MAX_HOURS unset)"
        if s.gpu_hourly_usd is not None:
            what += f", cost so far logged every {s.cost_log_minutes:g} min at ${s.gpu_hourly_usd:g}/GPU-hour"
        return Step("cost guard", what, action=action)

    def probe_step(self, action: StepAction = unbound) -> Step:
        """PROBE=1: train a few steps, halving the micro-batch on out-of-memory."""
        micro = self.hardware.micro_batch_size
        what = (
            f"{self.settings.probe_steps} steps at micro-batch {micro}; "
            "record peak memory and step time; halve the micro-batch on out-of-memory"
        )
        return Step("probe", what, (lambda: self.probe_command(micro),), action=action)

    def smoke_step(self, action: StepAction = unbound) -> Step:
        """A few steps of the real config before the long run (fresh runs only)."""
        s = self.settings
        what = (
            f"{s.smoke_steps} steps of the real config on the real hardware into "
            f"{self.smoke_dir()} (skipped when the run already has a checkpoint)"
        )
        return Step("smoke gate", what, (self.smoke_command,), action=action)

    def train_step(self, action: StepAction = unbound) -> Step:
        """Supervised torchrun with bounded restarts on exit 75 and 77."""
        s = self.settings
        what = (
            "torchrun (python -m torch.distributed.run); resumes from the newest complete checkpoint in "
            f"{s.run_dir}; exit 75 (saved) or 77 (hung) without a stop request restarts (at most {s.max_restarts} times), "
            "exit 80 (out of memory) with half the micro-batch and twice the accumulation (down to 1); log: "
            f"{s.launch_dir / 'train.log'}"
        )
        return Step("train", what, (self.train_command,), action=action)

    def handoff_step(self, action: StepAction = unbound) -> Step:
        """The bundle, written at exit by the launcher whatever the outcome."""
        what = (
            f"at exit, success, failure or SIGTERM: the launcher bundles the run into "
            f"{self.settings.artifacts_run_dir} (by hand: {shlex.join(self.handoff_command())})"
        )
        return Step("handoff", what, at_exit=True, action=action)

    def sync_step(self, action: StepAction = unbound) -> Step:
        """SYNC_TO: background uploads of the run while it trains."""
        s = self.settings
        what = (
            f"every {s.sync_every_minutes:g} min in the background (training never waits): rclone copies "
            f"{s.run_dir} to {s.sync_remote} (complete checkpoints only, COMPLETE markers last; never .partial "
            "folders), retried with backoff"
        )
        if s.node_rank != 0:
            what = f"node {s.node_rank}: nothing (node 0 uploads the run)"
        return Step("sync", what, action=action)

    def final_sync_step(self, action: StepAction = unbound) -> Step:
        """SYNC_TO: the last upload, after the handoff bundle."""
        s = self.settings
        what = (
            f"at exit, after the handoff: the launcher copies the run and the bundle to {s.sync_remote} (bundle in "
            f"handoff/); restore elsewhere: python -m trm sync --from {s.sync_remote} {s.run_dir}"
        )
        return Step("final sync", what, at_exit=True, action=action)

    def release_step(self, action: StepAction = unbound) -> Step:
        """ON_END / ON_BUDGET: release the machine once everything is written and synced."""
        from trm.launch.provider.release import describe

        return Step("release", describe(self.settings.release, self.environ), at_exit=True, action=action)

    def restore_command(self) -> str | None:
        """With SYNC_TO: the command that brings this run to a new machine (before its resume command)."""
        s = self.settings
        if not s.sync_to:
            return None
        return shlex.join(["python", "-m", "trm", "sync", "--from", s.sync_remote, str(s.run_dir)])

    def render(self, environ: dict[str, str]) -> str:
        """The --dry-run text."""
        s = self.settings
        lines = [
            "trm launch plan (dry run: nothing is executed)",
            f"run           {s.run_name} (recipe {s.recipe})",
            f"run dir       {s.run_dir}",
            f"dataset       {self.dataset_dir}",
            f"artifacts     {s.artifacts_run_dir}",
            f"image         {host_image(self.gpus, environ)}",
            f"trainer env   {' '.join(f'{k}={v}' for k, v in sorted(self.env.items()))}",
            "",
        ]
        for i, step in enumerate(self.steps(), 1):
            lines.append(f"step {i}: {step.name}")
            lines += [f"  {line}" for line in step.what.splitlines()]
            lines += [f"  $ {shlex.join(cmd)}" for cmd in step.commands]
            lines.append("")
        lines.append(f"resume in:   {resume_where(environ)}")
        lines.append(f"resume with: {self.resume_command(environ)}")
        return "\n".join(lines)


def host_image(gpus: list[GpuInfo], environ: dict[str, str]) -> str:
    """The image family and variant this host's driver runs (trm.images.families, one decision for
    preflight, the bootstrap and `python -m tools.images ref --driver`), and the one this launch runs in."""
    from trm.images.families import variant_for_host

    running = environ.get("TRM_IMAGE_VARIANT")
    here = f"running in {running}" if running else "running from a checkout"
    if not gpus:
        return f"none needed (CPU); {here}"
    driver = gpus[0].driver_version
    try:
        family, variant, tag = variant_for_host({g.sm for g in gpus}, driver)
    except TRMError as err:
        return f"NONE RUNS HERE: {err}"
    backend = "adam-atan2 extension" if family.optimizer_backend == "ext" else "trm AdamATan2 (torch)"
    return (
        f"{variant} ({tag}: CUDA {family.cuda}, torch {family.torch}, optimizer {backend}) for driver "
        f"{driver}; {here}"
    )


def resume_where(environ: dict[str, str]) -> str:
    """Where the resume command runs: the image it ran in (by digest when known), or a checkout."""
    if environ.get("TRM_IMAGE_VARIANT"):
        digest = environ.get("TRM_IMAGE_DIGEST") or (
            f"unknown digest (variant {environ['TRM_IMAGE_VARIANT']}; pass -e TRM_IMAGE_DIGEST from "
            "docker/images.lock.json)"
        )
        place = (
            "the Job's pod (re-apply the same overlay)"
            if environ.get("KUBERNETES_SERVICE_HOST")
            else (
                "the same container, or a new one of this image with the same volumes on /workspace/{data,"
                "checkpoints,artifacts}"
            )
        )
        return f"inside the trm image {digest}: {place}"
    return "the trm-stack checkout and venv that ran it, from the checkout's root"


def trainer_env(settings: LaunchSettings, environ: dict[str, str]) -> dict[str, str]:
    """Environment additions for the trainer processes (tracking switches, NCCL/allocator defaults)."""
    env = {k: v for k, v in TRAINER_ENV_DEFAULTS.items() if k not in environ}
    if settings.wandb == "off":
        env.update(WANDB_MODE="disabled", WANDB_DISABLED="true")
    else:
        # WANDB_DISABLED must be empty: any value (even "false") disables W&B.
        env.update(WANDB_MODE=settings.wandb, WANDB_DISABLED="")
        # Passed by name (the key itself stays in the environment or its file: never in plan.json).
        for name, value in (
            ("WANDB_ENTITY", settings.wandb_entity),
            ("WANDB_RUN_GROUP", settings.wandb_run_group),
            ("WANDB_API_KEY_FILE", settings.wandb_api_key_file),
        ):
            if value:
                env[name] = value
    return env


def build_plan(
    settings: LaunchSettings, gpus: list[GpuInfo], environ: dict[str, str], recipe: Recipe | None = None
) -> LaunchPlan:
    """Resolve the hardware tier and every trainer override for this launch (`recipe`: a variant of
    TASK's recipe, e.g. an experiment's with its own dataset)."""
    recipe = recipe or get_recipe(settings.recipe)
    hardware = select_layout(
        gpus,
        num_gpus=settings.num_gpus,
        nnodes=settings.nnodes,
        global_batch_size=settings.global_batch_size or recipe.global_batch_size,
        micro_batch_size=settings.micro_batch_size,
        compile_override=settings.compile,
        cpu_procs=settings.cpu_procs,
        expected_global_batch_size=recipe.global_batch_size,
        workload=workload_of(recipe, arch_override(settings.train_overrides)),
    )
    dataset_dir = settings.data_dir / recipe.dataset
    overrides = merge_overrides(
        [
            *recipe.overrides,
            f"data_paths=[{dataset_dir}]",
            f"run_name={settings.run_name}",
            f"project_name={settings.wandb_project}",
            f"checkpoint_path={settings.run_dir}",
            f"checkpoint.keep={settings.checkpoint_keep}",
            f"wandb={'false' if settings.wandb == 'off' else 'true'}",
            f"tensorboard={'true' if settings.tensorboard else 'false'}",
            *hardware.overrides(),
        ],
        settings.train_overrides,
    )
    return LaunchPlan(
        settings=settings,
        recipe=recipe,
        hardware=hardware,
        gpus=gpus,
        dataset_dir=dataset_dir,
        overrides=overrides,
        env=trainer_env(settings, environ),
        environ=dict(environ),
    )
