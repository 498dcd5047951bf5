"""`load_checkpoint`: upstream weight files (compiled or not, puzzle table resized) and our step_N folders."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trm.errors import TRMError
from trm.model import TinyRecursiveModel, TRMConfig
from trm.model.upstream import to_upstream_state_dict
from trm.training.checkpointing import layout as ckpt
from trm.training.checkpointing.initial_weights import load_initial_weights


def model(num_ids: int, seed: int) -> TinyRecursiveModel:
    torch.manual_seed(seed)
    cfg = TRMConfig(batch_size=2, seq_len=16, vocab_size=12, num_puzzle_identifiers=num_ids, hidden_size=16,
                    num_heads=2, L_layers=1, H_cycles=1, L_cycles=1, puzzle_emb_ndim=8, puzzle_emb_len=1,
                    forward_dtype="float32")  # fmt: skip
    return TinyRecursiveModel(cfg)


@pytest.mark.parametrize("compiled", [True, False])
def test_upstream_file_loads_and_the_puzzle_table_is_resized_to_its_mean_row(
    tmp_path: Path, compiled: bool
) -> None:
    source = model(num_ids=5, seed=1)
    with torch.no_grad():
        source.inner.puzzle_emb.weight.copy_(torch.arange(40, dtype=torch.float32).view(5, 8))
    path = tmp_path / "step_1234"
    torch.save(to_upstream_state_dict(source.state_dict(), compiled=compiled), path)

    target = model(num_ids=7, seed=2)
    assert "upstream" in load_initial_weights(str(path), target, num_identifiers=7)
    table = target.inner.puzzle_emb.weight
    assert table.shape == (7, 8)
    assert torch.equal(table, torch.arange(40, dtype=torch.float32).view(5, 8).mean(0).expand(7, 8))
    for (name, a), (_, b) in zip(source.named_parameters(), target.named_parameters(), strict=True):
        assert torch.equal(a, b), name


def test_our_checkpoint_loads_its_ema_weights(tmp_path: Path) -> None:
    source = model(num_ids=5, seed=1)
    ema = {n: p.detach() + 1.0 for n, p in source.named_parameters()}
    folder = ckpt.prepare_partial(tmp_path, 3)
    ckpt.save_torch({"model": source.state_dict(), "ema": {"rate": 0.9, "shadow": ema}}, folder / ckpt.STATE)
    ckpt.publish(tmp_path, 3, {"step": 3})
    target = model(num_ids=5, seed=2)
    assert "EMA" in load_initial_weights(str(tmp_path / "step_3"), target, num_identifiers=5)
    for name, p in target.named_parameters():
        assert torch.equal(p, ema[name]), name


def test_bad_paths_and_shapes_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(TRMError, match="does not exist"):
        load_initial_weights(str(tmp_path / "nope"), model(5, 0), 5)
    path = tmp_path / "step_1"
    wide = TinyRecursiveModel(TRMConfig(batch_size=2, seq_len=16, vocab_size=12, num_puzzle_identifiers=5,
                                        hidden_size=32, num_heads=2, L_layers=1, puzzle_emb_ndim=8,
                                        puzzle_emb_len=1, forward_dtype="float32"))  # fmt: skip
    torch.save(to_upstream_state_dict(wide.state_dict()), path)
    with pytest.raises(TRMError, match="do not fit this arch"):
        load_initial_weights(str(path), model(5, 0), 5)
