"""GPU placement of a batch: N // K slots, CUDA_VISIBLE_DEVICES, torchrun for K > 1, the launcher's layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trm import exit_codes
from trm.errors import TRMError
from trm.experiments import placement
from trm.experiments.batch import Batch, Options
from trm.experiments.suite import Catalog
from trm.launch.host.nvidia_smi import GpuInfo


def fake_gpus(n: int, name: str = "NVIDIA H100 80GB HBM3") -> list[GpuInfo]:
    return [GpuInfo(i, name, 81559, "9.0", "550.54", f"GPU-{i:04d}") for i in range(n)]


def test_n_gpus_and_k_per_run_give_n_over_k_slots_of_consecutive_gpus():
    gpus = fake_gpus(8)
    slots = placement.make_slots(gpus, placement.visible_devices(gpus), 2)
    assert [s.devices for s in slots] == [("0", "1"), ("2", "3"), ("4", "5"), ("6", "7")]
    assert [g.index for g in slots[1].gpus] == [2, 3]
    odd = placement.make_slots(gpus, placement.visible_devices(gpus), 3)
    assert [s.devices for s in odd] == [("0", "1", "2"), ("3", "4", "5")]  # GPUs 6 and 7 stay idle
    assert [s.devices for s in placement.make_slots([], [], 1)] == [()]  # CPU: one run at a time
    with pytest.raises(TRMError, match="--gpus-per-run 4 but only 2 GPU"):
        placement.make_slots(gpus[:2], ["0", "1"], 4)


def test_the_callers_cuda_visible_devices_restricts_the_slots(tmp_path, monkeypatch):
    """Slots get the GPUs the caller's CUDA_VISIBLE_DEVICES leaves, by the host's (nvidia-smi's) numbering
    in the children's CUDA_VISIBLE_DEVICES, each with its own tier."""
    from tests.helpers import install_fake_smi

    install_fake_smi(monkeypatch, tmp_path, "h100x8")
    gpus = placement.detect_gpus({"CUDA_VISIBLE_DEVICES": "4,5,6"})
    assert [s.devices for s in placement.make_slots(gpus, placement.visible_devices(gpus), 1)] == [
        ("4",),
        ("5",),
        ("6",),
    ]
    install_fake_smi(monkeypatch, tmp_path, "mixed-h100-a100")  # GPU 0: H100, GPU 1: A100
    gpus = placement.detect_gpus({"CUDA_VISIBLE_DEVICES": "1"})
    (slot,) = placement.make_slots(gpus, placement.visible_devices(gpus), 1)
    assert slot.devices == ("1",) and [g.name for g in slot.gpus] == ["NVIDIA A100-SXM4-80GB"]


def test_one_gpu_runs_the_trainer_and_several_run_the_launchers_torchrun(tmp_path):
    one, two = placement.Slot(0, ("3",)), placement.Slot(1, ("4", "5"))
    assert placement.command("py", one, ["lr=1"], tmp_path) == ["py", "-m", "trm.train", "lr=1"]
    cmd = placement.command("py", two, ["lr=1"], tmp_path / "codes")
    assert cmd[:4] == ["py", "-m", "torch.distributed.run", "--standalone"]
    assert "--nproc-per-node=2" in cmd and f"--exit-dir={tmp_path / 'codes'}" in cmd
    assert cmd[cmd.index("--") + 1 :] == ["py", "-m", "trm.train", "lr=1"]
    assert placement.environment(two, {})["CUDA_VISIBLE_DEVICES"] == "4,5"
    assert "CUDA_VISIBLE_DEVICES" not in placement.environment(placement.Slot(0), {})


def test_torchrun_rank_records_give_the_trainers_exit_code(tmp_path):
    two = placement.Slot(0, ("0", "1"))

    def codes(*values: int) -> Path:
        folder = tmp_path / "-".join(map(str, values))
        folder.mkdir()
        for rank, code in enumerate(values):
            (folder / f"rank_{rank}.json").write_text(json.dumps({"rank": rank, "exit_code": code}))
        return folder

    assert placement.exit_code(two, 1, codes(75, -15)) == exit_codes.SAVED_RETRY
    assert placement.exit_code(two, 1, codes(2, -15)) == exit_codes.CONFIG_ERROR
    assert placement.exit_code(two, 1, codes(1, 0)) == 1
    assert placement.exit_code(placement.Slot(0, ("0",)), 75, tmp_path) == exit_codes.SAVED_RETRY


def test_a_batch_on_four_fake_gpus_places_runs_side_by_side_with_the_tiers_layout(tmp_path, monkeypatch):
    from tests.helpers import install_fake_smi

    install_fake_smi(monkeypatch, tmp_path, "h100x4")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    exps = Catalog.load().select(pattern="exp03")
    batch = Batch(exps, Options(data_dir=tmp_path / "d", checkpoint_dir=tmp_path / "c", gpus_per_run=2))
    assert [s.label for s in batch.slots] == ["GPU 0,1", "GPU 2,3"]
    cmd, env = batch.launch_line(batch.runs[0], batch.slots[1], 768)
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3" and env["WANDB_RUN_GROUP"] == batch.id
    assert "--nproc-per-node=2" in cmd
    trainer = cmd[cmd.index("--") + 1 :]
    # The launcher's H100 tier: 768 over 2 GPUs, compiled, on CUDA; the recipe's math is unchanged.
    assert {"global_batch_size=768", "device=cuda", "compile=true"} <= set(trainer)
    assert any(o.startswith("micro_batch_size=") for o in trainer)
    assert f"checkpoint_path={tmp_path / 'c' / 'exp03a-sudoku-mlp-L_cycles-2'}" in trainer
