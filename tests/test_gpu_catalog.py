"""The GPU catalog is the one place a GPU's facts live; the hardware table's names, the MFU peaks, the
Kubernetes product values and the cost table's GPU models are read from it."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tools.jobs import policy as jobpolicy
from trm import gpu_catalog
from trm.errors import TRMError
from trm.gpu_catalog import Board, Gpu
from trm.gpu_names import names_model
from trm.launch.host.hardware import TABLE_PATH, load_table, match_tier
from trm.launch.host.nvidia_smi import GpuInfo
from trm.launch.plan.paper_runs import GPU_MODELS, GpuModel
from trm.training.throughput import peak_flops

FIXTURES = Path(__file__).parent / "fixtures" / "nvidia_smi"

# The tables as they were written out before the catalog (values kept, once, literally).
OLD_PEAK_TFLOPS = {
    "H100": 989.4, "H100 PCIe": 756.0, "H100 NVL": 835.0, "H800": 989.4, "H200": 989.4, "H200 NVL": 835.0,
    "A100": 312.0, "A10": 125.0, "L40S": 362.05, "L4": 121.0, "RTX 4090": 165.2, "B200": 2250.0,
    "GB200": 2500.0, "RTX PRO 6000": 500.0, "RTX 5090": 209.5, "RTX A6000": 154.8, "A40": 149.7,
    "RTX 3090": 71.0,
}  # fmt: skip
OLD_TIER_MATCH = {
    "h200-141g": ["H200", "GH200"], "h100-80g": ["H100", "H800"], "a100-80g": ["A100"],
    "b200-180g": ["B200", "GB200"], "rtxpro6000-96g": ["RTX PRO 6000"], "rtx5090-32g": ["RTX 5090"],
    "a6000-48g": ["RTX A6000", "A40"], "rtx3090-24g": ["RTX 3090", "A10", "A10G"], "l4-24g": ["L4"],
    "l40s-48g": ["L40S", "L40", "RTX 6000 Ada"], "a100-40g": ["A100"], "rtx4090-24g": ["RTX 4090"],
    "gpu-16g": [],
}  # fmt: skip
OLD_GPU_PRODUCT_VALUES = {
    "H100": ("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-SXM5-80GB"),
    "H200": ("NVIDIA-H200", "NVIDIA-H200-SXM5-141GB"),
    "B200": ("NVIDIA-B200",),
    "RTX-PRO-6000": (
        "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",  # pragma: allowlist secret (a GPU name)
        "NVIDIA-RTX-PRO-6000-Blackwell-Workstation-Edition",  # pragma: allowlist secret (a GPU name)
        "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edition",  # pragma: allowlist secret (a GPU name)
    ),
    "RTX-5090": ("NVIDIA-GeForce-RTX-5090",),
    "RTX-A6000": ("NVIDIA-RTX-A6000",),
    "A40": ("NVIDIA-A40",),
    "A10": ("NVIDIA-A10", "NVIDIA-A10G"),
    "RTX-3090": ("NVIDIA-GeForce-RTX-3090",),
    "L4": ("NVIDIA-L4",),
}
OLD_GPU_SM = {
    "H100": 90, "H200": 90, "B200": 100, "RTX-PRO-6000": 120, "RTX-5090": 120,
    "RTX-A6000": 86, "A40": 86, "A10": 86, "RTX-3090": 86, "L4": 89,
}  # fmt: skip
OLD_GPU_MODELS = {
    "H100": GpuModel("NVIDIA H100 80GB HBM3", 81559, "9.0"),
    "H200": GpuModel("NVIDIA H200", 143771, "9.0"),
    "A100-80G": GpuModel("NVIDIA A100-SXM4-80GB", 81920, "8.0"),
    "L40S": GpuModel("NVIDIA L40S", 46068, "8.9"),
    "B200": GpuModel("NVIDIA B200", 183359, "10.0"),
}


def test_the_derived_tables_keep_the_old_values() -> None:
    assert dict(gpu_catalog.peak_tflops()) == OLD_PEAK_TFLOPS
    assert len(gpu_catalog.peak_tflops()) == len(OLD_PEAK_TFLOPS)  # no name twice
    tiers = load_table().tiers
    assert [t.name for t in tiers] == list(OLD_TIER_MATCH)
    assert {t.name: sorted(t.match) for t in tiers} == {k: sorted(v) for k, v in OLD_TIER_MATCH.items()}
    # the order too: the annotation's choices and the smoke's affinity list follow it
    assert list(gpu_catalog.k8s_products().items()) == list(OLD_GPU_PRODUCT_VALUES.items())
    assert gpu_catalog.k8s_sm() == OLD_GPU_SM
    assert GPU_MODELS == OLD_GPU_MODELS
    for name, tflops in OLD_PEAK_TFLOPS.items():
        assert peak_flops(f"NVIDIA {name}") == pytest.approx(tflops * 1e12), name


NEW = Gpu(
    name="ZX 9000", sm=89, tiers=("l40s-48g",), peak_bf16_tflops=321.0,
    k8s_products=("NVIDIA-ZX-9000",), boards=(Board("NVIDIA ZX 9000", 46000),),
)  # fmt: skip
NEW_GPU = GpuInfo(0, "NVIDIA ZX 9000", 46000, "8.9", "580.95.05", "GPU-zx")


def _known_everywhere() -> dict[str, object]:
    tier, matched_by = match_tier(NEW_GPU, load_table())
    job = {"metadata": {"annotations": {"trm-stack/gpu": "ZX-9000", "trm-stack/image-variant": "sm90"}}}
    return {
        "peak": peak_flops(NEW_GPU.name),
        "tier": (tier.name, matched_by),
        "job check": jobpolicy.check_gpu_follows_overlay("Job/x", job)[0].split(": ", 1)[1].split(" (")[0],
        "any sm89": "NVIDIA-ZX-9000" in jobpolicy.accepted_products("any", "sm89"),
        "any sm90": "NVIDIA-ZX-9000" in jobpolicy.accepted_products("any", "sm90"),
    }


def test_a_gpu_added_to_the_catalog_is_known_to_every_table(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _known_everywhere() == {
        "peak": None,
        "tier": ("a6000-48g", "vram"),  # the largest tier its memory reaches
        "job check": "annotation trm-stack/gpu must name the GPU the overlay is sized for",
        "any sm89": False,
        "any sm90": False,
    }
    with pytest.raises(
        TRMError, match=r"no board 'NVIDIA ZX 9000' in the GPU catalog \(trm/gpu_catalog.py\)"
    ):
        GpuModel.of_board("NVIDIA ZX 9000")

    monkeypatch.setattr(gpu_catalog, "GPUS", (*gpu_catalog.GPUS, NEW))
    assert _known_everywhere() == {
        "peak": pytest.approx(321e12),
        "tier": ("l40s-48g", "name"),
        "job check": "trm-stack/gpu=ZX-9000",  # known: only its image variant is wrong (sm_89, not sm90)
        "any sm89": True,
        "any sm90": False,
    }
    assert jobpolicy.accepted_products("ZX-9000") == ["NVIDIA-ZX-9000"]
    job = {"metadata": {"annotations": {"trm-stack/gpu": "ZX-9000", "trm-stack/image-variant": "sm90"}}}
    assert (
        "(sm_89) but trm-stack/image-variant=sm90 does not run on it"
        in (jobpolicy.check_gpu_follows_overlay("Job/x", job)[0])
    )
    assert GpuModel.of_board("NVIDIA ZX 9000") == GpuModel("NVIDIA ZX 9000", 46000, "8.9")


def test_the_shipped_hardware_table_takes_its_names_from_the_catalog_only() -> None:
    raw = tomllib.loads(TABLE_PATH.read_text(encoding="utf-8"))
    assert [t["name"] for t in raw["tier"] if "match" in t] == []
    shipped = {t.name for t in load_table().tiers}
    unknown = sorted({(g.name, t) for g in gpu_catalog.GPUS for t in g.tiers if t not in shipped})
    assert unknown == [], "catalog GPUs naming a tier trm/launch/host/hardware.toml lacks"
    unnamed = sorted(shipped - {t for g in gpu_catalog.GPUS for t in g.tiers})
    assert unnamed == ["gpu-16g"]  # the 16 GB fallback sizes by memory alone


def test_names_are_unique_and_editions_are_sized_as_their_gpu() -> None:
    names = [g.name for g in gpu_catalog.GPUS] + [e for g in gpu_catalog.GPUS for e, _ in g.editions]
    assert len(names) == len(set(names))
    boards = [b.name for g in gpu_catalog.GPUS for b in g.boards]
    assert len(boards) == len(set(boards))
    for gpu in gpu_catalog.GPUS:
        for edition, _ in gpu.editions:
            assert names_model(gpu.name, edition), (gpu.name, edition)
        for b in gpu.boards:  # each board's name is the GPU's, and no other GPU's
            assert [g.name for g in gpu_catalog.GPUS if names_model(g.name, b.name)] == [gpu.name], b.name


def _recorded_gpus() -> set[tuple[str, int, str]]:
    rows = set()
    for query in FIXTURES.glob("*/query.csv"):
        for line in query.read_text(encoding="utf-8").splitlines():
            name, memory, cap, *_ = (field.strip() for field in line.split(","))
            rows.add((name, int(memory), cap))
    return rows


def test_the_recorded_nvidia_smi_boards_agree_with_the_catalog() -> None:
    recorded = _recorded_gpus()
    assert ("NVIDIA B200", 183359, "10.0") in recorded
    for name, memory, cap in sorted(recorded):
        named = [g for g in gpu_catalog.GPUS if names_model(g.name, name)]
        assert len(named) == 1, f"{name}: recorded under tests/fixtures/nvidia_smi, not in the GPU catalog"
        if cap != "[N/A]":
            assert named[0].compute_cap == cap, name
        boards = {b.name: b.memory_mib for b in named[0].boards}
        assert boards.get(name) == memory, f"{name} ({memory} MiB): add the board to the GPU catalog"
