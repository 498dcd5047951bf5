"""The adaptation's micro-batch: chosen from the tier table for the GPU it runs on (fake GPU facts: an L4, a
T4, an H100), the global batch kept by accumulation, and halved on CUDA out-of-memory (injected on CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.adapt.generated import write_tasks
from tests.fixtures.launch.oom_trainer import CUDA_OOM, failing_at
from tests.helpers import SmokeCheckpoint, make_smoke
from trm.adapt import batch as adapt_batch
from trm.adapt.batch import AdaptBatch, choose_batch, train_within_memory
from trm.adapt.run import AdaptSettings, adapt
from trm.adapt.source import source_from_checkpoint
from trm.launch.host.hardware import Workload, load_table
from trm.launch.host.nvidia_smi import GpuInfo
from trm.oom import OutOfMemory

# nvidia-smi's name and memory.total of each (MiB).
L4 = GpuInfo(0, "NVIDIA L4", 23034, "8.9", "550.54.15", "GPU-l4")
T4 = GpuInfo(0, "Tesla T4", 15360, "7.5", "550.54.15", "GPU-t4")
H100 = GpuInfo(0, "NVIDIA H100 80GB HBM3", 81559, "9.0", "580.95.05", "GPU-h100")
P4 = GpuInfo(0, "Tesla P4", 7680, "6.1", "550.54.15", "GPU-p4")  # below every tier
ARC = Workload()  # trm on ARC: the table's reference rows

# A fixed table (the shipped one gains tiers over time): the rows of the shipped tiers these GPUs match.
TABLE = """
[[tier]]
name = "h100-80g"
match = ["H100"]
min_vram_gib = 75
max_micro_batch = 192
compile = true

[[tier]]
name = "rtx4090-24g"
match = ["RTX 4090", "L4"]
min_vram_gib = 22
max_micro_batch = 32
compile = true

[[tier]]
name = "gpu-16g"
min_vram_gib = 15
max_micro_batch = MICRO_16G
compile = true

[cpu]
name = "cpu"
max_micro_batch = 32
compile = false

[sizing]
reference_arch = "trm"
reference_tokens = 916
"""


def table(tmp_path: Path, micro_16g: int = 16):
    path = tmp_path / "hardware.toml"
    path.write_text(TABLE.replace("MICRO_16G", str(micro_16g)))
    return load_table(path)


def chosen(gpu, tmp_path, *, workload=ARC, configured=192, forced=False, world_size=1) -> AdaptBatch:
    return choose_batch(
        gpu, global_batch_size=768, world_size=world_size, configured=configured, forced=forced,
        workload=workload, table=table(tmp_path),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("gpu", "micro", "accumulation", "tier"),
    [(L4, 32, 24, "rtx4090-24g (matched by name)"), (T4, 16, 48, "gpu-16g (matched by vram)"),
     (H100, 192, 4, "h100-80g (matched by name)")],
)  # fmt: skip
def test_the_micro_batch_comes_from_the_gpu_and_the_global_batch_is_kept(
    tmp_path, gpu, micro, accumulation, tier
):
    batch = chosen(gpu, tmp_path)
    assert (batch.micro_batch_size, batch.grad_accumulation) == (micro, accumulation)
    assert (
        batch.micro_batch_size * batch.grad_accumulation * batch.world_size == batch.global_batch_size == 768
    )
    assert f"is tier {tier}" in batch.chosen_by and "the source run's micro-batch was 192" in batch.chosen_by
    assert batch.describe().startswith(
        f"micro-batch {micro} x {accumulation} accumulation (global batch 768)"
    )


def test_workload_world_size_override_cpu_and_a_gpu_below_every_tier(tmp_path):
    urm = Workload(arch="urm", tokens=916)  # 595 MB a row: an L4's 32 trm rows are 10 urm rows
    assert chosen(L4, tmp_path, workload=urm).micro_batch_size == 8  # the largest divisor of 768 up to 10
    two = chosen(L4, tmp_path, world_size=2)
    assert (two.micro_batch_size, two.grad_accumulation) == (32, 12)
    forced = chosen(L4, tmp_path, configured=64, forced=True)
    assert forced.micro_batch_size == 64 and forced.chosen_by == "the micro_batch_size override"
    cpu = chosen(None, tmp_path)  # no GPU: the config's micro-batch, as before
    assert cpu.micro_batch_size == 192 and cpu.chosen_by.startswith("CPU")
    assert chosen(None, tmp_path, configured=None).micro_batch_size == 768  # no micro-batch: the whole batch
    small = chosen(P4, tmp_path)
    assert (
        small.micro_batch_size == 16 and "the smallest tier: 7.5 GiB is below every tier" in small.chosen_by
    )


def test_the_shipped_table_fits_the_kaggle_gpus(tmp_path):
    """Whatever tiers the shipped table has, the 16-24 GB cards get far less than the training host's 192
    rows and their activations stay within 60 % of the card (200 MB a row), the H100 keeps 192."""
    shipped = load_table()
    for gpu in (L4, T4):
        batch = choose_batch(
            gpu,
            global_batch_size=768,
            world_size=1,
            configured=192,
            forced=False,
            workload=ARC,
            table=shipped,
        )
        assert batch.micro_batch_size < 192 and batch.micro_batch_size * 200 <= 0.6 * gpu.memory_mib, batch
        assert batch.micro_batch_size * batch.grad_accumulation == 768
    h100 = choose_batch(
        H100, global_batch_size=768, world_size=1, configured=192, forced=False, workload=ARC, table=shipped
    )
    assert h100.micro_batch_size == 192


def test_halving_down_to_1_keeps_the_global_batch():
    batch, seen = AdaptBatch(768, 1, 32, "t"), []
    while (smaller := batch.halved(after_step=len(seen))) is not None:
        batch = smaller
        seen.append(batch.micro_batch_size)
        assert batch.micro_batch_size * batch.grad_accumulation == 768
    assert seen == [16, 8, 4, 2, 1]
    assert batch.steps_down[0] == {"from": 32, "to": 16, "after_step": 0}
    assert (
        batch.notes()[1]
        == "out of GPU memory at micro-batch 32 after step 0: stepped down to 16 x 48 accumulation (global batch 768 kept)"
    )
    assert (
        AdaptBatch(12, 1, 12, "t").halved(0).micro_batch_size == 6
    )  # a divisor of the batch, not 12 // 2 alone


def _oom(micro: int) -> OutOfMemory:
    return OutOfMemory("CUDA out of memory after step 3", micro_batch_size=micro, step=3)


def test_train_within_memory_steps_down_until_it_fits(monkeypatch):
    freed = []
    monkeypatch.setattr(adapt_batch, "free_cached_memory", lambda: freed.append(1))
    tried = []

    def attempt(cfg):
        tried.append(cfg.micro_batch_size)
        if cfg.micro_batch_size > 4:
            raise _oom(cfg.micro_batch_size)
        return 0, "trainer"

    from trm.training.config import TrainConfig

    code, trainer, batch = train_within_memory(
        attempt, TrainConfig(global_batch_size=32), AdaptBatch(32, 1, 16, "t")
    )
    assert (code, trainer, tried) == (0, "trainer", [16, 8, 4]) and len(freed) == 2
    assert [(s["from"], s["to"]) for s in batch.steps_down] == [(16, 8), (8, 4)]

    def never(cfg):
        raise _oom(cfg.micro_batch_size)

    with pytest.raises(
        OutOfMemory, match=r"at micro-batch 1 after step 3, and a micro-batch of 1 is the smallest"
    ):
        train_within_memory(never, TrainConfig(global_batch_size=2), AdaptBatch(2, 1, 2, "t"))
    with pytest.raises(
        OutOfMemory, match=r"on 2 processes .*micro_batch_size=8.*--adapt-override micro_batch_size=8"
    ):
        train_within_memory(never, TrainConfig(global_batch_size=32), AdaptBatch(32, 2, 16, "t"))


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> SmokeCheckpoint:
    return make_smoke(tmp_path_factory.mktemp("adapt-batch"))


@pytest.mark.e2e
def test_adaptation_on_a_t4_picks_its_micro_batch_steps_down_on_oom_and_records_it(
    smoke: SmokeCheckpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The smoke checkpoint (global batch 8, no micro-batch) adapted on a fake T4 whose tier holds 4 rows:
    micro-batch 4 x 2; the trainer then runs out of memory at step 2 above micro-batch 2 (injected), the
    adaptation trains on at 2 x 4 from its start and finishes; adapt.json and the notes say so."""
    from trm.training.loop import Trainer

    monkeypatch.setattr(adapt_batch, "gpu_facts", lambda device: T4)
    monkeypatch.setattr("trm.launch.host.hardware.load_table", lambda: table(tmp_path, micro_16g=4))
    create = Trainer.create

    def create_failing(*args, **kwargs):
        trainer = create(*args, **kwargs)
        if trainer.components.plan.micro_batch_size > 2:
            failing_at(trainer, 2, torch.cuda.OutOfMemoryError(CUDA_OOM))
        return trainer

    monkeypatch.setattr(Trainer, "create", create_failing)
    hidden = write_tasks(tmp_path / "hidden", "hidden", 2, seed=5, colours=4)
    result = adapt(source_from_checkpoint(smoke.checkpoint), hidden, tmp_path / "out", AdaptSettings(
        steps=3, num_aug=2, progress=False))  # fmt: skip
    assert result.step == 3
    summary = json.loads((tmp_path / "out" / "adapt.json").read_text())
    batch = summary["batch"]
    assert (batch["micro_batch_size"], batch["grad_accumulation"], batch["global_batch_size"]) == (2, 4, 8)
    assert batch["steps_down"] == [{"from": 4, "to": 2, "after_step": 1}]
    assert "Tesla T4 (15.0 GiB) is tier gpu-16g" in batch["chosen_by"]
    assert summary["notes"][:2] == [
        f"adapted with micro-batch 2 x 4 accumulation (global batch 8): {batch['chosen_by']}",
        "out of GPU memory at micro-batch 4 after step 1: stepped down to 2 x 4 accumulation (global batch 8 kept)",
    ]
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert (run["micro_batch_size"], run["accum_steps"]) == (2, 4)
