"""The architecture registry: `arch=<name>` → one spec holding every fact of that architecture.

Each architecture declares its keys once (a `*Fields` dataclass with field docstrings): the command-line
schema (`*Arch`: adds `name`, `loss` and the trainer's defaults) and the model config (`*Config`: adds the
dataset sizes) both derive from it. Training, checkpoints, `load_checkpoint=`, packaging, inference and
evaluation go through `get_spec` / `model_config` / `build_model`. The spec also holds what other packages
read per architecture: its block applications per ACT step (the FLOP count, trm.training.throughput), the
reference's weight names (trm.model.upstream), whether a depth curriculum can ramp its cycles
(trm.training.curriculum) and its saved activations per batch row (the hardware table's micro-batch sizing,
trm.launch.host.hardware). A new architecture is one `ArchSpec` here plus its
schema and model modules (docs/models.md, "Adding an architecture"). Importing this module imports no
torch: the model classes are loaded when first used.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trm.errors import TRMError
from trm.model.schema import HRMArch, TransformerBaselineArch, TRMArch, TRMHier6Arch, TRMSingleZArch, URMArch

# Schema keys that are not model settings.
NON_MODEL_KEYS = ("name", "loss")

ACTIVATION_TOKENS = 916
"""Tokens per row where every `activation_mb_per_row` was measured: ARC's 900 cells + 16 puzzle positions."""


@dataclass(frozen=True)
class ArchSpec:
    """One architecture: its names, schema, model config and model class, and where its numbers come from."""

    name: str
    """The `arch=<name>` option."""
    model_id: str
    """The reference's class path, the default of `arch.name`."""
    schema: type
    """The `arch.*` schema (Hydra structured config)."""
    config_ref: str
    """`module:Class` of the model config (schema keys plus dataset sizes)."""
    model_ref: str
    """`module:Class` of the ACT model, built from a config."""
    reference: str
    """The reference implementation and config this one is faithful to."""
    block_passes: Callable[[Any], tuple[int, int]]
    """Its recursion, for the FLOP count: a model config → (block applications with gradient, without) per
    ACT step, each block applied to every token (trm.training.throughput prices a block and the heads)."""
    init_buffers: tuple[str, ...]
    """The latents' starting values (buffers, same name in ours and the reference): also how a reference
    weight file is recognised as this architecture's."""
    reference_names: tuple[tuple[str, str], ...]
    """The weights' names: (the reference's after `model.inner.`, ours after `inner.`); `{i}` is a block."""
    depth_cycles: bool
    """Whether its forward reads `H_cycles` and `L_cycles` each step, so that a depth curriculum
    (trm.training.curriculum) can ramp them."""
    activation_mb_per_row: float
    """Saved bf16 activations of one batch row at its paper config on ACTIVATION_TOKENS tokens, MB
    (`nox -s bench -- memory --arch <name>`, eager); sizes micro-batches (trm.launch.host.hardware)."""

    @property
    def reference_keys(self) -> tuple[tuple[str, str], ...]:
        """Every state-dict entry's (reference, ours) name: the weights' and the init buffers'."""
        return (*self.reference_names, *((n, n) for n in self.init_buffers))

    @property
    def config(self) -> type:
        """The model config class."""
        return _load(self.config_ref)

    @property
    def model(self) -> type:
        """The ACT model class."""
        return _load(self.model_ref)


def _load(ref: str) -> Any:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


# The recursions (`ArchSpec.block_passes`); c is a model config.
def _trm_passes(c: Any) -> tuple[int, int]:
    """H_cycles × (L_cycles + 1) passes of the L_layers blocks, the last cycle's with gradient."""
    per_cycle = (c.L_cycles + 1) * c.L_layers
    return per_cycle, (c.H_cycles - 1) * per_cycle


def _hrm_passes(c: Any) -> tuple[int, int]:
    """H_cycles × L_cycles low-level passes (L_layers) and H_cycles high-level ones (H_layers); the last of
    each with gradient."""
    grad = c.L_layers + c.H_layers
    return grad, c.H_cycles * c.L_cycles * c.L_layers + c.H_cycles * c.H_layers - grad


def _baseline_passes(c: Any) -> tuple[int, int]:
    """One pass of the H_layers blocks, with gradient."""
    return c.H_layers, 0


def _urm_passes(c: Any) -> tuple[int, int]:
    """H_cycles × L_cycles passes of the num_layers blocks, the last cycle's with gradient."""
    per_cycle = c.L_cycles * c.num_layers
    return per_cycle, (c.H_cycles - 1) * per_cycle


# The weights' names (`ArchSpec.reference_names`): heads and embeddings, then a level's blocks.
_HEADS = (
    ("embed_tokens.embedding_weight", "embed_tokens.weight"),
    ("lm_head.weight", "lm_head.weight"),
    ("q_head.weight", "q_head.weight"),
    ("q_head.bias", "q_head.bias"),
    ("puzzle_emb.weights", "puzzle_emb.weight"),
)
_POSITIONS = (("embed_pos.embedding_weight", "embed_pos.weight"),)


def _level(reference: str, ours: str, *, mlp_t: bool) -> tuple[tuple[str, str], ...]:
    """A reference `<level>.layers.{i}` of attention + SwiGLU blocks (+ the `mlp_t` token mixer) as our
    `<ours>.{i}` blocks."""
    parts = [
        ("self_attn.qkv_proj.weight", "attn.qkv.weight"),
        ("self_attn.o_proj.weight", "attn.out.weight"),
        ("mlp.gate_up_proj.weight", "mlp.gate_up.weight"),
        ("mlp.down_proj.weight", "mlp.down.weight"),
    ]
    if mlp_t:
        parts += [
            ("mlp_t.gate_up_proj.weight", "token_mlp.gate_up.weight"),
            ("mlp_t.down_proj.weight", "token_mlp.down.weight"),
        ]
    return tuple((f"{reference}.layers.{{i}}.{r}", f"{ours}.{{i}}.{o}") for r, o in parts)


_TRM_NAMES = (*_HEADS, *_POSITIONS, *_level("L_level", "blocks", mlp_t=True))
_URM_NAMES = (
    *_HEADS,
    ("layers.{i}.self_attn.qkv_proj.weight", "blocks.{i}.attn.qkv.weight"),
    ("layers.{i}.self_attn.o_proj.weight", "blocks.{i}.attn.out.weight"),
    ("layers.{i}.mlp.gate_up_proj.weight", "blocks.{i}.mlp.gate_up.weight"),
    ("layers.{i}.mlp.dwconv.weight", "blocks.{i}.mlp.conv_weight"),
    ("layers.{i}.mlp.dwconv.bias", "blocks.{i}.mlp.conv_bias"),
    ("layers.{i}.mlp.down_proj.weight", "blocks.{i}.mlp.down.weight"),
)

ARCHS: dict[str, ArchSpec] = {
    spec.name: spec
    for spec in (
        ArchSpec(
            name="trm",
            model_id="recursive_reasoning.trm@TinyRecursiveReasoningModel_ACTV1",
            schema=TRMArch,
            config_ref="trm.model.config:TRMConfig",
            model_ref="trm.model.act:TinyRecursiveModel",
            reference="TinyRecursiveModels config/arch/trm.yaml, models/recursive_reasoning/trm.py",
            block_passes=_trm_passes,
            depth_cycles=True,
            init_buffers=("H_init", "L_init"),
            reference_names=_TRM_NAMES,
            activation_mb_per_row=200,
        ),
        ArchSpec(
            name="trm_singlez",
            model_id="recursive_reasoning.trm_singlez@TinyRecursiveReasoningModel_ACTV1",
            schema=TRMSingleZArch,
            config_ref="trm.model.trm_variants:TRMSingleZConfig",
            model_ref="trm.model.trm_variants:TRMSingleZModel",
            reference="TinyRecursiveModels config/arch/trm_singlez.yaml, models/recursive_reasoning/trm_singlez.py",
            block_passes=_trm_passes,
            depth_cycles=True,
            init_buffers=("L_init",),
            reference_names=_TRM_NAMES,
            activation_mb_per_row=279,
        ),
        ArchSpec(
            name="trm_hier6",
            model_id="recursive_reasoning.trm_hier6@TinyRecursiveReasoningModel_ACTV1",
            schema=TRMHier6Arch,
            config_ref="trm.model.trm_variants:TRMHier6Config",
            model_ref="trm.model.trm_variants:TRMHier6Model",
            reference="TinyRecursiveModels config/arch/trm_hier6.yaml, models/recursive_reasoning/trm_hier6.py",
            block_passes=_trm_passes,
            depth_cycles=True,
            init_buffers=("H_init", *(f"L{i}_init" for i in range(1, 7))),
            reference_names=_TRM_NAMES,
            activation_mb_per_row=279,
        ),
        ArchSpec(
            name="hrm",
            model_id="recursive_reasoning.hrm@HierarchicalReasoningModel_ACTV1",
            schema=HRMArch,
            config_ref="trm.model.trm_variants:HRMConfig",
            model_ref="trm.model.trm_variants:HRMModel",
            reference="TinyRecursiveModels config/arch/hrm.yaml, models/recursive_reasoning/hrm.py",
            block_passes=_hrm_passes,
            depth_cycles=True,
            init_buffers=("H_init", "L_init"),
            reference_names=(*_TRM_NAMES, *_level("H_level", "H_blocks", mlp_t=True)),
            activation_mb_per_row=158,
        ),
        ArchSpec(
            name="transformers_baseline",
            model_id="recursive_reasoning.transformers_baseline@Model_ACTV2",
            schema=TransformerBaselineArch,
            config_ref="trm.model.trm_variants:TransformerBaselineConfig",
            model_ref="trm.model.trm_variants:TransformerBaselineModel",
            reference="TinyRecursiveModels config/arch/transformers_baseline.yaml, "
            "models/recursive_reasoning/transformers_baseline.py",
            block_passes=_baseline_passes,
            depth_cycles=False,
            init_buffers=("H_init",),
            reference_names=(*_HEADS, *_POSITIONS, *_level("H_level", "blocks", mlp_t=False)),
            activation_mb_per_row=158,
        ),
        ArchSpec(
            name="urm",
            model_id="urm.urm@URM",
            schema=URMArch,
            config_ref="trm.model.urm:URMConfig",
            model_ref="trm.model.urm:UniversalReasoningModel",
            reference="URM (arXiv 2512.14693) config/arch/urm.yaml, models/urm/urm.py",
            block_passes=_urm_passes,
            depth_cycles=True,
            init_buffers=("init_hidden",),
            reference_names=_URM_NAMES,
            activation_mb_per_row=595,
        ),
    )
}


def get_spec(name: str) -> ArchSpec:
    """The spec for `arch=<name>` or a reference class path (`arch.name`); unknown names name the closest."""
    for spec in ARCHS.values():
        if name in (spec.name, spec.model_id):
            return spec
    choices = [*ARCHS, *(s.model_id for s in ARCHS.values())]
    match = difflib.get_close_matches(str(name), choices, n=1, cutoff=0.5)
    hint = f" Did you mean '{match[0]}'?" if match else ""
    raise TRMError(f"unknown architecture {name!r}: use arch=<one of {', '.join(ARCHS)}>.{hint}")


def spec_of(arch: Any) -> ArchSpec:
    """The spec of a schema or model-config object."""
    for spec in ARCHS.values():  # exact types: the TRM ablations subclass TRM's classes
        if type(arch) is spec.schema:
            return spec
    for spec in ARCHS.values():
        if type(arch).__name__ == spec.config_ref.rpartition(":")[2] and type(arch) is spec.config:
            return spec
    raise TRMError(f"{type(arch).__name__} is not a registered architecture config.")


def model_config(
    arch: Any,
    *,
    batch_size: int,
    seq_len: int,
    vocab_size: int,
    num_puzzle_identifiers: int,
    forward_dtype: str | None = None,
) -> Any:
    """The model config of a schema object plus the dataset sizes (forward_dtype replaces `auto`)."""
    spec = spec_of(arch)
    values = {k: v for k, v in dataclasses.asdict(arch).items() if k not in NON_MODEL_KEYS}
    if forward_dtype is not None:
        values["forward_dtype"] = forward_dtype
    return spec.config(
        batch_size=batch_size,
        seq_len=seq_len,
        vocab_size=vocab_size,
        num_puzzle_identifiers=num_puzzle_identifiers,
        **values,
    )


def build_model(config: Any) -> Any:
    """The ACT model for a model config."""
    return spec_of(config).model(config)
