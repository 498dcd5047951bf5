"""Activation memory per batch row, and the hardware table's micro-batches measured against it."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.helpers import small_config
from tools.bench.memory import per_row_bytes, saved_bytes
from tools.bench.model import build_ours, paper_config
from trm.launch.host.hardware import load_table

GIB = 2**30
# fp32 parameters, their gradients and AdamATan2's two moments.
STATE_BYTES_PER_PARAM = 16
# Saved activations may take this share of a tier's VRAM: the rest is for the backward's transient
# gradients, the allocator's fragmentation, the CUDA context and NCCL buffers.
ACTIVATION_SHARE = 0.6


def _build(config):
    return build_ours(config, torch.device("cpu"))


def test_saved_activations_grow_linearly_with_the_batch():
    config = small_config()
    sizes = [
        saved_bytes(_build(c), c) for c in (dataclasses.replace(config, batch_size=b) for b in (1, 2, 3))
    ]
    # Linear up to a few bytes of data-dependent bookkeeping (which puzzle rows a batch touches).
    assert sizes[1] - sizes[0] == pytest.approx(sizes[2] - sizes[1], rel=0.01)
    assert sizes[1] - sizes[0] > 0
    assert per_row_bytes(_build, config) == (sizes[1] - sizes[0], 2 * sizes[0] - sizes[1])


def test_every_gpu_tier_keeps_its_micro_batch_activations_within_its_vram():
    # Gradient-free H cycles save nothing, so H_cycles=1 keeps what the paper config saves, at 1/3 the work.
    config = dataclasses.replace(paper_config(), H_cycles=1)
    per_row, fixed = per_row_bytes(_build, config)
    assert 150 * 2**20 < per_row < 300 * 2**20  # 200 MB at seq 916, hidden 512, bf16 (docs/models.md)
    params = sum(p.numel() for p in _build(dataclasses.replace(config, batch_size=1)).parameters())
    for tier in load_table().tiers:
        need = tier.max_micro_batch * per_row + fixed + STATE_BYTES_PER_PARAM * params
        assert need <= ACTIVATION_SHARE * tier.min_vram_gib * GIB, (tier.name, need / GIB)


@pytest.mark.parametrize("arch", ["urm", "hrm", "transformers_baseline"])
def test_command_line_measures_any_architecture(arch, monkeypatch, capsys):
    from tools.bench.memory import main

    monkeypatch.delenv("TRM_UPSTREAM", raising=False)
    monkeypatch.delenv("TRM_URM", raising=False)
    assert main(["--arch", arch, "--config", "tiny"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"arch={arch} config=tiny ")
    ours = next(line for line in out.splitlines() if line.startswith("ours "))
    assert float(ours.split()[1]) > 0  # MB per row
    assert "upstream" not in out


def test_command_line_names_the_urm_variable_for_a_bad_reference(tmp_path, monkeypatch, capsys):
    from tools.bench.memory import main

    monkeypatch.delenv("TRM_UPSTREAM", raising=False)
    monkeypatch.setenv("TRM_URM", str(tmp_path))
    assert main(["--arch", "urm", "--config", "tiny"]) == 2
    assert f"TRM_URM={tmp_path} is not a URM checkout" in capsys.readouterr().err
