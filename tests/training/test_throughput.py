"""Throughput metrics: the FLOP formula (by hand and against torch's FLOP counter), MFU, the step timer."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from tests.training.test_trainer_inprocess import run
from trm.model.registry import ARCHS, build_model, model_config
from trm.model.schema import TRMArch
from trm.training.throughput import (
    StepTimer,
    Window,
    act_step_flops,
    peak_flops,
    summarize,
    throughput_metrics,
)

# torch's counter sees matmuls, bmm and convolutions; on CPU it only sees the attention's two matmuls when
# SDPA runs its math backend. Element-wise work is in neither count. Measured agreement: exact for the
# TRM family, HRM and the transformer baseline, 0.07 % for URM (the conv's padded positions).
TOLERANCE = 0.01


def tiny_config(name: str, **changes: object) -> object:
    spec = ARCHS[name]
    fields = {f.name for f in dataclasses.fields(spec.schema)}
    keys = {
        "hidden_size": 32,
        "num_heads": 2,
        "H_cycles": 2,
        "puzzle_emb_ndim": 32,
        "forward_dtype": "float32",
    }
    for key, value in (
        ("L_cycles", 2),
        ("L_layers", 2),
        ("H_layers", 2),
        ("num_layers", 2),
        ("puzzle_emb_len", 2),
    ):
        if key in fields:
            keys[key] = value
    keys.update(changes)
    return model_config(
        spec.schema(**keys), batch_size=3, seq_len=24, vocab_size=12, num_puzzle_identifiers=5
    )


def measured(config: object, *, train: bool) -> float:
    """FLOPs per example torch counts for one ACT step of the core (forward, or forward + backward)."""
    torch.manual_seed(0)
    model = build_model(config)
    batch = {
        "inputs": torch.randint(0, 12, (3, 24)),
        "labels": torch.randint(0, 12, (3, 24)),
        "puzzle_identifiers": torch.randint(0, 5, (3,)),
    }
    carry = model.inner.empty_carry(3, torch.device("cpu"))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        _, logits, q_halt, q_continue = model.inner(carry, batch)
        if train:
            (logits.float().sum() + q_halt.sum() + q_continue.sum()).backward()
    return counter.get_total_flops() / 3


def test_formula_by_hand_for_a_tiny_trm() -> None:
    config = model_config(
        TRMArch(hidden_size=16, num_heads=2, L_layers=1, H_cycles=1, L_cycles=1, puzzle_emb_ndim=16,
                puzzle_emb_len=1, forward_dtype="float32"),
        batch_size=2, seq_len=4, vocab_size=12, num_puzzle_identifiers=3,
    )  # fmt: skip
    # S = 4 tokens + 1 prefix; SwiGLU width round_up_256(round(4·16·2/3)) = 256.
    mlp = 6 * 16 * 256  # gate/up 2·16·512 + down 2·256·16
    attention = 2 * 16 * 48 + 2 * 16 * 16 + 4 * 5 * 16  # qkv, out, Q·Kᵀ and attention·V
    block = (mlp + attention) * 5
    heads = 2 * 16 * 12 * 4 + 2 * 16 * 2  # LM head on the 4 answer tokens, Q head on position 0
    flops = act_step_flops(config)
    # H_cycles·(L_cycles+1)·L_layers = 2 block passes, all in the gradient-carrying cycle.
    assert flops.grad == 2 * block + heads == 271_040
    assert flops.no_grad == 0
    assert flops.train == 3 * 271_040


def test_no_grad_cycles_count_once_in_training() -> None:
    flops = act_step_flops(tiny_config("trm", H_cycles=3, L_cycles=4))
    per_cycle = flops.no_grad / 2  # H_cycles - 1 = 2 no-grad cycles of (L_cycles + 1) passes each
    assert flops.grad > per_cycle  # the grad cycle also has the heads
    assert flops.train == pytest.approx(3 * flops.grad + flops.no_grad)


@pytest.mark.parametrize("name", sorted(ARCHS))
def test_forward_formula_matches_torch_flop_counter(name: str) -> None:
    config = tiny_config(name)
    assert measured(config, train=False) == pytest.approx(act_step_flops(config).forward, rel=TOLERANCE)


@pytest.mark.parametrize("mlp_t", [False, True])
def test_training_formula_matches_torch_flop_counter(mlp_t: bool) -> None:
    config = tiny_config("trm", mlp_t=mlp_t, **({"pos_encodings": "none"} if mlp_t else {}))
    flops = act_step_flops(config)
    assert measured(config, train=True) == pytest.approx(flops.train, rel=TOLERANCE)


@pytest.mark.parametrize(
    ("device_name", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", 989.4),  # SXM5
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H100 NVL", 835.0),  # read as the SXM peak before
        ("NVIDIA H200", 989.4),
        ("NVIDIA H200 NVL", 835.0),  # read as the SXM peak before
        ("NVIDIA H800", 989.4),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA A100 80GB PCIe", 312.0),
        ("NVIDIA A10", 125.0),  # not the A100
        ("NVIDIA L40S", 362.05),
        ("NVIDIA L4", 121.0),  # the sm89 tier had no peak (no MFU) before; not the L40S
        ("NVIDIA GeForce RTX 4090", 165.2),  # the sm89 tier had no peak before
        # Blackwell and Ampere sm_86, no peak (no MFU, no FLOP-based time estimate) before
        ("NVIDIA B200", 2250.0),
        ("NVIDIA GB200", 2500.0),  # not the B200
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 500.0),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 500.0),
        ("NVIDIA GeForce RTX 5090", 209.5),  # GeForce: bf16 with fp32 accumulate at half rate
        ("NVIDIA RTX A6000", 154.8),
        ("NVIDIA A40", 149.7),
        ("NVIDIA GeForce RTX 3090", 71.0),  # GeForce: half rate
    ],
)
def test_peak_table_reads_each_gpu_by_its_most_specific_name(device_name: str, tflops: float) -> None:
    assert peak_flops(device_name) == pytest.approx(tflops * 1e12)


def test_unknown_devices_and_mig_slices_have_no_peak() -> None:
    for name in (
        "cpu",
        "Tesla T4",
        "NVIDIA A10G",
        "NVIDIA L40",
        "NVIDIA GeForce RTX 4080",
        "NVIDIA RTX 6000 Ada Generation",
    ):
        assert peak_flops(name) is None, name
    # A slice has a share of the SMs its name does not give: no MFU rather than one against the whole GPU.
    assert peak_flops("NVIDIA H100 80GB HBM3 MIG 3g.40gb") is None
    assert peak_flops("NVIDIA B200 MIG 1g.23gb") is None


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_timer_counts_passes_and_loader_waits_but_not_what_runs_between_passes() -> None:
    clock = FakeClock()
    timer = StepTimer(clock)

    def loader(n: int):
        for i in range(n):
            clock.now += 0.5  # the loader blocks 0.5 s per batch
            yield i

    for _ in timer.batches(loader(2)):
        clock.now += 2.0  # a step
        timer.step_done()
    clock.now += 60.0  # an evaluation between passes: not training time
    for _ in timer.batches(loader(1)):
        clock.now += 2.0
        timer.step_done()
        window = timer.window()  # a log point inside the pass
    assert window == Window(steps=3, seconds=7.5, loader_wait=1.5)
    clock.now += 1.0
    for _ in timer.batches(loader(1)):
        clock.now += 3.0
        timer.step_done()
        break  # the loop leaves a pass early (step limit, stop request)
    clock.now += 100.0
    assert timer.window() == Window(steps=1, seconds=3.5, loader_wait=0.5)


def test_leaving_a_pass_early_closes_the_loaders_pass() -> None:
    closed = []

    def loader():
        try:
            yield from range(5)
        finally:
            closed.append(True)

    for _ in StepTimer().batches(loader()):
        break
    assert closed == [True]


def test_metrics_of_a_window_and_mfu_only_with_a_peak() -> None:
    window = Window(steps=4, seconds=2.0, loader_wait=0.5)
    out = throughput_metrics(
        window, examples_per_step=8, tokens_per_example=10, train_flops_per_example=1e9, peak_flops_total=1e11
    )
    assert out == pytest.approx(
        {
            "perf/step_seconds": 0.5,
            "perf/examples_per_second": 16.0,
            "perf/tokens_per_second": 160.0,
            "perf/loader_wait_seconds": 0.125,
            "perf/loader_wait_fraction": 0.25,
            "perf/mfu": 16.0 * 1e9 / 1e11,
        }
    )
    cpu = throughput_metrics(
        window, examples_per_step=8, tokens_per_example=10, train_flops_per_example=1e9, peak_flops_total=None
    )
    assert "perf/mfu" not in cpu and cpu["perf/step_seconds"] == 0.5
    assert throughput_metrics(Window(0, 0.0, 0.0), examples_per_step=8, tokens_per_example=10,
                              train_flops_per_example=None, peak_flops_total=None) == {}  # fmt: skip


def test_summary_of_logged_series() -> None:
    series = {
        "perf/step_seconds": [(1, 4.0), (2, 1.0), (3, 1.0), (4, 2.0)],
        "perf/examples_per_second": [(1, 2.0), (2, 8.0), (3, 8.0), (4, 4.0)],
        "perf/loader_wait_fraction": [(1, 0.5), (2, 0.1), (3, 0.1), (4, 0.1)],
        "perf/peak_memory_gib": [(1, 10.0), (4, 12.5)],
    }
    out = summarize(series)
    assert out["windows"] == 4 and out["step_seconds_mean"] == 2.0 and out["step_seconds_median"] == 1.5
    assert out["examples_per_second_median"] == 6.0 and out["peak_memory_gib"] == 12.5
    assert out["loader_wait_fraction_mean"] == pytest.approx(0.2)
    assert out["mfu_median"] is None  # CPU runs log no MFU


def test_trainer_logs_throughput_on_cpu_without_mfu_or_gpu_memory(tmp_path: Path) -> None:
    code, trainer = run(tmp_path / "run")
    assert code == 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if "train/lm_loss" in r]
    assert len(train_rows) == trainer.progress.step  # log_interval 1
    for row in train_rows:
        assert row["perf/step_seconds"] > 0 and row["perf/examples_per_second"] > 0
        assert row["perf/tokens_per_second"] == pytest.approx(
            row["perf/examples_per_second"] * trainer.components.train_loader.metadata.seq_len
        )
        assert 0 <= row["perf/loader_wait_fraction"] <= 1
        assert "perf/mfu" not in row and "perf/peak_memory_gib" not in row
