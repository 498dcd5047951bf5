"""Training configuration: the schema (upstream's keys and defaults plus ours), argv normalisation and checks.

Every key is declared in the schema, so `key=v` and `+key=v` both work for every key (the `+` of a known
key is stripped before Hydra sees it). Overrides use Hydra's grammar and are composed with Hydra's compose
API from a structured config, so an unknown key is caught first and reported with the closest valid key.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trm.batching import largest_divisor_at_most
from trm.compile_setting import CHOICES as COMPILE_CHOICES
from trm.compile_setting import torch_compile_mode
from trm.errors import TRMError
from trm.key_roles import EVAL_ONLY, LATER, RENAMED_FROM, RESUMABLE, RUN_ONLY, keyed, role_of, with_role
from trm.model.registry import ARCHS, get_spec, spec_of
from trm.model.schema import LossConfig, TRMArch
from trm.training import curriculum

log = logging.getLogger(__name__)

CONFIG_NAME = "trm_train"
LOSS_TYPES = ("stablemax_cross_entropy", "softmax_cross_entropy")
FORWARD_DTYPES = ("auto", "bfloat16", "float32", "float16")


@dataclass
class CheckpointConfig:
    """`checkpoint.*`: when checkpoints are written, how, and which are kept (run-only: not hashed)."""

    every_minutes: float | None = keyed(default=30, renamed_from="checkpoint_every_minutes")
    """Rolling checkpoint after this many minutes since the last checkpoint (0 or null: off)."""
    every_steps: int | None = keyed(default=None, renamed_from="checkpoint_every_steps")
    """Rolling checkpoint every k optimizer steps (null: off)."""
    every_eval: bool = keyed(default=True, renamed_from="checkpoint_every_eval")
    """An evaluation checkpoint after every evaluation."""
    keep: int = keyed(default=2, renamed_from="checkpoint_keep")
    """Keep the newest k rolling and the newest k evaluation checkpoints (0 keeps all)."""
    keep_best: int = keyed(default=1, renamed_from="checkpoint_keep_best")
    """Also keep the best k evaluation checkpoints by checkpoint.best_metric (higher is better)."""
    best_metric: str | None = keyed(default=None, renamed_from="checkpoint_best_metric")
    """Eval metric that ranks checkpoints; null: ARC/pass@2 with an ARC evaluator, else eval/all/exact_accuracy."""
    asynchronous: bool = keyed(default=True, renamed_from="async_checkpoint")
    """Write checkpoints on a background thread (the loop only copies the state to host memory)."""


@dataclass
class WatchdogConfig:
    """`watchdog.*`: the hang watchdog's allowances (run-only: not hashed)."""

    timeout_minutes: float = keyed(default=15.0, renamed_from="hang_timeout_minutes")
    """No optimizer step for this long -> thread stacks in hang_rank<r>.txt, exit 77; 0 is off."""
    first_step_minutes: float = keyed(default=60.0, renamed_from="hang_first_step_minutes")
    """Allowance for each process's first step (torch.compile, data warm-up)."""
    eval_minutes: float = keyed(default=30.0, renamed_from="hang_eval_minutes")
    """Allowance between two evaluation batches (the first one compiles the evaluation)."""


@dataclass
class EvalSubsetConfig:
    """`eval_subset.*`: in-run evaluations on a fixed, seeded part of the test set (run-only: not hashed)."""

    fraction: float = 1.0
    """Share of the test set in-run evaluations read, in (0, 1] (ARC: of each task's augmentations; else rows); 1.0: all."""
    seed: int = 0
    """Seed of the subset's choice (the same subset at every evaluation of the run and after a resume)."""
    full_every: int = 0
    """Every Nth in-run evaluation is also full (0: none; the run's end evaluates best.top_k fully)."""


@dataclass
class BestConfig:
    """`best.*`: how the best checkpoint is chosen when evaluations read a subset (run-only: not hashed)."""

    top_k: int = 0
    """At the end and in `trm best`: the top-k checkpoints by subset score are evaluated fully; 0: subset decides."""


@dataclass
class EarlyStopConfig:
    """`early_stop.*`: opt-in, end the run when its in-run evaluations stop improving (run-only: not hashed)."""

    patience: int = 0
    """End the run as finished after this many in-run evaluations in a row without a new best of its ranking metric (never while the best is 0); 0: off."""
    min_delta: float = 0.0
    """A new best must exceed the best so far by more than this (>= 0, in the metric's units)."""
    min_evaluations: int = 0
    """Never stop before this many in-run evaluations (past a noisy start)."""


@dataclass
class DepthCurriculumConfig:
    """`depth_curriculum.*`: opt-in, fewer recursion cycles in early training steps (trm.training.curriculum)."""

    ramp: float = 0.0
    """Share of the schedule's steps over which H_cycles/L_cycles ramp up to the arch's, in [0, 1); 0: off."""
    stages: int = 3
    """Depth stages, the last at full depth (2-6); stage k of n runs ceil(H·k/n), ceil(L·k/n) cycles."""


# The nested sections of TrainConfig: field name -> dataclass.
SECTIONS: dict[str, type] = {
    "checkpoint": CheckpointConfig,
    "watchdog": WatchdogConfig,
    "eval_subset": EvalSubsetConfig,
    "best": BestConfig,
    "early_stop": EarlyStopConfig,
    "depth_curriculum": DepthCurriculumConfig,
}


@dataclass
class TrainConfig:
    """The whole run: upstream's `cfg_pretrain.yaml` + `PretrainConfig` keys, plus trm-stack's run keys."""

    defaults: list[Any] = field(default_factory=lambda: ["_self_"])
    arch: Any = field(default_factory=TRMArch)
    """The architecture's keys; `arch=<name>` picks the schema (the names of trm.model.registry.ARCHS)."""
    data_paths: list[str] = field(default_factory=lambda: ["data/arc-aug-1000"])
    """Dataset directories (built by `python -m trm data build-arc`); several are merged."""
    data_paths_test: list[str] = keyed(RUN_ONLY, default_factory=list)
    """If non-empty, evaluation reads these instead of data_paths."""
    evaluators: list[Any] = keyed(RUN_ONLY, default_factory=lambda: [{"name": "arc@ARC"}])
    """Evaluators; `[]` for Sudoku/Maze. Extra keys are evaluator options (aggregated_voting, pass_Ks…)."""
    global_batch_size: int = 768
    """Examples per optimizer step over all ranks: defines the math."""
    epochs: int = 100000
    eval_interval: int | None = 10000
    """Epochs between evaluations; must divide epochs."""
    evaluate: bool = keyed(RUN_ONLY, True)
    """False: no evaluation at all, not even at the end (the launcher's probe times training steps only)."""
    lr: float = 1e-4
    lr_min_ratio: float = 1.0
    lr_warmup_steps: int = 2000
    beta1: float = 0.9
    beta2: float = 0.95
    weight_decay: float = 0.1
    puzzle_emb_weight_decay: float = 0.1
    puzzle_emb_lr: float = 1e-2
    seed: int = 0
    min_eval_interval: int | None = keyed(RUN_ONLY, 0)
    """First evaluation iteration (counted in eval intervals)."""
    ema: bool = False
    """Keep an EMA of the weights; evaluate and export with it."""
    use_muon: bool = keyed(LATER, False)
    """Muon for 2-D weights + AdamW for the rest instead of AdamATan2 (URM's ARC-AGI-2 recipe)."""
    ema_rate: float = 0.999
    freeze_weights: bool = False
    """Train only the puzzle embeddings."""
    project_name: str | None = keyed(RUN_ONLY, None)
    """Default: `<Dataset>-ACT-torch`."""
    run_name: str | None = keyed(RUN_ONLY, None)
    """Default: `trm-<config hash>`, so the same command twice is the same run."""
    checkpoint_path: str | None = keyed(RUN_ONLY, None)
    """Run directory: checkpoints, metrics, submissions. Default `checkpoints/<project>/<run>`."""
    load_checkpoint: str | None = keyed(RUN_ONLY, None)
    """Initial weights: one of our step_N/ directories or an upstream step_N file (ignored on auto-resume)."""
    eval_save_outputs: list[str] = keyed(RUN_ONLY, default_factory=list)
    """Output keys to dump at evaluation (`step_N_all_preds.<rank>`)."""
    micro_batch_size: int | None = keyed(RUN_ONLY, None)
    """Per-rank examples per forward; accumulation = (global/world)/micro. Memory only, never the math."""
    compile: str = keyed(RUN_ONLY, "auto")
    """torch.compile: auto (on CUDA unless DISABLE_COMPILE) | true | false."""
    compile_mode: str = keyed(RUN_ONLY, "default")
    """torch.compile's mode when compiling: default | max-autotune-no-cudagraphs | max-autotune | reduce-overhead."""
    checkpoint: CheckpointConfig = keyed(RUN_ONLY, default_factory=CheckpointConfig)
    """When checkpoints are written and which are kept (`checkpoint.keep=3`…)."""
    log_interval: int = keyed(RUN_ONLY, 1)
    """Log train metrics every k steps."""
    loader_prefetch: int = keyed(RUN_ONLY, 0)
    """Train batches built ahead in a background thread (pinned on CUDA); 0: built when the step asks."""
    device: str = keyed(RUN_ONLY, "auto")
    """auto | cuda | cpu."""
    max_steps: int | None = keyed(RUN_ONLY, None)
    """Stop after this many optimizer steps (a cap on the schedule's total)."""
    wandb: str = keyed(RUN_ONLY, "auto")
    """auto (on when WANDB_MODE is online/offline) | true | false. WANDB_DISABLED always wins."""
    tensorboard: bool = keyed(RUN_ONLY, False)
    """Also write TensorBoard events into checkpoint_path/tensorboard."""
    watchdog: WatchdogConfig = keyed(RUN_ONLY, default_factory=WatchdogConfig)
    """The hang watchdog's allowances (`watchdog.timeout_minutes=0` turns it off)."""
    eval_subset: EvalSubsetConfig = keyed(RUN_ONLY, default_factory=EvalSubsetConfig)
    """In-run evaluations on a seeded subset of the test set (`eval_subset.fraction=0.1`…)."""
    best: BestConfig = keyed(RUN_ONLY, default_factory=BestConfig)
    """How the best checkpoint is chosen from subset scores (`best.top_k=3`)."""
    early_stop: EarlyStopConfig = keyed(RUN_ONLY, default_factory=EarlyStopConfig)
    """Opt-in: end the run once in-run evaluations stop improving (`early_stop.patience=5`)."""
    grad_clip_norm: float | None = keyed(LATER, None)
    """Clip the all-reduced dense gradients to this global L2 norm (null: off, as upstream)."""
    depth_curriculum: DepthCurriculumConfig = field(default_factory=DepthCurriculumConfig)
    """Opt-in depth curriculum: early steps run fewer cycles (`depth_curriculum.ramp=0.6`; evaluation: full)."""


# The key sets the hash, the resume checks and the reports use, derived from the fields' roles
# (trm.key_roles; a new key declares its role where it is declared).
# The flat keys the checkpoint and watchdog settings had before they nested under their section: still
# accepted on the command line and in stored configs, mapped to the new key with a warning.
RENAMED_KEYS: dict[str, str] = {
    f.metadata[RENAMED_FROM]: f"{section}.{f.name}"
    for section, cls in SECTIONS.items()
    for f in dataclasses.fields(cls)
    if RENAMED_FROM in f.metadata
}
# Keys that change neither the math nor the data: excluded from the config hash and from resume checks; the
# run-only sections whole, and both spellings of the renamed keys, for configs flattened to dotted names
# (reports compare the run.json configs of old and new runs).
RUN_ONLY_KEYS = frozenset({*with_role(TrainConfig, RUN_ONLY), *RENAMED_KEYS, *RENAMED_KEYS.values()})


def is_run_only(key: str) -> bool:
    """Whether a (dotted, flattened) config key only says how to run, not what is trained: a run-only key
    or a key inside a run-only section (`eval_subset.fraction`, `best.top_k`)."""
    return key in RUN_ONLY_KEYS or key.split(".", 1)[0] in RUN_ONLY_KEYS


# Keys added after runs were named by their config hash: left out of the hash while at their default,
# so existing runs keep their names.
LATER_KEYS: dict[str, Any] = {
    f.name: f.default for f in dataclasses.fields(TrainConfig) if role_of(f) == LATER
}
# Architecture keys (of any registered architecture) that change only evaluation: left out of the config
# hash (run names stay).
ARCH_EVAL_ONLY_KEYS = frozenset(k for spec in ARCHS.values() for k in with_role(spec.schema, EVAL_ONLY))
# Architecture keys that may differ on resume: numerics or evaluation only, no shape or semantics change.
ARCH_RESUMABLE_KEYS = (
    frozenset(k for spec in ARCHS.values() for k in with_role(spec.schema, RESUMABLE)) | ARCH_EVAL_ONLY_KEYS
)


def _schema_keys(cls: type, prefix: str = "") -> dict[str, str]:
    """Dotted key -> docstring-less type name for every field of a config dataclass (recursively)."""
    keys: dict[str, str] = {}
    for f in dataclasses.fields(cls):
        if f.name == "defaults":
            continue
        key = f"{prefix}{f.name}"
        keys[key] = str(f.type)
        if dataclasses.is_dataclass(
            f.default_factory if f.default_factory is not dataclasses.MISSING else None
        ):
            keys.update(_schema_keys(f.default_factory, key + "."))  # type: ignore[arg-type]
    return keys


def schema_keys(arch: str = "trm") -> dict[str, str]:
    """Every dotted key of the run's schema with `arch=<arch>` -> its type name."""
    keys = {k: v for k, v in _schema_keys(TrainConfig).items() if not k.startswith("arch.")}
    keys.update(_schema_keys(get_spec(arch).schema, "arch."))
    return keys


SCHEMA_KEYS: dict[str, str] = schema_keys("trm")
# Reference spellings accepted for our keys (URM's trainer takes one dataset as `data_path=DIR`).
ALIASES = {"data_path": "data_paths"}


def train_config(arch: str = "trm") -> TrainConfig:
    """The default run config with the schema of `arch=<arch>`."""
    return TrainConfig(arch=get_spec(arch).schema())


def register_schema(arch: str = "trm") -> None:
    """Register the structured config, with the schema of `arch=<arch>`, in Hydra's ConfigStore."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name=CONFIG_NAME, node=train_config(arch))


def _parse(arg: str) -> tuple[str, Any]:
    """(text without a single leading `+`, parsed override) of one command-line override."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    text = arg[1:] if arg.startswith("+") and not arg.startswith("++") else arg
    try:
        (override,) = OverridesParser.create().parse_overrides([text])
    except HydraException as err:
        raise TRMError(f"cannot parse the override {arg!r}: {err}. Use key=value (Hydra syntax).") from None
    return text, override


def selected_arch(argv: list[str], default: str = "trm") -> str:
    """The registry name that `arch=<name>` (last one wins) selects; `default` without one."""
    name = default
    for arg in argv:
        _, override = _parse(arg)
        if override.key_or_group == "arch":
            name = get_spec(str(override.value())).name
    return name


def override_key(override: str) -> str:
    """`+arch.L_cycles=4` -> `arch.L_cycles`."""
    return override.split("=", 1)[0].lstrip("+~")


def normalize_overrides(argv: list[str], arch: str | None = None) -> list[str]:
    """Check every key against the schema of the selected arch, strip a leading `+` from known keys,
    drop `arch=<name>` (it selects the schema) and spell aliases (`data_path=D` → `data_paths=[D]`)."""
    arch = arch or selected_arch(argv)
    known = schema_keys(arch)
    out: list[str] = []
    for arg in argv:
        text, override = _parse(arg)
        key = override.key_or_group
        if key.startswith("hydra.") or key == "hydra":
            raise TRMError(f"{arg!r}: hydra.* settings are not used by trm.train; drop it.")
        _refuse_secret(key, text)
        if key == "arch":
            continue
        if key in ALIASES:
            text = f"{ALIASES[key]}=[{override.value()}]"
        elif key in RENAMED_KEYS:
            text = text.replace(key, RENAMED_KEYS[key], 1)
            log.warning("%r: %s is now %s (the old key still works)", arg, key, RENAMED_KEYS[key])
        elif key not in known and not key.startswith("evaluators."):
            raise TRMError(_unknown_key_message(key, arg, arch, known))
        out.append(text.lstrip("+") if text.startswith("++") else text)
    return out


def _refuse_secret(key: str, text: str) -> None:
    """Stop (value not shown) at an override holding a secret-like value: a key known or not (`+wandb_key=`),
    it would be echoed by the errors and, for a known one, recorded in plan.json, run.json, the W&B config,
    handoff.json and the logs."""
    from trm.secrets import in_value

    kinds = in_value(key.rsplit(".", 1)[-1], text.split("=", 1)[1] if "=" in text else "", loose=False)
    if kinds:
        raise TRMError(
            f"the override of '{key}' holds a secret-like value ({kinds[0]}; not shown): overrides are recorded "
            "in plan.json, run.json, handoff.json, the W&B config and the logs. Pass keys in the environment "
            "(WANDB_API_KEY or WANDB_API_KEY_FILE, HF_TOKEN), rotate this one if it is real, and rerun"
        )


def _unknown_key_message(key: str, arg: str, arch: str, known: dict[str, str]) -> str:
    import difflib

    match = difflib.get_close_matches(key, [*known, *ALIASES, "arch"], n=1, cutoff=0.5)
    hint = f" Did you mean '{match[0]}'?" if match else ""
    return (
        f"unknown config key '{key}' in {arg!r} (arch={arch}).{hint} "
        f"List the keys with `python -m trm.train arch={arch} --help`."
    )


def compose(overrides: list[str]) -> TrainConfig:
    """Compose the schema with command-line overrides (Hydra grammar) into a checked TrainConfig."""
    from hydra import compose as hydra_compose
    from hydra import initialize
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    arch = selected_arch(overrides)
    register_schema(arch)
    normalized = normalize_overrides(overrides, arch)
    GlobalHydra.instance().clear()
    try:
        with initialize(version_base=None, config_path=None):
            cfg = hydra_compose(config_name=CONFIG_NAME, overrides=normalized)
        obj = OmegaConf.to_object(cfg)
    except (HydraException, OmegaConfBaseException) as err:
        parts = [str(e).splitlines()[0] for e in (err, err.__cause__) if e is not None and str(e)]
        raise TRMError(
            f"bad configuration: {': '.join(parts)}. Check the key's type with `--help`."
        ) from None
    except ValueError as err:  # OmegaConf indexing a list by a name (`evaluators.foo=x`)
        raise TRMError(
            f"bad configuration: {err} (a list is indexed by number: evaluators.0.name=...). Check the key's "
            "type with `--help`."
        ) from None
    finally:
        GlobalHydra.instance().clear()
    assert isinstance(obj, TrainConfig)
    apply_environment(obj)
    validate(obj)
    return obj


def with_overrides(base: TrainConfig, overrides: list[str], arch: str) -> TrainConfig:
    """`base` (a stored run's config) with `key=value` overrides of the arch's schema on top, checked."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    normalized = normalize_overrides(overrides, arch)
    try:
        merged = OmegaConf.merge(OmegaConf.structured(base), OmegaConf.from_dotlist(normalized))
        cfg = OmegaConf.to_object(merged)
    except OmegaConfBaseException as err:
        raise TRMError(f"bad override: {str(err).splitlines()[0]}") from None
    assert isinstance(cfg, TrainConfig)
    validate(cfg)
    return cfg


def apply_environment(cfg: TrainConfig) -> None:
    """Honour upstream's environment switches: DISABLE_COMPILE turns compile off."""
    if os.environ.get("DISABLE_COMPILE") and cfg.compile == "auto":
        cfg.compile = "false"


def non_finite_keys(obj: Any, prefix: str = "") -> list[tuple[str, float]]:
    """Every float of the config (its sections and the architecture's keys included) that is NaN or infinite,
    by dotted key."""
    found: list[tuple[str, float]] = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            found += non_finite_keys(value, f"{prefix}{f.name}.")
        elif isinstance(value, float) and not math.isfinite(value):
            found.append((f"{prefix}{f.name}", value))
    return found


# Keys whose sensible values lie in a range: (low, high, high included). A value outside is a typo that would
# train nonsense (a negative learning rate climbs the loss) rather than fail.
RANGES: dict[str, tuple[float, float, bool]] = {
    "lr": (0.0, math.inf, False),
    "puzzle_emb_lr": (0.0, math.inf, False),
    "weight_decay": (0.0, math.inf, False),
    "puzzle_emb_weight_decay": (0.0, math.inf, False),
    "lr_min_ratio": (0.0, 1.0, True),
    "beta1": (0.0, 1.0, False),
    "beta2": (0.0, 1.0, False),
    "ema_rate": (0.0, 1.0, True),
}


def check_numbers(cfg: TrainConfig) -> None:
    """No NaN or infinity anywhere, and the ranged keys in their range (one line naming the key)."""
    bad = non_finite_keys(cfg)
    if bad:
        key, value = bad[0]
        raise TRMError(
            f"{key}={value} is not a finite number: give a finite value (see `--help` for the default)."
        )
    for key, (low, high, high_included) in RANGES.items():
        value = getattr(cfg, key)
        if value < low or value > high or (value == high and not high_included):
            upper = f"<= {high:g}" if high_included else f"< {high:g}"
            raise TRMError(
                f"{key}={value} is out of range: it must be >= {low:g}"
                + (f" and {upper}" if math.isfinite(high) else "")
                + "."
            )


def validate(cfg: TrainConfig) -> None:
    """Check values a user can get wrong; each message names the key and the fix."""
    check_numbers(cfg)
    a = cfg.arch
    spec = spec_of(a)
    if get_spec(a.name) is not spec:
        raise TRMError(
            f"arch.name={a.name!r} names another architecture than arch={spec.name}: drop arch.name or "
            f"set it to {spec.model_id}."
        )
    if a.loss.loss_type not in LOSS_TYPES:
        raise TRMError(f"arch.loss.loss_type={a.loss.loss_type!r}: use one of {', '.join(LOSS_TYPES)}.")
    if a.forward_dtype not in FORWARD_DTYPES:
        raise TRMError(f"arch.forward_dtype={a.forward_dtype!r}: use one of {', '.join(FORWARD_DTYPES)}.")
    if a.puzzle_emb_ndim == 0 and getattr(a, "puzzle_emb_len", 0) != 0:
        raise TRMError("arch.puzzle_emb_ndim=0 needs arch.puzzle_emb_len=0 too (the prefix would be empty).")
    if a.hidden_size % a.num_heads and getattr(a, "heads_must_divide", True):
        raise TRMError(f"arch.hidden_size={a.hidden_size} must be divisible by arch.num_heads={a.num_heads}.")
    if not cfg.data_paths:
        raise TRMError(
            "data_paths is empty: pass data_paths=[DIR] (built by `python -m trm data build-arc`)."
        )
    for key in ("global_batch_size", "epochs", "log_interval"):
        if getattr(cfg, key) < 1:
            raise TRMError(f"{key}={getattr(cfg, key)} must be positive.")
    if cfg.loader_prefetch < 0:
        raise TRMError(f"loader_prefetch={cfg.loader_prefetch} must be ≥ 0 (0: no batches built ahead).")
    for key in ("keep", "keep_best"):
        if getattr(cfg.checkpoint, key) < 0:
            raise TRMError(f"checkpoint.{key}={getattr(cfg.checkpoint, key)} must be ≥ 0 (0 keeps all).")
    for key in ("every_minutes", "every_steps"):
        value = getattr(cfg.checkpoint, key)
        if value is not None and value < 0:
            raise TRMError(
                f"checkpoint.{key}={value} must be ≥ 0 (0 or null turns rolling checkpoints by it off)."
            )
    if cfg.eval_interval is not None and (cfg.eval_interval < 1 or cfg.epochs % cfg.eval_interval):
        raise TRMError(
            f"eval_interval={cfg.eval_interval} must divide epochs={cfg.epochs} "
            f"(e.g. eval_interval={largest_divisor_at_most(cfg.epochs, cfg.eval_interval)})."
        )
    for key in ("timeout_minutes", "first_step_minutes", "eval_minutes"):
        if getattr(cfg.watchdog, key) < 0:
            raise TRMError(
                f"watchdog.{key}={getattr(cfg.watchdog, key)} must be ≥ 0 "
                "(watchdog.timeout_minutes=0 turns the watchdog off)."
            )
    _validate_subset(cfg.eval_subset, cfg.best)
    _validate_early_stop(cfg.early_stop)
    curriculum.validate(cfg)
    if cfg.grad_clip_norm is not None and not cfg.grad_clip_norm > 0:
        raise TRMError(f"grad_clip_norm={cfg.grad_clip_norm} must be > 0 (or null for no clipping).")
    if cfg.micro_batch_size is not None and cfg.micro_batch_size < 1:
        raise TRMError(f"micro_batch_size={cfg.micro_batch_size} must be ≥ 1 (or null for no accumulation).")
    if cfg.max_steps is not None and cfg.max_steps < 1:
        raise TRMError(f"max_steps={cfg.max_steps} must be ≥ 1 (or null for the schedule's length).")
    torch_compile_mode(cfg.compile_mode)  # an unknown mode: one error naming the choices
    for key, allowed in (("compile", COMPILE_CHOICES), ("device", ("auto", "cuda", "cpu"))):
        value = str(getattr(cfg, key)).lower()
        if value not in allowed:
            raise TRMError(f"{key}={getattr(cfg, key)!r}: use one of {', '.join(allowed)}.")
        setattr(cfg, key, value)
    cfg.wandb = str(cfg.wandb).lower()
    if cfg.wandb not in ("auto", "true", "false"):
        raise TRMError(f"wandb={cfg.wandb!r}: use auto, true or false.")
    for ev in cfg.evaluators:
        if not isinstance(ev, dict) or ev.get("name") not in ("arc@ARC", "ARC", "arc"):
            raise TRMError(f"evaluators entry {ev!r}: only {{name: arc@ARC}} exists (or evaluators='[]').")


def _validate_subset(sub: EvalSubsetConfig, best: BestConfig) -> None:
    fraction = sub.fraction
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction <= 1:
        raise TRMError(
            f"eval_subset.fraction={fraction} must be in (0, 1] (e.g. eval_subset.fraction=0.1; "
            "1.0 evaluates the whole test set every time)."
        )
    for key, value in (("eval_subset.full_every", sub.full_every), ("best.top_k", best.top_k)):
        if value < 0:
            raise TRMError(f"{key}={value} must be ≥ 0 (0 turns it off).")


def _validate_early_stop(stop: EarlyStopConfig) -> None:
    for key in ("patience", "min_evaluations"):
        value = getattr(stop, key)
        if value < 0:
            raise TRMError(f"early_stop.{key}={value} must be ≥ 0 (early_stop.patience=0 turns it off).")
    if stop.min_delta < 0:
        raise TRMError(
            f"early_stop.min_delta={stop.min_delta} must be ≥ 0 (a new best must exceed the best so far by "
            "more than it; 0: any improvement counts)."
        )


def subset_on(cfg: TrainConfig) -> bool:
    """Whether in-run evaluations read a subset (eval_subset.fraction < 1)."""
    return cfg.eval_subset.fraction < 1


def is_full_evaluation(cfg: TrainConfig, number: int) -> bool:
    """Whether the run's `number`-th in-run evaluation (1-based) reads the whole test set."""
    every = cfg.eval_subset.full_every
    return not subset_on(cfg) or (every > 0 and number % every == 0)


def evaluation_work(cfg: TrainConfig, evaluations: int) -> float:
    """A run's evaluation work in full-test-set evaluations, for `evaluations` in-run evaluations: with a
    subset, each reads `fraction` of the rows, every `full_every`-th also the whole set, and the run's end
    evaluates at most `best.top_k` candidates fully (an upper bound: some may have been full already).
    Time scales with it as far as evaluation time scales with the rows read."""
    if not subset_on(cfg):
        return float(evaluations)
    every = cfg.eval_subset.full_every
    full = evaluations // every if every > 0 else 0
    return evaluations * cfg.eval_subset.fraction + full + min(cfg.best.top_k, evaluations)


def as_dict(cfg: TrainConfig) -> dict[str, Any]:
    """Plain JSON-able dict of the resolved config (no Hydra defaults list)."""
    d = dataclasses.asdict(cfg)
    d.pop("defaults", None)
    return d


def from_dict(d: dict[str, Any]) -> TrainConfig:
    """Rebuild a TrainConfig from `as_dict` output (a checkpoint's stored config; one stored before the
    checkpoint and watchdog keys nested has them flat: they go into their section)."""
    d = dict(d)
    arch = dict(d.pop("arch"))
    arch["loss"] = LossConfig(**arch.get("loss", {}))
    schema = get_spec(arch.get("name", "trm")).schema
    sections = {name: dict(d.pop(name, None) or {}) for name in SECTIONS}
    for old, new in RENAMED_KEYS.items():
        if old in d:
            section, key = new.split(".")
            sections[section].setdefault(key, d.pop(old))
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    return TrainConfig(
        arch=schema(**arch),
        **{name: SECTIONS[name](**values) for name, values in sections.items()},
        **{k: v for k, v in d.items() if k in known},
    )


# The metric a run is ranked by (best checkpoint, experiment results, reports): ARC's pass@2 when an ARC
# evaluator runs, else the exact accuracy over the whole test set. Higher is better; a tie goes to the
# later step (the checkpoint trained longer).
ARC_HEADLINE = "ARC/pass@2"
EXACT_HEADLINE = "eval/all/exact_accuracy"
_EXACT_NAME = re.compile(r"^eval/(?P<set>[^/]+)/exact_accuracy$")


_POOLED_PASS = re.compile(r"^ARC/pass@(?P<k>\d+)$")


def own_score(metric: str) -> str:
    """The name under which `metric` scores one checkpoint on its own: ARC's pass@K pools the votes of
    every evaluation of the run (aggregated_voting), its `ARC/this_eval/pass@K` does not."""
    match = _POOLED_PASS.match(metric)
    return f"ARC/this_eval/pass@{match['k']}" if match else metric


def ranking_metric(cfg: TrainConfig) -> str:
    """The metric checkpoints are ranked by during the run: best_metric; with a subset, each checkpoint's
    own score of it on the subset (`subset/<own_score>`: every evaluation scores the subset, full ones too)."""
    from trm.evaluation.subset import SUBSET_PREFIX

    return f"{SUBSET_PREFIX}{own_score(best_metric(cfg))}" if subset_on(cfg) else best_metric(cfg)


def best_checkpoints_kept(cfg: TrainConfig) -> int:
    """How many best evaluation checkpoints retention keeps: checkpoint.keep_best, and with a subset at
    least best.top_k (the candidates the run's end evaluates fully must survive pruning)."""
    return max(cfg.checkpoint.keep_best, cfg.best.top_k if subset_on(cfg) else 0)


def checkpoints_held(keep: int, keep_best: int | None = None) -> int:
    """The most complete checkpoints a run holds at once: the newest `keep` rolling and the newest `keep`
    evaluation ones, the best `keep_best` (default: TrainConfig's), and one more being written."""
    keep_best = CheckpointConfig.keep_best if keep_best is None else keep_best
    return 2 * keep + keep_best + 1


def best_metric(cfg: TrainConfig) -> str:
    """The eval metric that ranks checkpoints: checkpoint.best_metric, else by the evaluators run."""
    if cfg.checkpoint.best_metric:
        return cfg.checkpoint.best_metric
    return ARC_HEADLINE if cfg.evaluators else EXACT_HEADLINE


def headline_metric(names: Iterable[str]) -> str | None:
    """The same rule read off logged metric names: `ARC/pass@2`, else `eval/all/exact_accuracy`, else the
    first (sorted) `eval/<set>/exact_accuracy`; None before any evaluation."""
    names = set(names)
    if ARC_HEADLINE in names:
        return ARC_HEADLINE
    exact = sorted(n for n in names if _EXACT_NAME.match(n))
    return EXACT_HEADLINE if EXACT_HEADLINE in exact else (exact[0] if exact else None)


def exact_set(metric: str) -> str | None:
    """The test set of an `eval/<set>/exact_accuracy` metric name, else None."""
    match = _EXACT_NAME.match(metric)
    return match["set"] if match else None


def count_metric(metric: str) -> str | None:
    """The logged number of evaluated items behind `metric`: `ARC/count` tasks, `eval/<set>/count` examples."""
    if metric.startswith("ARC/"):
        return "ARC/count"
    test_set = exact_set(metric)
    return f"eval/{test_set}/count" if test_set else None


def math_dict(cfg: TrainConfig) -> dict[str, Any]:
    """The part of the config that defines the training math (hashed; compared on resume)."""
    math = {
        k: v
        for k, v in as_dict(cfg).items()
        if k not in RUN_ONLY_KEYS and not (k in LATER_KEYS and v == LATER_KEYS[k])
    }
    math["arch"] = {k: v for k, v in math["arch"].items() if k not in ARCH_EVAL_ONLY_KEYS}
    if not cfg.depth_curriculum.ramp:  # off (whatever its stages): the math of runs named before it existed
        math.pop("depth_curriculum", None)
    return math


def config_hash(cfg: TrainConfig) -> str:
    """sha256 of the math-defining config (stable key order)."""
    import hashlib

    blob = json.dumps(math_dict(cfg), sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def fill_run_defaults(cfg: TrainConfig) -> None:
    """Derive project_name, run_name and checkpoint_path when not given (deterministic on every rank)."""
    if cfg.project_name is None:
        cfg.project_name = f"{Path(cfg.data_paths[0]).name.capitalize()}-ACT-torch"
    if cfg.run_name is None:
        cfg.run_name = f"trm-{config_hash(cfg)[:10]}"
    if cfg.checkpoint_path is None:
        cfg.checkpoint_path = str(Path("checkpoints") / cfg.project_name / cfg.run_name)


def help_text(arch: str = "trm") -> str:
    """`--help`: every key of the run with `arch=<arch>`, with its default and description."""
    spec = get_spec(arch)
    lines = [
        "usage: python -m trm.train [arch=NAME] [key=value | +key=value ...]   (also under torchrun)",
        "",
        f"Architectures (arch=NAME): {', '.join(ARCHS)}; keys below are for arch={spec.name} "
        f"({spec.reference}).",
        "",
        "Keys (Hydra override syntax; lists as key='[a,b]'):",
    ]
    defaults = as_dict(train_config(spec.name))
    docs = _field_docs(spec.schema)
    for key in schema_keys(spec.name):
        value: Any = defaults
        for part in key.split("."):
            value = value[part]
        if isinstance(value, dict):
            continue
        lines.append(f"  {key} = {json.dumps(value)}" + (f"    # {docs[key]}" if key in docs else ""))
    lines += [
        "",
        "Special arguments: --help, --cfg (print the resolved config and exit), --write-keys-doc (alone: "
        "rewrite docs/training.md's key table from these keys, in a checkout's root).",
        f"Aliases: {', '.join(f'{a}=DIR means {b}=[DIR]' for a, b in ALIASES.items())}.",
        f"Old spellings (still accepted): {', '.join(f'{a} is {b}' for a, b in RENAMED_KEYS.items())}.",
        "Environment: DISABLE_COMPILE, WANDB_MODE, WANDB_DISABLED, TRM_IMAGE_DIGEST.",
    ]
    return "\n".join(lines)


def _field_docs(arch_schema: type) -> dict[str, str]:
    """Field docstrings (the string literal under each field) of the run and architecture schemas."""
    docs = {k: v for k, v in _class_docs(TrainConfig).items()}
    for name, section in SECTIONS.items():
        docs.update({f"{name}.{k}": v for k, v in _class_docs(section).items()})
    docs.update({f"arch.{k}": v for k, v in _class_docs(arch_schema).items()})
    docs.update({f"arch.loss.{k}": v for k, v in _class_docs(LossConfig).items()})
    return docs


def _class_docs(cls: type) -> dict[str, str]:
    """Field name -> docstring for a dataclass and its bases (a subclass's docstring wins)."""
    import ast
    import inspect

    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or not dataclasses.is_dataclass(klass):
            continue
        (node,) = ast.parse(inspect.getsource(klass).strip()).body
        assert isinstance(node, ast.ClassDef)
        for stmt, nxt in itertools.pairwise(node.body):
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
            ):
                docs[stmt.target.id] = str(nxt.value.value)
    return docs


def to_yaml(cfg: TrainConfig) -> str:
    """The resolved config as YAML (what `--cfg` prints)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.create(as_dict(cfg)))
