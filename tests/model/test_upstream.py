"""Loading upstream-named state dicts (with and without `_orig_mod.`) and the puzzle-embedding resize."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import small_config
from trm.errors import TRMError
from trm.model import TinyRecursiveModel
from trm.model.upstream import convert_upstream_state_dict, resize_puzzle_embedding, to_upstream_state_dict

# Names as upstream's compiled runs write them (torch.compile's `_orig_mod.` prefix), for one attention and one mlp_t block.
UPSTREAM_ATTENTION_KEYS = {
    "_orig_mod.model.inner.embed_tokens.embedding_weight",
    "_orig_mod.model.inner.lm_head.weight",
    "_orig_mod.model.inner.q_head.weight",
    "_orig_mod.model.inner.q_head.bias",
    "_orig_mod.model.inner.puzzle_emb.weights",
    "_orig_mod.model.inner.H_init",
    "_orig_mod.model.inner.L_init",
    "_orig_mod.model.inner.L_level.layers.0.self_attn.qkv_proj.weight",
    "_orig_mod.model.inner.L_level.layers.0.self_attn.o_proj.weight",
    "_orig_mod.model.inner.L_level.layers.0.mlp.gate_up_proj.weight",
    "_orig_mod.model.inner.L_level.layers.0.mlp.down_proj.weight",
}


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("variant", [{}, {"mlp_t": True, "L_layers": 2}, {"pos_encodings": "learned"}])
def test_upstream_style_state_dict_loads_strictly(compiled, variant):
    torch.manual_seed(0)
    source = TinyRecursiveModel(small_config(**variant))
    source.puzzle_emb.weight.normal_()
    upstream = to_upstream_state_dict(source.state_dict(), compiled=compiled)
    prefix = "_orig_mod.model.inner." if compiled else "model.inner."
    assert all(k.startswith(prefix) for k in upstream)
    target = TinyRecursiveModel(small_config(**variant))
    target.load_state_dict(convert_upstream_state_dict(upstream), strict=True)
    for key, value in source.state_dict().items():
        assert torch.equal(target.state_dict()[key], value), key


def test_upstream_key_names():
    upstream = to_upstream_state_dict(TinyRecursiveModel(small_config()).state_dict())
    assert set(upstream) == UPSTREAM_ATTENTION_KEYS
    mlp_t = to_upstream_state_dict(
        TinyRecursiveModel(small_config(mlp_t=True, pos_encodings="learned")).state_dict()
    )
    assert "_orig_mod.model.inner.L_level.layers.0.mlp_t.gate_up_proj.weight" in mlp_t
    assert "_orig_mod.model.inner.L_level.layers.0.mlp_t.down_proj.weight" in mlp_t
    assert "_orig_mod.model.inner.embed_pos.embedding_weight" in mlp_t


def test_unknown_upstream_key_is_a_trm_error():
    with pytest.raises(TRMError, match=r"optimizer\.state"):
        convert_upstream_state_dict({"optimizer.state": torch.zeros(1)})
    with pytest.raises(TRMError, match=r"L_level\.layers\.0\.ln\.weight"):
        convert_upstream_state_dict({"model.inner.L_level.layers.0.ln.weight": torch.zeros(1)})


def test_resize_puzzle_embedding_uses_mean_row():
    table = torch.tensor([[1.0, 2.0], [3.0, 6.0]])
    sd = {"inner.puzzle_emb.weight": table, "inner.H_init": torch.zeros(2)}
    resized = resize_puzzle_embedding(sd, 5)
    assert resized["inner.puzzle_emb.weight"].shape == (5, 2)
    assert torch.equal(resized["inner.puzzle_emb.weight"], torch.tensor([[2.0, 4.0]] * 5))
    assert resized["inner.H_init"] is sd["inner.H_init"] and sd["inner.puzzle_emb.weight"] is table
    assert resize_puzzle_embedding(sd, 2)["inner.puzzle_emb.weight"] is table  # same size: untouched
    prefixed = resize_puzzle_embedding({"model.inner.puzzle_emb.weight": table}, 3)
    assert prefixed["model.inner.puzzle_emb.weight"].shape == (3, 2)


def test_upstream_checkpoint_with_other_identifier_count_loads_after_resize():
    source = TinyRecursiveModel(small_config(num_puzzle_identifiers=9))
    upstream = to_upstream_state_dict(source.state_dict(), compiled=False)
    target = TinyRecursiveModel(small_config(num_puzzle_identifiers=4))
    target.load_state_dict(resize_puzzle_embedding(convert_upstream_state_dict(upstream), 4), strict=True)
    assert target.puzzle_emb.weight.shape == (4, 16)
