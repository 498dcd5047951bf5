"""Launch checks on a real GPU host (`nox -s gpu`); skipped without CUDA."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tools.bench.model import peak_flops
from trm.launch.host.gpu_checks import allreduce_check, matmul_check
from trm.launch.host.hardware import select_layout
from trm.launch.host.nvidia_smi import query_gpus, query_memory_used


@pytest.mark.gpu
def test_preflight_passes_on_this_gpu_host(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "trm", "preflight", "--gpu", "--checkpoint-dir", str(tmp_path), "--checkpoint-gb",
         "0.1", "--report", str(tmp_path / "r.json")],
        capture_output=True, text=True,
    )  # fmt: skip
    report = json.loads((tmp_path / "r.json").read_text())
    names = [c["name"] for c in report["checks"]]
    assert "nccl all-reduce" in names and any(n.startswith("matmul gpu") for n in names), proc.stdout
    for check in report["checks"]:
        if check["name"].startswith("matmul gpu"):
            assert "uuid GPU-" in check["found"]
    assert proc.returncode == 0, proc.stdout


@pytest.mark.gpu
def test_nccl_allreduce_and_matmul_on_every_gpu():
    import torch

    n = torch.cuda.device_count()
    result = allreduce_check(n, backend="nccl", timeout_s=120)
    assert result.ok, result.detail
    for i in range(n):
        r = matmul_check(f"cuda:{i}")
        assert r.ok and r.uuid.startswith(("GPU-", "MIG-")), r
        peak = peak_flops(torch.device(f"cuda:{i}"))
        # A 4096² bf16 matmul reaches well over half of the dense peak on a healthy Hopper/Ampere GPU; a
        # quarter still catches a throttled, misconfigured or shared GPU. Unknown GPUs: at least 10 TFLOP/s.
        floor = 0.25 * peak / 1e12 if peak else 10.0
        assert r.tflops >= floor, (
            f"cuda:{i} {torch.cuda.get_device_name(i)}: {r.tflops:.1f} < {floor:.0f} TFLOP/s"
        )


@pytest.mark.gpu
def test_this_host_has_a_tier_and_memory_is_readable():
    gpus = query_gpus()
    plan = select_layout(gpus)
    assert plan.micro_batch_size * plan.grad_accumulation * plan.world_size == 768
    assert set(query_memory_used(gpus=gpus)) == {g.index for g in gpus}
    # nvidia-smi's memory (the slice's under MIG) agrees with what CUDA gives this process.
    import torch

    cuda_gib = torch.cuda.get_device_properties(0).total_memory / 2**30
    assert abs(cuda_gib - gpus[0].memory_gib) <= 0.1 * gpus[0].memory_gib, (cuda_gib, gpus[0])


@pytest.mark.gpu
def test_nccl_two_processes_share_one_gpu(monkeypatch):
    """Two NCCL ranks (processes) on GPU 0, as a one-GPU host allows: NCCL >= 2.30 runs them with
    NCCL_MULTI_RANK_GPU_ENABLE=1 and the sum must be right; older NCCL refuses two ranks on one device, and
    then both ranks must come back with that refusal, not hang."""
    import torch

    # 2.30, not 2.31: NCCL's source has NCCL_MULTI_RANK_GPU_ENABLE from tag v2.30.3-1 on, not in v2.29.7-1
    # (docs/gpu-host-checks.md, "NCCL: two ranks on one GPU").
    monkeypatch.setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1")
    result = allreduce_check(2, backend="nccl", timeout_s=60, gpus=1)
    if torch.cuda.nccl.version() >= (2, 30, 0):
        assert result.ok, result.detail
    else:
        assert not result.ok and "did not answer" not in result.detail, result.detail
        assert re.search(r"Duplicate GPU|invalid usage", result.detail), result.detail


@pytest.mark.gpu
def test_cuda_matmul_check_is_ieee_and_leaves_tf32_as_set():
    """Under TF32 a 1024² fp32 matmul is off by ~1e-3; the check's block makes it IEEE and restores TF32."""
    import torch

    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    matmul.fp32_precision = "tf32"
    try:
        result = matmul_check("cuda:0")
        assert result.ok and result.max_rel_error < 1e-4, result
        assert matmul.fp32_precision == "tf32"
    finally:
        matmul.fp32_precision = before
