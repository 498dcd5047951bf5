"""The environment variables of `scripts/train_prod.sh`: declared once here, with defaults and help.

`--help` of the script, the README's "GPU host" table and `LaunchSettings.from_env` all read this list.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from trm.compile_setting import parse_compile
from trm.errors import TRMError
from trm.launch.after_run.release import ReleasePolicy, policy_from_env
from trm.launch.after_run.sync import check_remote
from trm.training.metrics_log import wandb_api_key
from trm.training.recipes import RECIPES


@dataclass(frozen=True)
class EnvVar:
    """One documented variable: its default (as shown to users) and what it does."""

    name: str
    default: str
    help: str
    group: str = "run"


DEFAULT_RECIPE = "arc2"  # TASK when unset

ENV_VARS: tuple[EnvVar, ...] = (
    EnvVar(
        "TASK",
        DEFAULT_RECIPE,
        "the recipe to train (trm/training/recipes.py): "
        + ", ".join(f"{r.name} ({r.summary})" for r in RECIPES.values()),
    ),
    EnvVar(
        "RUN_NAME",
        "trm-$TASK",
        "stable run id; the same RUN_NAME resumes from its newest complete checkpoint (the default adds "
        "-<arch> when TRAIN_OVERRIDES swap the recipe's arch, e.g. trm-arc2-urm; TASK=urm-arc2 is trm-urm-arc2)",
    ),
    EnvVar(
        "WORKSPACE",
        "/workspace",
        "parent of the three directories below (mount a persistent volume here)",
        "paths",
    ),
    EnvVar("DATA_DIR", "$WORKSPACE/data", "datasets; built there on first use, then verified", "paths"),
    EnvVar(
        "CHECKPOINT_DIR",
        "$WORKSPACE/checkpoints",
        "run directories: <dir>/$RUN_NAME holds checkpoints, metrics, logs (launch/)",
        "paths",
    ),
    EnvVar("ARTIFACTS_DIR", "$WORKSPACE/artifacts", "handoff bundles: <dir>/$RUN_NAME", "paths"),
    EnvVar("NUM_GPUS", "all GPUs nvidia-smi lists", "GPUs per node to use; 0 trains on CPU", "hardware"),
    EnvVar("CPU_PROCS", "1", "processes (gloo) when training on CPU", "hardware"),
    EnvVar(
        "GLOBAL_BATCH_SIZE",
        "the recipe's: " + ", ".join(f"{r.name} {r.global_batch_size}" for r in RECIPES.values()),
        "examples per optimizer step over all GPUs; fixed by the recipe, changing it changes the training math",
        "hardware",
    ),
    EnvVar(
        "MICRO_BATCH_SIZE",
        "from the hardware table",
        "per-GPU examples per forward pass (memory only)",
        "hardware",
    ),
    EnvVar("COMPILE", "auto", "torch.compile: auto (the hardware tier's choice), true or false", "hardware"),
    EnvVar(
        "PROBE",
        "0",
        "1: train PROBE_STEPS steps first, record peak memory and step time, halve the "
        "micro-batch on out-of-memory",
        "hardware",
    ),
    EnvVar("PROBE_STEPS", "20", "steps of the probe", "hardware"),
    EnvVar(
        "NNODES",
        "1",
        "nodes; above 1 the rendezvous comes from MASTER_ADDR/MASTER_PORT/NODE_RANK",
        "hardware",
    ),
    EnvVar("NODE_RANK", "0", "this node's rank (0 builds the dataset, the others wait for it)", "hardware"),
    EnvVar("MASTER_ADDR", "(empty)", "address of node 0 (multi-node only)", "hardware"),
    EnvVar("MASTER_PORT", "29500", "port on node 0 (multi-node only)", "hardware"),
    EnvVar(
        "CHECKPOINT_KEEP",
        "3",
        "newest complete checkpoints kept of each kind, rolling and evaluation, besides the best (preflight needs checkpoint x (2 x keep + 2) free)",
    ),
    EnvVar(
        "SMOKE_STEPS",
        "3",
        "steps of the real config on the real GPUs before the long run (0 skips; skipped when resuming)",
    ),
    EnvVar(
        "MAX_RESTARTS",
        "3",
        "restarts after the trainer saved and exited 75, or hung (exit 77), without being asked to stop",
    ),
    EnvVar("SHUTDOWN_TIMEOUT", "300", "seconds workers get to save after SIGTERM before torchrun kills them"),
    EnvVar(
        "TRAIN_OVERRIDES",
        "(empty)",
        "extra trainer overrides, e.g. 'lr=2e-4 eval_interval=400' (arguments "
        "after the options are appended too)",
    ),
    EnvVar("PREFLIGHT", "1", "0 skips the preflight checks (logged; not for production)"),
    EnvVar(
        "MAX_HOURS",
        "(empty: no limit)",
        "cost guard: hours of the whole run (counted from data verification in every launcher session, "
        "restart and resume together, kept in RUN_DIR/launch/ledger.json) after which the trainer is asked to "
        "save and stop (exit 79); a launch of a run that has spent them does not train and exits 0: raise "
        "MAX_HOURS to continue",
        "cost",
    ),
    EnvVar(
        "CONTINUE_RUN",
        "(empty)",
        "a run that ended with exit 78 (NaN/Inf) or 2 (config error) does not train again with the same "
        "configuration (a restart exits 0 and says why); set it to the end id printed then to start it once more",
        "cost",
    ),
    EnvVar(
        "STOP_MARGIN_MINUTES",
        "10",
        "the cost guard stops this long before MAX_HOURS, leaving time to save",
        "cost",
    ),
    EnvVar(
        "GPU_HOURLY_USD",
        "(empty)",
        "price of one GPU-hour; when set the running cost estimate is logged",
        "cost",
    ),
    EnvVar("COST_LOG_MINUTES", "30", "how often the cost estimate is logged", "cost"),
    EnvVar(
        "ON_END",
        "keep",
        "when the run finished (exit 0): keep, stop or destroy the machine, after the handoff bundle and the "
        "final sync; destroy needs SYNC_TO (the disk goes with it)",
        "release",
    ),
    EnvVar(
        "ON_BUDGET",
        "$ON_END",
        "when MAX_HOURS stopped the run (exit 79): keep, stop or destroy; any other exit keeps the machine",
        "release",
    ),
    EnvVar(
        "RELEASE_VIA",
        "auto",
        "how to release: vast (vastai stop|destroy instance $CONTAINER_ID; Vast.ai sets CONTAINER_ID and "
        "CONTAINER_API_KEY), primeintellect (DELETE of pod PRIME_POD_ID), kubernetes (the exit code ends the "
        "Job), host (shutdown -h now; never chosen by auto); auto detects the first three",
        "release",
    ),
    EnvVar("PRIME_POD_ID", "(empty)", "Prime Intellect pod to terminate (`prime pods list`)", "release"),
    EnvVar(
        "PRIME_API_KEY_FILE",
        "(empty)",
        "file holding the Prime Intellect API key, or PRIME_API_KEY in the environment (never logged or "
        "recorded)",
        "release",
    ),
    EnvVar("PRIME_API_URL", "https://api.primeintellect.ai", "Prime Intellect API base URL", "release"),
    EnvVar(
        "SYNC_TO",
        "(empty: off)",
        "rclone remote:path; the run (complete checkpoints, metrics, logs, handoff bundle) is copied to "
        "$SYNC_TO/$RUN_NAME during the run and at the end; credentials belong in rclone's config or "
        "RCLONE_CONFIG_* variables",
        "sync",
    ),
    EnvVar("SYNC_EVERY_MINUTES", "15", "how often the run is copied to SYNC_TO while it trains", "sync"),
    EnvVar(
        "SYNC_PRUNE",
        "on",
        "on: after each copy, delete from SYNC_TO the checkpoints this run pruned locally (CHECKPOINT_KEEP), "
        "never the newest complete one there; off: the remote keeps every checkpoint",
        "sync",
    ),
    EnvVar(
        "WANDB",
        "off",
        "Weights & Biases: off, online (needs WANDB_API_KEY or WANDB_API_KEY_FILE) or offline (files under "
        "the run directory's wandb/, `wandb sync` them later)",
        "tracking",
    ),
    EnvVar(
        "TENSORBOARD",
        "(auto: 1 where the tensorboard package is installed)",
        "1: the trainer writes TensorBoard event files into RUN_DIR/tensorboard (a few scalars per log step; "
        "serve them with `python -m trm tensorboard`); 0: none. A tensorboard= trainer override wins",
        "tracking",
    ),
    EnvVar("WANDB_PROJECT", "trm-$TASK", "W&B project (the trainer's project_name)", "tracking"),
    EnvVar(
        "WANDB_ENTITY", "(empty: the key's default entity)", "W&B team or user the run belongs to", "tracking"
    ),
    EnvVar(
        "WANDB_RUN_GROUP",
        "(empty)",
        "W&B group of the run (e.g. the suite or sweep it belongs to)",
        "tracking",
    ),
    EnvVar(
        "WANDB_API_KEY_FILE",
        "(empty)",
        "file holding the W&B API key (a mounted Kubernetes Secret), or WANDB_API_KEY in the environment; "
        "read by the trainer, never logged or recorded",
        "tracking",
    ),
    EnvVar("USE_TMUX", "0", "1: run inside a detached tmux session named $RUN_NAME (attach command printed)"),
    EnvVar("PYTHON", "python", "interpreter with trm-stack installed"),
)
# Set by the trm images (read by preflight and the handoff bundle), listed for completeness; except
# TRM_IMAGE_DIGEST: an image cannot know its own digest, so whoever starts it passes it from
# docker/images.lock.json (`python -m trm jobs pin` into the Jobs, `-e TRM_IMAGE_DIGEST` in the runbooks).
IMAGE_VARS: tuple[EnvVar, ...] = (
    EnvVar("TRM_IMAGE_CUDA", "the torch build's CUDA", "CUDA version of the image (driver check)", "image"),
    EnvVar(
        "TRM_IMAGE_SM_LIST",
        "torch.cuda.get_arch_list()",
        "SMs the image is built for, e.g. '80 89 90'",
        "image",
    ),
    EnvVar("TRM_ADAM_ATAN2_SM_LIST", "$TRM_IMAGE_SM_LIST", "SMs of the baked adam-atan2 extension", "image"),
    EnvVar(
        "TRM_IMAGE_OPTIMIZER_BACKEND",
        "(empty)",
        "AdamATan2 the image ships: ext (adam-atan2 extension) or torch (trm's, no extension: the CUDA 12.8 "
        "images); preflight reports it",
        "image",
    ),
    EnvVar(
        "TRM_IMAGE_DIGEST",
        "(empty)",
        "image digest recorded in handoff.json; passed by whoever starts the image (jobs pin, the runbooks' "
        "docker run), never baked in",
        "image",
    ),
)
ALL_VARS = ENV_VARS + IMAGE_VARS


def help_text(script: str = "scripts/train_prod.sh") -> str:
    """The `--help` text of the launch script."""
    lines = [
        f"usage: [VAR=value …] {script} [--dry-run] [--help] [TRAINER_OVERRIDE …]",
        "",
        "From a booted GPU host to a resumable training run with a handoff bundle: preflight, dataset build +",
        "verification, hardware tier selection, smoke gate, torchrun (auto-resume, bounded restarts on exit 75 and 77),",
        "cost guard, and a handoff bundle in $ARTIFACTS_DIR/$RUN_NAME at exit. Running the same command again",
        "continues the run from its newest complete checkpoint.",
        "",
        "  --dry-run   print every step, the hardware tier, the resolved overrides and the torchrun command;",
        "              run nothing (works without GPUs when an nvidia-smi answers)",
        "  --help      this text",
        "",
        "environment (default in brackets):",
    ]
    width = max(len(v.name) for v in ALL_VARS)
    for var in ALL_VARS:
        if var is IMAGE_VARS[0]:
            lines += ["", "set by the trm images:"]
        lines.append(f"  {var.name:<{width}}  {var.help} [{var.default}]")
    return "\n".join(lines)


def markdown_table() -> str:
    """The README table of the same variables."""
    rows = ["| variable | default | meaning |", "| --- | --- | --- |"]
    for var in ALL_VARS:
        rows.append(f"| `{var.name}` | {var.default} | {var.help.replace('|', '/')} |")
    return "\n".join(rows)


def _int(env: Mapping[str, str], name: str, default: int | None, minimum: int = 0) -> int | None:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise TRMError(
            f"{name}={raw!r} is not an integer; set {name} to a whole number or unset it"
        ) from None
    if value < minimum:
        raise TRMError(f"{name}={value} must be >= {minimum}")
    return value


def _float(env: Mapping[str, str], name: str) -> float | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise TRMError(f"{name}={raw!r} is not a number; set e.g. {name}=2.5 or unset it") from None
    if value < 0:
        raise TRMError(f"{name}={value} must be >= 0")
    return value


def arch_override(overrides: tuple[str, ...]) -> str | None:
    """The `arch=<name>` among the trainer overrides (the last one wins, as in the trainer), if any."""
    names = [o.partition("=")[2] for o in overrides if o.partition("=")[0].lstrip("+") == "arch"]
    return names[-1] if names else None


def default_run_name(recipe: str, overrides: tuple[str, ...]) -> str:
    """trm-<recipe>, plus -<arch> when the overrides swap the recipe's architecture (TASK=arc2 with arch=urm
    is another run than TRM's arc2: it must not resume TRM's checkpoints)."""
    from trm.model.registry import get_spec

    name = f"trm-{recipe}"
    arch = arch_override(overrides)
    if arch is not None:
        try:
            arch = get_spec(arch).name
        except TRMError:
            return name  # the trainer names the unknown architecture; the run name does not matter then
        if arch != RECIPES[recipe].arch:
            name += f"-{arch}"
    return name


def tensorboard_installed() -> bool:
    """Whether this Python has the tensorboard package (the trm images do), so event files cost nothing extra."""
    return importlib.util.find_spec("tensorboard") is not None


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise TRMError(f"{name}={raw!r}: use 1 or 0")


@dataclass(frozen=True, kw_only=True)
class LaunchSettings:
    """The resolved environment of one launch."""

    recipe: str  # TASK=
    run_name: str
    data_dir: Path
    checkpoint_dir: Path
    artifacts_dir: Path
    num_gpus: int | None
    cpu_procs: int
    global_batch_size: int | None
    micro_batch_size: int | None
    compile: bool | None
    """COMPILE: None lets the hardware tier choose."""
    probe: bool
    probe_steps: int
    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int
    checkpoint_keep: int
    smoke_steps: int
    max_restarts: int
    shutdown_timeout: int
    train_overrides: tuple[str, ...]
    preflight: bool
    max_hours: float | None
    stop_margin_minutes: float
    gpu_hourly_usd: float | None
    cost_log_minutes: float
    wandb: str
    wandb_project: str
    tensorboard: bool = False
    continue_run: str = ""
    """CONTINUE_RUN: the end id (trm.launch.after_run.ledger) this launch may train after."""
    """TENSORBOARD: the trainer writes event files (default: where the tensorboard package is installed)."""
    wandb_entity: str = ""
    """WANDB_ENTITY (empty: the key's default)."""
    wandb_run_group: str = ""
    """WANDB_RUN_GROUP (empty: none)."""
    wandb_api_key_file: str = ""
    """WANDB_API_KEY_FILE: the path only; the trainer reads the key."""
    use_tmux: bool
    python: str
    sync_to: str = ""
    """SYNC_TO: the rclone remote:path the run directory is copied under (empty: off)."""
    sync_every_minutes: float = 15.0
    sync_prune: bool = True
    """SYNC_PRUNE: delete remote checkpoints that the run directory no longer has (trm.launch.after_run.sync)."""
    release: ReleasePolicy = field(default_factory=ReleasePolicy)
    cli_overrides: tuple[str, ...] = ()
    """Overrides given as script arguments (also part of train_overrides; kept for the resume command)."""

    @property
    def run_dir(self) -> Path:
        """CHECKPOINT_DIR/RUN_NAME: the trainer's checkpoint_path."""
        return self.checkpoint_dir / self.run_name

    @property
    def launch_dir(self) -> Path:
        """The launcher's records inside the run directory."""
        return self.run_dir / "launch"

    @property
    def artifacts_run_dir(self) -> Path:
        """ARTIFACTS_DIR/RUN_NAME: the handoff bundle."""
        return self.artifacts_dir / self.run_name

    @property
    def sync_remote(self) -> str:
        """SYNC_TO/RUN_NAME: where this run is copied (empty when SYNC_TO is unset)."""
        return f"{self.sync_to.rstrip('/')}/{self.run_name}" if self.sync_to else ""

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] = os.environ, extra_overrides: tuple[str, ...] = ()
    ) -> LaunchSettings:
        """Read and check every variable; errors name the variable and the fix."""
        recipe = env.get("TASK", "").strip() or DEFAULT_RECIPE
        if recipe not in RECIPES:
            raise TRMError(f"TASK={recipe!r} is not a recipe; use one of {', '.join(RECIPES)}")
        workspace = Path(env.get("WORKSPACE", "").strip() or "/workspace")
        wandb = (env.get("WANDB", "").strip() or "off").lower()
        if wandb not in ("off", "online", "offline"):
            raise TRMError(f"WANDB={wandb!r}: use off, online or offline")
        if wandb == "online" and not wandb_api_key(env):
            raise TRMError(
                "WANDB=online needs WANDB_API_KEY in the environment or WANDB_API_KEY_FILE naming a mounted "
                "Secret file (never a file in the repo), or set WANDB=offline / off"
            )
        nnodes = _int(env, "NNODES", 1, minimum=1) or 1
        master_addr = env.get("MASTER_ADDR", "").strip()
        if nnodes > 1 and not master_addr:
            raise TRMError(
                f"NNODES={nnodes} needs MASTER_ADDR (the address of node 0) and NODE_RANK on each node"
            )
        max_hours = _float(env, "MAX_HOURS")
        margin = _float(env, "STOP_MARGIN_MINUTES")
        margin = 10.0 if margin is None else margin
        if max_hours is not None and margin >= max_hours * 60:
            raise TRMError(
                f"STOP_MARGIN_MINUTES={margin:g} leaves no training time within MAX_HOURS={max_hours:g}; "
                "lower STOP_MARGIN_MINUTES or raise MAX_HOURS"
            )
        try:
            overrides = tuple(shlex.split(env.get("TRAIN_OVERRIDES", ""))) + tuple(extra_overrides)
        except ValueError as err:
            raise TRMError(f"TRAIN_OVERRIDES cannot be split into words ({err}); check its quoting") from None
        sync_to = check_remote(env.get("SYNC_TO", ""))
        return cls(
            recipe=recipe,
            run_name=env.get("RUN_NAME", "").strip() or default_run_name(recipe, overrides),
            data_dir=Path(env.get("DATA_DIR", "").strip() or workspace / "data"),
            checkpoint_dir=Path(env.get("CHECKPOINT_DIR", "").strip() or workspace / "checkpoints"),
            artifacts_dir=Path(env.get("ARTIFACTS_DIR", "").strip() or workspace / "artifacts"),
            num_gpus=_int(env, "NUM_GPUS", None),
            cpu_procs=_int(env, "CPU_PROCS", 1, minimum=1) or 1,
            global_batch_size=_int(env, "GLOBAL_BATCH_SIZE", None, minimum=1),
            micro_batch_size=_int(env, "MICRO_BATCH_SIZE", None, minimum=1),
            compile=parse_compile(env.get("COMPILE", ""), source="COMPILE"),
            probe=_flag(env, "PROBE", False),
            probe_steps=_int(env, "PROBE_STEPS", 20, minimum=2) or 20,
            nnodes=nnodes,
            node_rank=_int(env, "NODE_RANK", 0) or 0,
            master_addr=master_addr,
            master_port=_int(env, "MASTER_PORT", 29500, minimum=1) or 29500,
            checkpoint_keep=_int(env, "CHECKPOINT_KEEP", 3, minimum=1) or 3,
            smoke_steps=_int(env, "SMOKE_STEPS", 3) or 0,
            max_restarts=_int(env, "MAX_RESTARTS", 3) or 0,
            shutdown_timeout=_int(env, "SHUTDOWN_TIMEOUT", 300, minimum=1) or 300,
            train_overrides=overrides,
            preflight=_flag(env, "PREFLIGHT", True),
            max_hours=max_hours,
            stop_margin_minutes=margin,
            gpu_hourly_usd=_float(env, "GPU_HOURLY_USD"),
            cost_log_minutes=_float(env, "COST_LOG_MINUTES") or 30.0,
            wandb=wandb,
            tensorboard=_flag(env, "TENSORBOARD", tensorboard_installed()),
            continue_run=env.get("CONTINUE_RUN", "").strip(),
            wandb_project=env.get("WANDB_PROJECT", "").strip() or f"trm-{recipe}",
            wandb_entity=env.get("WANDB_ENTITY", "").strip(),
            wandb_run_group=env.get("WANDB_RUN_GROUP", "").strip(),
            wandb_api_key_file=env.get("WANDB_API_KEY_FILE", "").strip(),
            use_tmux=_flag(env, "USE_TMUX", False),
            python=env.get("PYTHON", "").strip() or "python",
            cli_overrides=tuple(extra_overrides),
            sync_to=sync_to,
            sync_every_minutes=_float(env, "SYNC_EVERY_MINUTES") or 15.0,
            sync_prune=_flag(env, "SYNC_PRUNE", True),
            release=policy_from_env(env, sync_to=sync_to),
        )
