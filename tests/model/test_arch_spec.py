"""One spec per architecture (`trm.model.registry.ArchSpec`): every registered spec is complete, the call
sites (the FLOP count, the reference weight names, the micro-batch sizing) read it, and what they derive
equals what they gave before the facts moved into the spec, written out literally below."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from trm.errors import TRMError
from trm.launch.host.hardware import Workload, load_table
from trm.model import upstream
from trm.model.registry import ARCHS, ArchSpec, build_model, model_config
from trm.training.config import compose
from trm.training.throughput import act_step_flops

# The values before the move (trm.training.throughput's branches, trm.model.upstream's tables,
# hardware.toml's [sizing.mb_per_row] at measured_tokens = 916).
# Block applications (with gradient, without) at H_cycles 3, L_cycles 5, L_layers 2, H_layers 4, num_layers 6.
OLD_PASSES = {
    "trm": (12, 24),
    "trm_singlez": (12, 24),
    "trm_hier6": (12, 24),
    "hrm": (6, 36),
    "transformers_baseline": (4, 0),
    "urm": (30, 60),
}
# Training FLOPs of one ACT step of one example: the schema's defaults, 900 tokens, 12 symbols.
OLD_TRAIN_FLOPS = {
    "trm": 557345757184.0,
    "trm_singlez": 557345757184.0,
    "trm_hier6": 557345757184.0,
    "hrm": 499471687680.0,
    "transformers_baseline": 185986436352.0,
    "urm": 1124542076928.0,
}
# trm.training.curriculum's RECURSIVE_ARCHS: the depth curriculum ramps their H_cycles and L_cycles.
OLD_DEPTH_CYCLES = ["trm", "trm_singlez", "trm_hier6", "hrm", "urm"]
OLD_MB_PER_ROW = {
    "trm": 200,
    "trm_singlez": 279,
    "trm_hier6": 279,
    "hrm": 158,
    "transformers_baseline": 158,
    "urm": 595,
}
_HEADS = """
embed_tokens.embedding_weight embed_tokens.weight
lm_head.weight lm_head.weight
q_head.weight q_head.weight
q_head.bias q_head.bias
puzzle_emb.weights puzzle_emb.weight
"""
_POSITIONS = "embed_pos.embedding_weight embed_pos.weight\n"
_L_LEVEL = """
L_level.layers.{i}.self_attn.qkv_proj.weight blocks.{i}.attn.qkv.weight
L_level.layers.{i}.self_attn.o_proj.weight blocks.{i}.attn.out.weight
L_level.layers.{i}.mlp.gate_up_proj.weight blocks.{i}.mlp.gate_up.weight
L_level.layers.{i}.mlp.down_proj.weight blocks.{i}.mlp.down.weight
L_level.layers.{i}.mlp_t.gate_up_proj.weight blocks.{i}.token_mlp.gate_up.weight
L_level.layers.{i}.mlp_t.down_proj.weight blocks.{i}.token_mlp.down.weight
"""
# HRM's H level: the L level's six names, upstream's under H_level, ours under H_blocks.
_HRM_H_LEVEL = _L_LEVEL.replace("L_level.", "H_level.").replace(" blocks.", " H_blocks.")
_BASELINE_LEVEL = """
H_level.layers.{i}.self_attn.qkv_proj.weight blocks.{i}.attn.qkv.weight
H_level.layers.{i}.self_attn.o_proj.weight blocks.{i}.attn.out.weight
H_level.layers.{i}.mlp.gate_up_proj.weight blocks.{i}.mlp.gate_up.weight
H_level.layers.{i}.mlp.down_proj.weight blocks.{i}.mlp.down.weight
"""
_URM_LAYERS = """
layers.{i}.self_attn.qkv_proj.weight blocks.{i}.attn.qkv.weight
layers.{i}.self_attn.o_proj.weight blocks.{i}.attn.out.weight
layers.{i}.mlp.gate_up_proj.weight blocks.{i}.mlp.gate_up.weight
layers.{i}.mlp.dwconv.weight blocks.{i}.mlp.conv_weight
layers.{i}.mlp.dwconv.bias blocks.{i}.mlp.conv_bias
layers.{i}.mlp.down_proj.weight blocks.{i}.mlp.down.weight
"""
OLD_INIT_BUFFERS = {
    "trm": ("H_init", "L_init"),
    "trm_singlez": ("L_init",),
    "trm_hier6": ("H_init", "L1_init", "L2_init", "L3_init", "L4_init", "L5_init", "L6_init"),
    "hrm": ("H_init", "L_init"),
    "transformers_baseline": ("H_init",),
    "urm": ("init_hidden",),
}
OLD_WEIGHT_NAMES = {
    "trm": _HEADS + _POSITIONS + _L_LEVEL,
    "trm_singlez": _HEADS + _POSITIONS + _L_LEVEL,
    "trm_hier6": _HEADS + _POSITIONS + _L_LEVEL,
    "hrm": _HEADS + _POSITIONS + _L_LEVEL + _HRM_H_LEVEL,
    "transformers_baseline": _HEADS + _POSITIONS + _BASELINE_LEVEL,
    "urm": _HEADS + _URM_LAYERS,
}
# detect_arch takes the first architecture whose names fit: "trm" before its ablations.
OLD_DETECTION_ORDER = ["trm", "trm_singlez", "trm_hier6", "hrm", "transformers_baseline", "urm"]

DEPTHS = {"H_cycles": 3, "L_cycles": 5, "L_layers": 2, "H_layers": 4, "num_layers": 6}
TINY = {"hidden_size": 16, "num_heads": 2, "puzzle_emb_ndim": 16}


def _config(spec: ArchSpec, **keys: object) -> object:
    """The model config of the schema's defaults with `keys` (those the schema has), 900 tokens."""
    fields = {f.name for f in dataclasses.fields(spec.schema)}
    arch = spec.schema(**{k: v for k, v in keys.items() if k in fields})
    arch = dataclasses.replace(arch, puzzle_emb_ndim=arch.hidden_size)  # the schema's `${.hidden_size}`
    return model_config(
        arch, batch_size=1, seq_len=900, vocab_size=12, num_puzzle_identifiers=1, forward_dtype="bfloat16"
    )


def _pairs(text: str) -> dict[str, str]:
    return dict(line.split() for line in text.splitlines() if line)


def test_every_old_architecture_is_still_registered() -> None:
    assert list(ARCHS) == OLD_DETECTION_ORDER


@pytest.mark.parametrize("name", OLD_DETECTION_ORDER)
def test_the_flop_count_is_unchanged(name: str) -> None:
    spec = ARCHS[name]
    assert spec.block_passes(_config(spec, **DEPTHS)) == OLD_PASSES[name]
    flops = act_step_flops(_config(spec))
    assert flops.train == OLD_TRAIN_FLOPS[name]
    assert flops.q_target is (name == "hrm")


@pytest.mark.parametrize("name", OLD_DETECTION_ORDER)
def test_the_reference_weight_names_are_unchanged(name: str) -> None:
    assert list(upstream.KEY_PAIRS) == OLD_DETECTION_ORDER
    assert upstream.INIT_BUFFERS[name] == OLD_INIT_BUFFERS[name]
    old = {**_pairs(OLD_WEIGHT_NAMES[name]), **{n: n for n in OLD_INIT_BUFFERS[name]}}
    assert dict(upstream.KEY_PAIRS[name]) == old
    assert len(upstream.KEY_PAIRS[name]) == len(old)  # no name twice


@pytest.mark.parametrize("name", OLD_DETECTION_ORDER)
def test_the_activation_memory_per_row_is_unchanged(name: str) -> None:
    sizing = load_table().sizing
    assert sizing.row_mb(Workload(arch=name, tokens=916)) == OLD_MB_PER_ROW[name]
    assert sizing.row_mb(Workload(arch=name, tokens=458)) == OLD_MB_PER_ROW[name] / 2


def test_the_depth_curriculums_architectures_are_unchanged() -> None:
    assert [name for name, spec in ARCHS.items() if spec.depth_cycles] == OLD_DEPTH_CYCLES
    with pytest.raises(TRMError, match=r"one of trm, trm_singlez, trm_hier6, hrm, urm\)"):
        compose(["data_paths=[x]", "arch=transformers_baseline", "depth_curriculum.ramp=0.5"])


def test_the_call_sites_read_the_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(ARCHS["trm"])
    before = act_step_flops(config)
    spec = dataclasses.replace(
        ARCHS["trm"], block_passes=lambda c: (0, 0), activation_mb_per_row=100.0, depth_cycles=False
    )
    monkeypatch.setitem(ARCHS, "trm", spec)
    with pytest.raises(TRMError, match="arch=trm: it has no recursion cycles to ramp"):
        compose(["data_paths=[x]", "depth_curriculum.ramp=0.5"])
    after = act_step_flops(config)
    assert after.no_grad == 0 and 0 < after.grad < before.grad  # only the heads are left
    assert load_table().sizing.row_mb(Workload(arch="trm", tokens=916)) == 100.0
    for name, each in ARCHS.items():
        assert upstream.KEY_PAIRS[name] == ARCHS[name].reference_keys
        assert upstream.INIT_BUFFERS[name] == each.init_buffers


def _variants(spec: ArchSpec) -> list[dict[str, object]]:
    """Tiny settings that between them build every optional weight: the token-mixing MLP, learned positions."""
    fields = {f.name for f in dataclasses.fields(spec.schema)}
    mlp_t = [{"mlp_t": m} for m in (False, True)] if "mlp_t" in fields else [{}]
    positions = [{"pos_encodings": p} for p in ("rope", "learned")] if "pos_encodings" in fields else [{}]
    layers = {k: 1 for k in ("L_layers", "H_layers", "num_layers") if k in fields}
    return [{**TINY, **layers, **a, **b} for a, b in itertools.product(mlp_t, positions)]


@pytest.mark.parametrize("name", sorted(ARCHS))
def test_every_registered_spec_is_complete(name: str) -> None:
    spec = ARCHS[name]
    for field in dataclasses.fields(ArchSpec):
        assert getattr(spec, field.name) not in (None, "", ()), f"{name}: ArchSpec.{field.name} is empty"
    assert spec.activation_mb_per_row > 0
    grad, no_grad = spec.block_passes(_config(spec))
    assert isinstance(grad, int) and isinstance(no_grad, int) and grad > 0 and no_grad >= 0
    # The weight names and the model agree: every entry of a model is named, every name is some model's.
    used: set[str] = set()
    for keys in _variants(spec):
        config = model_config(
            spec.schema(**keys),
            batch_size=2,
            seq_len=6,
            vocab_size=5,
            num_puzzle_identifiers=3,
            forward_dtype="float32",
        )
        model = build_model(config)
        assert set(spec.init_buffers) <= {n.removeprefix("inner.") for n, _ in model.named_buffers()}
        reference = upstream.to_upstream_state_dict(model.state_dict(), compiled=False, arch=name)
        used.update(k.removeprefix(upstream.UPSTREAM_PREFIX) for k in reference)
    templates = {ref.replace("{i}", "0") for ref, _ in spec.reference_keys}
    assert templates == used, f"{name}: names no model of it has: {sorted(templates - used)}"
