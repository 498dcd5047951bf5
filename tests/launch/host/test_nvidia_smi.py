"""nvidia-smi beyond whole GPUs: MIG slices are sized from the slice, [N/A] fields and stderr warnings."""

from __future__ import annotations

import pytest

from tests.helpers import FIXTURES, install_fake_smi
from trm.errors import TRMError
from trm.launch.host.hardware import select_layout
from trm.launch.host.nvidia_smi import (
    GpuInfo,
    mig_memory_mib,
    parse_mig_listing,
    parse_query_csv,
    query_gpus,
    with_mig_slices,
)


def test_a_mig_slice_is_sized_from_the_slice_not_the_parent_gpu(monkeypatch, tmp_path):
    install_fake_smi(monkeypatch, tmp_path, "h100-mig-3g40gb")
    gpus = query_gpus()
    assert len(gpus) == 1
    gpu = gpus[0]
    assert gpu.name == "NVIDIA H100 80GB HBM3 MIG 3g.40gb" and gpu.mig_profile == "3g.40gb"
    assert gpu.memory_mib == 40 * 1024 and gpu.uuid.startswith("MIG-") and gpu.sm == 90
    plan = select_layout(gpus)
    # The parent's 80 GB would pick the H100 tier (192 rows); the 40 GB slice gets the 40 GB tier.
    assert plan.tier == "a100-40g" and plan.micro_batch_size == 64 and plan.matched_by == "vram"
    assert any("MIG slice 3g.40gb" in n for n in plan.notes)


def test_whole_gpus_are_unchanged_by_the_listing(monkeypatch, tmp_path):
    install_fake_smi(monkeypatch, tmp_path, "h100x4")
    gpus = query_gpus()
    assert [g.mig_profile for g in gpus] == [None] * 4 and gpus[0].memory_mib == 81559
    assert select_layout(gpus).tier == "h100-80g"


def test_mig_listing_parsing_and_mixed_hosts():
    listing = (
        "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-aaaa)\n"
        "  MIG 3g.40gb     Device  0: (UUID: MIG-bbbb)\n"
        "  MIG 1g.10gb+me  Device  1: (UUID: MIG-cccc)\n"
        "GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-dddd)\n"
    )
    slices = parse_mig_listing(listing)
    assert slices == {0: [("3g.40gb", "MIG-bbbb"), ("1g.10gb+me", "MIG-cccc")]}
    parents = [
        GpuInfo(0, "NVIDIA A100-SXM4-80GB", 81920, "8.0", "550.127.05", "GPU-aaaa"),
        GpuInfo(1, "NVIDIA A100-SXM4-80GB", 81920, "8.0", "550.127.05", "GPU-dddd"),
    ]
    out = with_mig_slices(parents, slices)
    assert [(g.index, g.memory_mib, g.mig_profile) for g in out] == [
        (0, 40960, "3g.40gb"),
        (1, 10240, "1g.10gb+me"),
        (2, 81920, None),
    ]
    with pytest.raises(TRMError, match="NUM_GPUS=1"):
        select_layout(out)
    assert select_layout(out, num_gpus=1).micro_batch_size == 64
    with pytest.raises(TRMError, match="MIG profile 'weird'"):
        mig_memory_mib("weird")


def test_a_10gb_slice_is_refused_with_the_fix(monkeypatch, tmp_path):
    gpu = GpuInfo(
        0, "NVIDIA H100 80GB HBM3 MIG 1g.10gb", mig_memory_mib("1g.10gb"), "9.0", "550", "MIG-x", "1g.10gb"
    )
    with pytest.raises(TRMError, match="smaller than every tier"):
        select_layout([gpu])


def test_not_available_compute_capability_is_a_clear_error(monkeypatch, tmp_path):
    install_fake_smi(monkeypatch, tmp_path, "h100x1-na-compute-cap")
    gpus = query_gpus()  # listing and sizing do not need it
    assert gpus[0].compute_cap == "[N/A]" and select_layout(gpus).tier == "h100-80g"
    with pytest.raises(TRMError, match=r"compute capability '\[N/A\]' for GPU 0 .*update the NVIDIA driver"):
        _ = gpus[0].sm


def test_a_stderr_warning_does_not_break_the_listing(monkeypatch, tmp_path):
    install_fake_smi(monkeypatch, tmp_path, "h100x1-inforom-warning")
    gpus = query_gpus()
    assert [g.name for g in gpus] == ["NVIDIA H100 80GB HBM3"] and gpus[0].sm == 90


def test_a_warning_line_in_the_csv_is_skipped():
    text = (
        "WARNING: infoROM is corrupted at gpu 0000:18:00.0\n"
        + (FIXTURES / "h100x1" / "query.csv").read_text()
    )
    assert [g.memory_mib for g in parse_query_csv(text)] == [81559]


def test_failing_nvidia_smi_still_shows_its_error(monkeypatch, tmp_path):
    install_fake_smi(monkeypatch, tmp_path, "no-driver")
    with pytest.raises(TRMError, match="couldn't communicate with the NVIDIA driver"):
        query_gpus()
