"""The architecture registry: names, schemas with documented keys, model building and reference key names."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from trm.errors import TRMError
from trm.model.registry import ARCHS, build_model, get_spec, model_config, spec_of
from trm.model.upstream import convert_upstream_state_dict, detect_arch, to_upstream_state_dict
from trm.training.config import _class_docs

TINY = {"hidden_size": 16, "num_heads": 2, "puzzle_emb_ndim": 16}
LAYER_KEYS = ("L_layers", "H_layers", "num_layers")  # one block per level, whichever levels the arch has


def test_names_and_model_ids_resolve_and_typos_name_the_closest() -> None:
    for name, spec in ARCHS.items():
        assert get_spec(name) is spec and get_spec(spec.model_id) is spec
    with pytest.raises(TRMError, match="Did you mean 'hrm'"):
        get_spec("hmr")


@pytest.mark.parametrize("name", sorted(ARCHS))
def test_every_key_is_documented_and_builds_a_model(name: str) -> None:
    spec = ARCHS[name]
    docs = _class_docs(spec.schema)
    undocumented = [
        f.name for f in dataclasses.fields(spec.schema) if f.name != "loss" and f.name not in docs
    ]
    assert undocumented == []
    layers = {f.name: 1 for f in dataclasses.fields(spec.schema) if f.name in LAYER_KEYS}
    arch = spec.schema(**TINY, **layers)
    assert spec_of(arch) is spec
    config = model_config(
        arch, batch_size=2, seq_len=6, vocab_size=5, num_puzzle_identifiers=3, forward_dtype="float32"
    )
    assert spec_of(config) is spec and type(config) is spec.config
    model = build_model(config)
    assert type(model) is spec.model
    # Reference names: our state dict → the reference's (compiled) → recognised → back, unchanged.
    reference = to_upstream_state_dict(model.state_dict(), compiled=True, arch=name)
    assert detect_arch(reference) == name
    back = convert_upstream_state_dict(reference)
    assert back.keys() == model.state_dict().keys()
    assert all(torch.equal(back[k], v) for k, v in model.state_dict().items())
