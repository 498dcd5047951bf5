"""The step profiler (tools.bench.step_profile) on CPU: part of the harness the GPU check's call 2 runs."""

from __future__ import annotations

import json

from tools.bench import step_profile


def test_kernel_names_fall_into_the_profile_categories() -> None:
    cases = {
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64": "matmul",
        "nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTT": "matmul",
        "aten::addmm": "matmul",
        "pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>": "attention",
        "fmha_cutlassF_bf16_aligned_64x64_rf_sm80": "attention",
        "aten::_scaled_dot_product_flash_attention_for_cpu": "attention",
        "triton_poi_fused_add_mul_0": "elementwise",
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>": "elementwise",
        "aten::silu": "elementwise",
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL": "other",
    }
    assert {name: step_profile.classify(name) for name in cases} == cases


def test_step_profile_splits_a_cpu_step(capsys) -> None:
    args = ["--config", "tiny", "--device", "cpu", "--batch", "1", "--steps", "1", "--warmup", "0", "--json"]
    assert step_profile.main(args) == 0
    out = capsys.readouterr().out
    result = json.loads(out.strip().splitlines()[-1])
    ms = result["ms_per_step"]
    assert set(ms) == {"matmul", "attention", "elementwise", "other", "idle"}
    assert ms["matmul"] > 0 and ms["attention"] > 0 and ms["elementwise"] > 0
    assert abs(sum(ms.values()) - result["wall_ms_per_step"]) < 0.01 * result["wall_ms_per_step"] + 0.01
    assert result["measured"] is True and "(measured over 1 profiled steps)" in out


def test_on_cuda_only_kernels_count_so_an_operator_and_its_kernel_are_not_counted_twice() -> None:
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    def event(key: str, device: DeviceType, ms: float) -> SimpleNamespace:
        return SimpleNamespace(
            key=key, device_type=device, self_device_time_total=ms * 1e3, self_cpu_time_total=0.0
        )

    events = [
        event("aten::mm", DeviceType.CPU, 6.0),  # its own device time is its kernel's
        event("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", DeviceType.CUDA, 6.0),
        event("pytorch_flash::flash_fwd_kernel", DeviceType.CUDA, 2.0),
        event("triton_poi_fused_add_0", DeviceType.CUDA, 1.0),
    ]
    result = step_profile.breakdown(events, cuda=True, wall_s=0.024, steps=2, device="gpu")
    assert result.ms == {"matmul": 3.0, "attention": 1.0, "elementwise": 0.5, "other": 0.0, "idle": 7.5}
    assert result.to_dict()["share_of_wall"]["idle"] == 0.625
