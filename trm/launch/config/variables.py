"""The environment variables of `python -m trm launch` (and `scripts/train_prod.sh`), each declared once:
its parser, its default and its help.

`LaunchSettings.from_env` reads them through `read_all`, `--help` is `help_text`, the environment table of
docs/launch.md is `markdown_table` (a test keeps the page equal to it), and the defaults shown there are the
values an unset variable gets.
"""

from __future__ import annotations

import importlib.util
import math
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trm.compile_setting import parse_compile
from trm.errors import TRMError
from trm.launch.provider.release import ACTIONS, PRIME_API_URL, PROVIDERS
from trm.launch.storage.sync import check_remote
from trm.secrets import redact
from trm.training.recipes import RECIPES

Parser = Callable[[str, str], Any]
"""(variable name, its stripped non-empty value) -> the setting; raises TRMError naming the fix."""

DEFAULT_RECIPE = "arc2"  # TASK when unset
MAX_HOURS_LIMIT = 24 * 366.0  # a year: a larger MAX_HOURS is a typo, not a budget
MINUTES_LIMIT = 24 * 60 * 366.0  # the same year, for the *_MINUTES settings
GPU_HOURLY_USD_LIMIT = 1000.0  # no GPU-hour is sold above it: a larger price is a typo (cents as dollars)


# -- parsers -------------------------------------------------------------------------------------------
def text(_name: str, raw: str) -> str:
    return raw


def integer(minimum: int = 0, maximum: int | None = None) -> Parser:
    def parse(name: str, raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise TRMError(
                f"{name}={raw!r} is not an integer; set {name} to a whole number or unset it"
            ) from None
        if value < minimum:
            raise TRMError(f"{name}={value} must be >= {minimum}")
        if maximum is not None and value > maximum:
            raise TRMError(f"{name}={value} must be <= {maximum}")
        return value

    return parse


def number(positive: bool = False, maximum: float | None = None) -> Parser:
    """A finite decimal number, >= 0 (> 0 when `positive`), at most `maximum`: NaN and infinities are
    rejected here, so that no later comparison or deadline computed from them can misbehave."""

    def parse(name: str, raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise TRMError(f"{name}={raw!r} is not a number; set e.g. {name}=2.5 or unset it") from None
        if not math.isfinite(value):
            raise TRMError(
                f"{name}={raw!r} is not a finite number; set e.g. {name}=2.5, or unset it for the default"
            )
        if value < 0 or (positive and value == 0):
            raise TRMError(
                f"{name}={value:g} must be {'> 0' if positive else '>= 0'}; unset it for the default"
            )
        if maximum is not None and value > maximum:
            raise TRMError(f"{name}={value:g} must be <= {maximum:g}; unset it for the default")
        return value

    return parse


def flag(name: str, raw: str) -> bool:
    word = raw.lower()
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("0", "false", "no", "off"):
        return False
    raise TRMError(f"{name}={word!r}: use 1 or 0")


def choice(options: tuple[str, ...], *, lower: bool = True, what: str = "") -> Parser:
    """One of `options` (compared in lower case unless `lower` is False); `what` says what it is not."""

    def parse(name: str, raw: str) -> str:
        word = raw.lower() if lower else raw
        if word not in options:
            raise TRMError(f"{name}={word!r}{what}: use one of {', '.join(options)}")
        return word

    return parse


def words(name: str, raw: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(raw))
    except ValueError as err:
        raise TRMError(f"{name} cannot be split into words ({err}); check its quoting") from None


def compile_choice(name: str, raw: str) -> bool | None:
    return parse_compile(raw, source=name)


def remote(name: str, raw: str) -> str:
    return check_remote(raw, name)


def tensorboard_installed() -> bool:
    """Whether this Python has the tensorboard package (the trm images do), so event files cost nothing extra."""
    return importlib.util.find_spec("tensorboard") is not None


# -- declarations --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Derived:
    """A default computed from the variables read before it (`values`, by variable name)."""

    compute: Callable[[dict[str, Any]], Any]


@dataclass(frozen=True)
class EnvVar:
    """One documented variable: how it is parsed, what it is when unset, and what it does."""

    name: str
    help: str
    group: str = "run"
    parse: Parser = text
    unset: Any = ""
    """The value when the variable is unset or empty (a Derived: computed from other variables)."""
    shown: str | None = None
    """The default as --help and docs/launch.md show it, where the value alone does not say it."""
    field: str | None = ""
    """The LaunchSettings field it sets ("": its name in lower case; None: read where it is used)."""
    this_machine: bool = False
    """It names the machine the launch runs on (a pod id): left out of the resume command, which may run on
    another machine, where it would name the wrong one (the release would terminate the old pod)."""

    @property
    def default(self) -> str:
        """The default as users see it."""
        if self.shown is not None:
            return self.shown
        value = self.unset
        if isinstance(value, bool):
            return "1" if value else "0"
        if isinstance(value, float):
            return f"{value:g}"
        if value in ("", ()):
            return "(empty)"
        return str(value)

    @property
    def setting(self) -> str | None:
        """The LaunchSettings field this variable fills (None: read where it is used)."""
        return self.name.lower() if self.field == "" else self.field

    def read(self, env: Mapping[str, str], values: dict[str, Any]) -> Any:
        """The value in `env`, parsed, else the default (`values`: what was read before, for a Derived)."""
        raw = env.get(self.name, "").strip()
        if raw:
            if redact(raw) != raw:
                raise TRMError(
                    f"{self.name} holds credentials (a token, or a URL's password or token; value not shown): "
                    "launch variables are recorded in the resume command, plan.json and handoff.json. Keep keys "
                    "in their own variables (WANDB_API_KEY, HF_TOKEN, RCLONE_CONFIG_*) or files, rotate this one "
                    "if it is real, and rerun"
                )
            return self.parse(self.name, raw)
        return self.unset.compute(values) if isinstance(self.unset, Derived) else self.unset


def _in_workspace(sub: str) -> Derived:
    return Derived(lambda v: str(Path(v["WORKSPACE"]) / sub))


ENV_VARS: tuple[EnvVar, ...] = (
    EnvVar(
        "TASK",
        "the recipe to train (trm/training/recipes.py): "
        + ", ".join(f"{r.name} ({r.summary})" for r in RECIPES.values()),
        parse=choice(tuple(RECIPES), lower=False, what=" is not a recipe"),
        unset=DEFAULT_RECIPE,
        field="recipe",
    ),
    EnvVar(
        "RUN_NAME",
        "stable run id; the same RUN_NAME resumes from its newest complete checkpoint (the default adds "
        "-<arch> when TRAIN_OVERRIDES swap the recipe's arch, e.g. trm-arc2-urm; TASK=urm-arc2 is trm-urm-arc2)",
        unset=Derived(lambda v: default_run_name(v["TASK"], v["TRAIN_OVERRIDES"])),
        shown="trm-$TASK",
    ),
    EnvVar(
        "WORKSPACE",
        "parent of the three directories below (mount a persistent volume here)",
        "paths",
        unset="/workspace",
        field=None,
    ),
    EnvVar(
        "DATA_DIR",
        "datasets; built there on first use, then verified",
        "paths",
        unset=_in_workspace("data"),
        shown="$WORKSPACE/data",
    ),
    EnvVar(
        "CHECKPOINT_DIR",
        "run directories: <dir>/$RUN_NAME holds checkpoints, metrics, logs (launch/)",
        "paths",
        unset=_in_workspace("checkpoints"),
        shown="$WORKSPACE/checkpoints",
    ),
    EnvVar(
        "ARTIFACTS_DIR",
        "handoff bundles: <dir>/$RUN_NAME",
        "paths",
        unset=_in_workspace("artifacts"),
        shown="$WORKSPACE/artifacts",
    ),
    EnvVar(
        "NUM_GPUS",
        "GPUs per node to use; 0 trains on CPU",
        "hardware",
        parse=integer(),
        unset=None,
        shown="all GPUs nvidia-smi lists",
    ),
    EnvVar("CPU_PROCS", "processes (gloo) when training on CPU", "hardware", parse=integer(1), unset=1),
    EnvVar(
        "GLOBAL_BATCH_SIZE",
        "examples per optimizer step over all GPUs; fixed by the recipe, changing it changes the training math",
        "hardware",
        parse=integer(1),
        unset=None,
        shown="the recipe's: " + ", ".join(f"{r.name} {r.global_batch_size}" for r in RECIPES.values()),
    ),
    EnvVar(
        "MICRO_BATCH_SIZE",
        "per-GPU examples per forward pass (memory only); halved by the launcher when the trainer runs out of "
        "memory",
        "hardware",
        parse=integer(1),
        unset=None,
        shown="from the hardware table",
    ),
    EnvVar(
        "COMPILE",
        "torch.compile: auto (the hardware tier's choice), true or false",
        "hardware",
        parse=compile_choice,
        unset=None,
        shown="auto",
    ),
    EnvVar(
        "PROBE",
        "1: train PROBE_STEPS steps first, record peak memory and step time, halve the "
        "micro-batch on out-of-memory",
        "hardware",
        parse=flag,
        unset=False,
    ),
    EnvVar("PROBE_STEPS", "steps of the probe", "hardware", parse=integer(2), unset=20),
    EnvVar(
        "NNODES",
        "nodes; above 1 the rendezvous comes from MASTER_ADDR/MASTER_PORT/NODE_RANK",
        "hardware",
        parse=integer(1),
        unset=1,
    ),
    EnvVar(
        "NODE_RANK",
        "this node's rank (0 builds the dataset, the others wait for it: checked every 10 s, at most 60 min, "
        "then exit 2; at once when node 0 gives up: its session ends with a code no orchestrator retries)",
        "hardware",
        parse=integer(),
        unset=0,
    ),
    EnvVar("MASTER_ADDR", "address of node 0 (multi-node only)", "hardware"),
    EnvVar(
        "MASTER_PORT", "port on node 0 (multi-node only)", "hardware", parse=integer(1, 65535), unset=29500
    ),
    EnvVar(
        "CHECKPOINT_KEEP",
        "newest complete checkpoints kept of each kind, rolling and evaluation, besides the best (preflight "
        "needs checkpoint x (2 x keep + best + 1) free; best: 1, a subset run's best.top_k)",
        parse=integer(1),
        unset=3,
    ),
    EnvVar(
        "SMOKE_STEPS",
        "steps of the real config on the real GPUs before the long run (0 skips; skipped when resuming)",
        parse=integer(),
        unset=3,
    ),
    EnvVar(
        "MAX_RESTARTS",
        "restarts after the trainer saved and exited 75, or hung (exit 77), without being asked to stop (an "
        "out-of-memory restart at half the micro-batch, exit 80, is not counted)",
        parse=integer(),
        unset=3,
    ),
    EnvVar(
        "SHUTDOWN_TIMEOUT",
        "seconds the ranks get to save after a stop request (SIGTERM, MAX_HOURS) before torchrun is stopped, "
        "on every torch version",
        parse=integer(1),
        unset=300,
    ),
    EnvVar(
        "TRAIN_OVERRIDES",
        "extra trainer overrides, e.g. 'lr=2e-4 eval_interval=400' (arguments "
        "after the options are appended too); one holding a secret-like value is refused: keys go in the "
        "environment (WANDB_API_KEY, HF_TOKEN)",
        parse=words,
        unset=(),
    ),
    EnvVar("PREFLIGHT", "0 skips the preflight checks (logged; not for production)", parse=flag, unset=True),
    EnvVar(
        "MAX_HOURS",
        "cost guard: hours of the whole run (counted from data verification in every launcher session, "
        "restart and resume together, kept in RUN_DIR/launch/ledger.json) after which the trainer is asked to "
        "save and stop (exit 79); a launch of a run that has spent them does not train and exits 0: raise "
        "MAX_HOURS to continue",
        "cost",
        parse=number(positive=True, maximum=MAX_HOURS_LIMIT),
        unset=None,
        shown="(empty: no limit)",
    ),
    EnvVar(
        "CONTINUE_RUN",
        "a run that ended with exit 78 (NaN/Inf) or 2 (config error) does not train again with the same "
        "configuration (a restart exits 0 and says why); set it to the end id printed then to start it once more",
        "cost",
    ),
    EnvVar(
        "STOP_MARGIN_MINUTES",
        "the cost guard stops this long before MAX_HOURS, leaving time to save",
        "cost",
        parse=number(maximum=MINUTES_LIMIT),
        unset=10.0,
    ),
    EnvVar(
        "GPU_HOURLY_USD",
        "price of one GPU-hour; when set the running cost estimate is logged",
        "cost",
        parse=number(maximum=GPU_HOURLY_USD_LIMIT),
        unset=None,
        shown="(empty)",
    ),
    EnvVar(
        "COST_LOG_MINUTES",
        "how often the cost estimate is logged",
        "cost",
        parse=number(positive=True, maximum=MINUTES_LIMIT),
        unset=30.0,
    ),
    EnvVar(
        "ON_END",
        "when the run finished (exit 0): keep, stop or destroy the machine, after the handoff bundle and the "
        "final sync; destroy needs SYNC_TO (the disk goes with it)",
        "release",
        parse=choice(ACTIONS),
        unset="keep",
        field=None,
    ),
    EnvVar(
        "ON_BUDGET",
        "when MAX_HOURS stopped the run (exit 79): keep, stop or destroy; any other exit keeps the machine",
        "release",
        parse=choice(ACTIONS),
        unset=Derived(lambda v: v["ON_END"]),
        shown="$ON_END",
        field=None,
    ),
    EnvVar(
        "RELEASE_VIA",
        "how to release: vast (vastai stop|destroy instance $CONTAINER_ID; Vast.ai sets CONTAINER_ID and "
        "CONTAINER_API_KEY), primeintellect (DELETE of pod PRIME_POD_ID), kubernetes (the exit code ends the "
        "Job), host (shutdown -h now; never chosen by auto); auto detects the first three",
        "release",
        parse=choice(PROVIDERS),
        unset="auto",
        field=None,
    ),
    EnvVar(
        "PRIME_POD_ID",
        "Prime Intellect pod to terminate: this pod's own id (`prime pods list`); never carried into the "
        "resume command, which may run on another pod",
        "release",
        field=None,
        this_machine=True,
    ),
    EnvVar(
        "PRIME_API_KEY_FILE",
        "file holding the Prime Intellect API key, or PRIME_API_KEY in the environment (never logged or "
        "recorded)",
        "release",
        field=None,
    ),
    EnvVar("PRIME_API_URL", "Prime Intellect API base URL", "release", unset=PRIME_API_URL, field=None),
    EnvVar(
        "SYNC_TO",
        "rclone remote:path; the run (complete checkpoints, metrics, logs, handoff bundle) is copied to "
        "$SYNC_TO/$RUN_NAME during the run and at the end; credentials belong in rclone's config or "
        "RCLONE_CONFIG_* variables (a SYNC_TO holding a key, password, token or URL credentials is refused)",
        "sync",
        parse=remote,
        shown="(empty: off)",
    ),
    EnvVar(
        "SYNC_EVERY_MINUTES",
        "how often the run is copied to SYNC_TO while it trains",
        "sync",
        parse=number(positive=True, maximum=MINUTES_LIMIT),
        unset=15.0,
    ),
    EnvVar(
        "SYNC_PRUNE",
        "on: after each copy, delete from SYNC_TO the checkpoints this run pruned locally (CHECKPOINT_KEEP), "
        "never the newest complete one there; off: the remote keeps every checkpoint",
        "sync",
        parse=flag,
        unset=True,
        shown="on",
    ),
    EnvVar(
        "WANDB",
        "Weights & Biases: off, online (needs WANDB_API_KEY or WANDB_API_KEY_FILE) or offline (files under "
        "the run directory's wandb/, `wandb sync` them later)",
        "tracking",
        parse=choice(("off", "online", "offline")),
        unset="off",
    ),
    EnvVar(
        "TENSORBOARD",
        "1: the trainer writes TensorBoard event files into RUN_DIR/tensorboard (a few scalars per log step; "
        "serve them with `python -m trm tensorboard`); 0: none. A tensorboard= trainer override wins",
        "tracking",
        parse=flag,
        unset=Derived(lambda _v: tensorboard_installed()),
        shown="(auto: 1 where the tensorboard package is installed)",
    ),
    EnvVar(
        "WANDB_PROJECT",
        "W&B project (the trainer's project_name)",
        "tracking",
        unset=Derived(lambda v: f"trm-{v['TASK']}"),
        shown="trm-$TASK",
    ),
    EnvVar(
        "WANDB_ENTITY",
        "W&B team or user the run belongs to",
        "tracking",
        shown="(empty: the key's default entity)",
    ),
    EnvVar("WANDB_RUN_GROUP", "W&B group of the run (e.g. the suite or sweep it belongs to)", "tracking"),
    EnvVar(
        "WANDB_API_KEY_FILE",
        "file holding the W&B API key (a mounted Kubernetes Secret), or WANDB_API_KEY in the environment; "
        "read by the trainer, never logged or recorded",
        "tracking",
    ),
    EnvVar(
        "USE_TMUX",
        "1: run inside a detached tmux session named $RUN_NAME (attach command printed)",
        parse=flag,
        unset=False,
    ),
    EnvVar(
        "PYTHON",
        "interpreter with trm-stack installed; the launcher's steps and torchrun run it (train_prod.sh: the "
        "checkout's .venv when it exists)",
        unset="python",
    ),
)
# Set by the trm images (read by preflight and the handoff bundle), listed for completeness; except
# TRM_IMAGE_DIGEST: an image cannot know its own digest, so whoever starts it passes it from
# docker/images.lock.json (`python -m tools.jobs pin` into the Jobs, `-e TRM_IMAGE_DIGEST` in the runbooks).
IMAGE_VARS: tuple[EnvVar, ...] = (
    EnvVar(
        "TRM_IMAGE_CUDA",
        "CUDA version of the image (driver check)",
        "image",
        shown="the torch build's CUDA",
        field=None,
    ),
    EnvVar(
        "TRM_IMAGE_SM_LIST",
        "SMs the image is built for, e.g. '80 89 90'",
        "image",
        shown="torch.cuda.get_arch_list()",
        field=None,
    ),
    EnvVar(
        "TRM_ADAM_ATAN2_SM_LIST",
        "SMs of the baked adam-atan2 extension",
        "image",
        shown="$TRM_IMAGE_SM_LIST",
        field=None,
    ),
    EnvVar(
        "TRM_IMAGE_OPTIMIZER_BACKEND",
        "AdamATan2 the image ships: ext (adam-atan2 extension) or torch (trm's, no extension: the CUDA 12.8 "
        "images); preflight reports it",
        "image",
        field=None,
    ),
    EnvVar(
        "TRM_IMAGE_DIGEST",
        "image digest recorded in handoff.json; passed by whoever starts the image (jobs pin, the runbooks' "
        "docker run), never baked in",
        "image",
        field=None,
    ),
)
ALL_VARS = ENV_VARS + IMAGE_VARS
BY_NAME = {var.name: var for var in ALL_VARS}


def read_all(env: Mapping[str, str], extra_overrides: tuple[str, ...] = ()) -> dict[str, Any]:
    """Every launch variable's value by name: parsed from `env`, else its default (the Derived ones after
    the others, so they may use any of them). `extra_overrides` (the command's arguments) follow
    TRAIN_OVERRIDES."""
    values: dict[str, Any] = {}
    for var in ENV_VARS:
        if not isinstance(var.unset, Derived):
            values[var.name] = var.read(env, values)
    values["TRAIN_OVERRIDES"] += tuple(extra_overrides)
    for var in ENV_VARS:
        if isinstance(var.unset, Derived):
            values[var.name] = var.read(env, values)
    return values


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
    """The Markdown table of the same variables (docs/launch.md, "Environment")."""
    rows = ["| variable | default | meaning |", "| --- | --- | --- |"]
    for var in ALL_VARS:
        rows.append(f"| `{var.name}` | {var.default} | {var.help.replace('|', '/')} |")
    return "\n".join(rows)
