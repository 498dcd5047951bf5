"""The GPUs people rent besides H100/H200/A100/L40S (issue 39): a recorded host of each (B200, RTX 5090,
RTX PRO 6000 Blackwell, RTX A6000, L4) gets, in the launcher's plan, the image variant its driver and compute
capability call for (with that family's optimizer backend), its own hardware tier, a batch layout that keeps
the global batch, and a time estimate from its bf16 peak. Before, none of these had a tier or a peak, and no
image covered the Blackwell cards."""

from __future__ import annotations

import sys
import tempfile

import pytest

from tests.helpers import FIXTURES, fake_smi_env, trm_in_process
from trm.launch.config.settings import LaunchSettings
from trm.launch.host.nvidia_smi import parse_query_csv
from trm.launch.plan.plan import build_plan

EXT = "optimizer adam-atan2 extension"
TORCH = "optimizer trm AdamATan2 (torch)"

# shape -> (image line start, optimizer backend, tier, micro-batch, accumulation steps)
HOSTS = {
    "b200x8": ("sm100 (trm:0.1.0-cu130-sm100: CUDA 13.0, torch 2.13.0", EXT, "b200-180g", 96, 1),
    "rtx5090x1": (
        "sm120-cu128 (trm:0.1.0-cu128-sm120: CUDA 12.8, torch 2.10.0",
        TORCH,
        "rtx5090-32g",
        64,
        12,
    ),
    "rtxpro6000x1": ("sm120 (trm:0.1.0-cu130-sm120: CUDA 13.0, torch 2.13.0", EXT, "rtxpro6000-96g", 256, 3),
    "a6000x2": ("sm80-cu128 (trm:0.1.0-cu128-sm80: CUDA 12.8, torch 2.10.0", TORCH, "a6000-48g", 96, 4),
    "l4x4": ("sm89-cu128 (trm:0.1.0-cu128-sm89: CUDA 12.8, torch 2.10.0", TORCH, "l4-24g", 32, 6),
}


@pytest.mark.parametrize("shape", sorted(HOSTS))
def test_the_plan_picks_variant_backend_tier_and_batch_layout(shape):
    image, backend, tier, micro, accum = HOSTS[shape]
    gpus = parse_query_csv((FIXTURES / shape / "query.csv").read_text())
    with tempfile.TemporaryDirectory() as workspace:
        env = {"TASK": "arc2", "WORKSPACE": workspace}
        plan = build_plan(LaunchSettings.from_env(env), gpus, env)
        out = plan.render(env)
    lines = out.splitlines()
    image_line = next(line for line in lines if line.startswith("image "))
    assert image_line.removeprefix("image").strip().startswith(image) and backend in image_line
    layout = plan.hardware
    assert (layout.tier, layout.matched_by, layout.micro_batch_size, layout.grad_accumulation) == (
        tier, "name", micro, accum,
    )  # fmt: skip
    assert layout.world_size == len(gpus)
    assert layout.global_batch_size == 768 == layout.micro_batch_size * layout.grad_accumulation * len(gpus)
    assert f"global_batch_size=768 micro_batch_size={micro} compile=true device=cuda" in out
    # the bf16 peak of the card feeds the time estimate (no peak: "not in the peak FLOP/s table")
    assert "(estimate: FLOPs at MFU 0.30)" in out and "not in the peak FLOP/s table" not in out


def test_a_recorded_b200_host_dry_run_plans_the_sm100_image_with_the_extension(tmp_path, monkeypatch, capsys):
    """`python -m trm launch --dry-run` on the recorded 8x B200 (R580) host, end to end from its nvidia-smi
    (in this process; runbook 01's cpu block runs the same through scripts/train_prod.sh)."""
    env = fake_smi_env(tmp_path, "b200x8")
    env.update(PYTHON=sys.executable, WORKSPACE=str(tmp_path / "ws"), TASK="arc2")
    proc = trm_in_process(monkeypatch, capsys, ["launch", "--dry-run"], env)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert (
        f"image         sm100 (trm:0.1.0-cu130-sm100: CUDA 13.0, torch 2.13.0, {EXT}) for driver 580.95.05"
        in out
    )
    assert "tier              b200-180g (matched by name; table values: estimate)" in out
    assert "per-rank batch    96 = 1 accumulation step(s) x micro-batch 96" in out
    assert "--standalone --nproc-per-node=8" in out
