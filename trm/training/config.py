"""Training configuration: the schema (upstream's keys and defaults plus ours), argv normalisation and checks.

Every key is declared in the schema, so `key=v` and `+key=v` both work for every key (the `+` of a known
key is stripped before Hydra sees it). Overrides use Hydra's grammar and are composed with Hydra's compose
API from a structured config, so an unknown key is caught first and reported with the closest valid key.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trm.batching import largest_divisor_at_most
from trm.compile_setting import CHOICES as COMPILE_CHOICES
from trm.errors import TRMError

CONFIG_NAME = "trm_train"
ARCH_NAMES = ("trm", "recursive_reasoning.trm@TinyRecursiveReasoningModel_ACTV1")
LOSS_TYPES = ("stablemax_cross_entropy", "softmax_cross_entropy")
FORWARD_DTYPES = ("auto", "bfloat16", "float32", "float16")

# Keys that change neither the math nor the data: excluded from the config hash and from resume checks.
RUN_ONLY_KEYS = frozenset(
    {
        "run_name",
        "project_name",
        "checkpoint_path",
        "load_checkpoint",
        "micro_batch_size",
        "compile",
        "checkpoint_keep",
        "log_interval",
        "device",
        "max_steps",
        "eval_save_outputs",
        "wandb",
        "tensorboard",
        "checkpoint_every_eval",
        "min_eval_interval",
        "evaluators",
        "data_paths_test",
    }
)
# Architecture keys that may differ on resume: numerics only, no shape or semantics change.
ARCH_RESUMABLE_KEYS = frozenset({"forward_dtype", "name"})


@dataclass
class LossConfig:
    """`arch.loss.*`: the loss head."""

    name: str = "losses@ACTLossHead"
    """Upstream's loss class id; only ACTLossHead exists."""
    loss_type: str = "stablemax_cross_entropy"
    """stablemax_cross_entropy | softmax_cross_entropy."""


@dataclass
class ArchConfig:
    """`arch.*`: the TRM architecture (upstream: config/arch/trm.yaml); batch/vocab/seq sizes come from the dataset."""

    name: str = "recursive_reasoning.trm@TinyRecursiveReasoningModel_ACTV1"
    """Model id; only TRM is implemented (`arch=trm`)."""
    loss: LossConfig = field(default_factory=LossConfig)
    halt_exploration_prob: float = 0.1
    """Probability per sample of a random minimum halting step while training."""
    halt_max_steps: int = 16
    """ACT supervision steps per example."""
    H_cycles: int = 3
    """Outer recursion cycles (T)."""
    L_cycles: int = 6
    """Inner latent updates per cycle (n)."""
    H_layers: int = 0
    """Unused by TRM (kept for upstream command lines)."""
    L_layers: int = 2
    """Blocks in the shared network."""
    hidden_size: int = 512
    num_heads: int = 8
    expansion: float = 4.0
    """SwiGLU expansion factor."""
    puzzle_emb_ndim: int = "${.hidden_size}"  # type: ignore[assignment]
    """Puzzle embedding width (0 disables it; then set puzzle_emb_len=0 too)."""
    pos_encodings: str = "rope"
    """rope | learned | none."""
    forward_dtype: str = "auto"
    """auto (bfloat16 on CUDA, float32 on CPU) | bfloat16 | float32."""
    mlp_t: bool = False
    """Token-mixing MLP instead of attention (Sudoku)."""
    puzzle_emb_len: int = 16
    """Prefix positions for the puzzle embedding."""
    no_ACT_continue: bool = True
    """Sigmoid halting only (upstream default)."""
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    eval_early_halt: bool = False
    """Let evaluation stop a sample when q_halt > 0 (upstream always runs halt_max_steps)."""


@dataclass
class TrainConfig:
    """The whole run: upstream's `cfg_pretrain.yaml` + `PretrainConfig` keys, plus trm-stack's run keys."""

    defaults: list[Any] = field(default_factory=lambda: ["_self_", {"arch": "trm"}])
    arch: ArchConfig = field(default_factory=ArchConfig)
    data_paths: list[str] = field(default_factory=lambda: ["data/arc-aug-1000"])
    """Dataset directories (built by `python -m trm data build-arc`); several are merged."""
    data_paths_test: list[str] = field(default_factory=list)
    """If non-empty, evaluation reads these instead of data_paths."""
    evaluators: list[Any] = field(default_factory=lambda: [{"name": "arc@ARC"}])
    """Evaluators; `[]` for Sudoku/Maze. Extra keys are evaluator options (aggregated_voting, pass_Ks…)."""
    global_batch_size: int = 768
    """Examples per optimizer step over all ranks: defines the math."""
    epochs: int = 100000
    eval_interval: int | None = 10000
    """Epochs between evaluations; must divide epochs."""
    checkpoint_every_eval: bool = True
    lr: float = 1e-4
    lr_min_ratio: float = 1.0
    lr_warmup_steps: int = 2000
    beta1: float = 0.9
    beta2: float = 0.95
    weight_decay: float = 0.1
    puzzle_emb_weight_decay: float = 0.1
    puzzle_emb_lr: float = 1e-2
    seed: int = 0
    min_eval_interval: int | None = 0
    """First evaluation iteration (counted in eval intervals)."""
    ema: bool = False
    """Keep an EMA of the weights; evaluate and export with it."""
    ema_rate: float = 0.999
    freeze_weights: bool = False
    """Train only the puzzle embeddings."""
    project_name: str | None = None
    """Default: `<Dataset>-ACT-torch`."""
    run_name: str | None = None
    """Default: `trm-<config hash>`, so the same command twice is the same run."""
    checkpoint_path: str | None = None
    """Run directory: checkpoints, metrics, submissions. Default `checkpoints/<project>/<run>`."""
    load_checkpoint: str | None = None
    """Initial weights: one of our step_N/ directories or an upstream step_N file (ignored on auto-resume)."""
    eval_save_outputs: list[str] = field(default_factory=list)
    """Output keys to dump at evaluation (`step_N_all_preds.<rank>`)."""
    micro_batch_size: int | None = None
    """Per-rank examples per forward; accumulation = (global/world)/micro. Memory only, never the math."""
    compile: str = "auto"
    """torch.compile: auto (on CUDA unless DISABLE_COMPILE) | true | false."""
    checkpoint_keep: int = 2
    """Keep the newest k complete checkpoints (0 keeps all)."""
    log_interval: int = 1
    """Log train metrics every k steps."""
    device: str = "auto"
    """auto | cuda | cpu."""
    max_steps: int | None = None
    """Stop after this many optimizer steps (a cap on the schedule's total)."""
    wandb: str = "auto"
    """auto (on when WANDB_MODE is online/offline) | true | false. WANDB_DISABLED always wins."""
    tensorboard: bool = False
    """Also write TensorBoard events into checkpoint_path/tensorboard."""


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


SCHEMA_KEYS: dict[str, str] = _schema_keys(TrainConfig)


def register_schema() -> None:
    """Register the structured config and the `arch=trm` option with Hydra's ConfigStore."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    store.store(name=CONFIG_NAME, node=TrainConfig)
    store.store(group="arch", name="trm", node=ArchConfig)


def normalize_overrides(argv: list[str]) -> list[str]:
    """Strip a leading `+` from overrides of known keys and check every key; unknown keys raise TRMError."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    out: list[str] = []
    for arg in argv:
        text = arg[1:] if arg.startswith("+") and not arg.startswith("++") else arg
        try:
            (override,) = OverridesParser.create().parse_overrides([text])
        except HydraException as err:
            raise TRMError(
                f"cannot parse the override {arg!r}: {err}. Use key=value (Hydra syntax)."
            ) from None
        key = override.key_or_group
        if key.startswith("hydra.") or key == "hydra":
            raise TRMError(f"{arg!r}: hydra.* settings are not used by trm.train; drop it.")
        if key == "arch":
            if str(override.value()) != "trm":
                raise TRMError(f"{arg!r}: only arch=trm is implemented; drop the override or use arch=trm.")
        elif key not in SCHEMA_KEYS and not key.startswith("evaluators."):
            raise TRMError(_unknown_key_message(key, arg))
        out.append(text.lstrip("+") if text.startswith("++") else text)
    return out


def _unknown_key_message(key: str, arg: str) -> str:
    import difflib

    match = difflib.get_close_matches(key, [*SCHEMA_KEYS, "arch"], n=1, cutoff=0.5)
    hint = f" Did you mean '{match[0]}'?" if match else ""
    return f"unknown config key '{key}' in {arg!r}.{hint} List the keys with `python -m trm.train --help`."


def compose(overrides: list[str]) -> TrainConfig:
    """Compose the schema with command-line overrides (Hydra grammar) into a checked TrainConfig."""
    from hydra import compose as hydra_compose
    from hydra import initialize
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    register_schema()
    normalized = normalize_overrides(overrides)
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
    finally:
        GlobalHydra.instance().clear()
    assert isinstance(obj, TrainConfig)
    apply_environment(obj)
    validate(obj)
    return obj


def apply_environment(cfg: TrainConfig) -> None:
    """Honour upstream's environment switches: DISABLE_COMPILE turns compile off."""
    if os.environ.get("DISABLE_COMPILE") and cfg.compile == "auto":
        cfg.compile = "false"


def validate(cfg: TrainConfig) -> None:
    """Check values a user can get wrong; each message names the key and the fix."""
    a = cfg.arch
    if a.name not in ARCH_NAMES:
        raise TRMError(f"arch.name={a.name!r} is not supported: only TRM is implemented (arch=trm).")
    if a.loss.loss_type not in LOSS_TYPES:
        raise TRMError(f"arch.loss.loss_type={a.loss.loss_type!r}: use one of {', '.join(LOSS_TYPES)}.")
    if a.forward_dtype not in FORWARD_DTYPES:
        raise TRMError(f"arch.forward_dtype={a.forward_dtype!r}: use one of {', '.join(FORWARD_DTYPES)}.")
    if a.puzzle_emb_ndim == 0 and a.puzzle_emb_len != 0:
        raise TRMError("arch.puzzle_emb_ndim=0 needs arch.puzzle_emb_len=0 too (the prefix would be empty).")
    if a.hidden_size % a.num_heads:
        raise TRMError(f"arch.hidden_size={a.hidden_size} must be divisible by arch.num_heads={a.num_heads}.")
    if not cfg.data_paths:
        raise TRMError(
            "data_paths is empty: pass data_paths=[DIR] (built by `python -m trm data build-arc`)."
        )
    for key in ("global_batch_size", "epochs", "checkpoint_keep", "log_interval"):
        value = getattr(cfg, key)
        if value < (0 if key == "checkpoint_keep" else 1):
            raise TRMError(f"{key}={value} must be positive.")
    if cfg.eval_interval is not None and (cfg.eval_interval < 1 or cfg.epochs % cfg.eval_interval):
        raise TRMError(
            f"eval_interval={cfg.eval_interval} must divide epochs={cfg.epochs} "
            f"(e.g. eval_interval={largest_divisor_at_most(cfg.epochs, cfg.eval_interval)})."
        )
    if cfg.micro_batch_size is not None and cfg.micro_batch_size < 1:
        raise TRMError(f"micro_batch_size={cfg.micro_batch_size} must be ≥ 1 (or null for no accumulation).")
    if cfg.max_steps is not None and cfg.max_steps < 1:
        raise TRMError(f"max_steps={cfg.max_steps} must be ≥ 1 (or null for the schedule's length).")
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


def as_dict(cfg: TrainConfig) -> dict[str, Any]:
    """Plain JSON-able dict of the resolved config (no Hydra defaults list)."""
    d = dataclasses.asdict(cfg)
    d.pop("defaults", None)
    return d


def from_dict(d: dict[str, Any]) -> TrainConfig:
    """Rebuild a TrainConfig from `as_dict` output (a checkpoint's stored config)."""
    d = dict(d)
    arch = dict(d.pop("arch"))
    arch["loss"] = LossConfig(**arch.get("loss", {}))
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    return TrainConfig(arch=ArchConfig(**arch), **{k: v for k, v in d.items() if k in known})


def math_dict(cfg: TrainConfig) -> dict[str, Any]:
    """The part of the config that defines the training math (hashed; compared on resume)."""
    return {k: v for k, v in as_dict(cfg).items() if k not in RUN_ONLY_KEYS}


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


def help_text() -> str:
    """`--help`: every key with its default and description."""
    lines = [
        "usage: python -m trm.train [key=value | +key=value ...]   (also under torchrun)",
        "",
        "Keys (Hydra override syntax; lists as key='[a,b]'):",
    ]
    defaults = as_dict(TrainConfig())
    docs = _field_docs()
    for key in SCHEMA_KEYS:
        value: Any = defaults
        for part in key.split("."):
            value = value[part]
        if isinstance(value, dict):
            continue
        lines.append(f"  {key} = {json.dumps(value)}" + (f"    # {docs[key]}" if key in docs else ""))
    lines += [
        "",
        "Special arguments: --help, --cfg (print the resolved config and exit).",
        "Environment: DISABLE_COMPILE, WANDB_MODE, WANDB_DISABLED, TRM_IMAGE_DIGEST.",
    ]
    return "\n".join(lines)


def _field_docs() -> dict[str, str]:
    """Field docstrings (the string literal under each field), read from this module's source."""
    import ast
    import inspect
    import sys

    tree = ast.parse(inspect.getsource(sys.modules[__name__]))
    prefixes = {"TrainConfig": "", "ArchConfig": "arch.", "LossConfig": "arch.loss."}
    docs: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in prefixes:
            body = node.body
            for stmt, nxt in itertools.pairwise(body):
                if (
                    isinstance(stmt, ast.AnnAssign)
                    and isinstance(stmt.target, ast.Name)
                    and isinstance(nxt, ast.Expr)
                    and isinstance(nxt.value, ast.Constant)
                ):
                    docs[prefixes[node.name] + stmt.target.id] = str(nxt.value.value)
    return docs


def to_yaml(cfg: TrainConfig) -> str:
    """The resolved config as YAML (what `--cfg` prints)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.create(as_dict(cfg)))
