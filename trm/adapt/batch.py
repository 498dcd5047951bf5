"""The adaptation's micro-batch: chosen for the GPU it runs on, halved on CUDA out-of-memory.

A checkpoint's config carries the micro-batch of the host it was trained on (192 rows on an H100, 37 GB of
activations), far more than a 16-24 GB Kaggle GPU holds. Adaptation keeps the run's global batch (the
training math) and picks its micro-batch as the launcher does for training: the hardware tier table
(trm/launch/host/hardware.toml) gives the GPU's rows for this model's workload, the micro-batch is the
largest divisor of the per-process batch up to them, and gradient accumulation makes up the rest
(`choose_batch`, a pure function of the GPU's facts). A `micro_batch_size` override is kept as given; on
CPU the config's micro-batch is kept (nothing to size for).

A CUDA out-of-memory error of a one-process adaptation (`train_within_memory`) halves the micro-batch,
doubles the accumulation and trains again, resuming from its newest checkpoint (or its start), down to
micro-batch 1. What was chosen, and each step down, go into adapt.json (`batch`) and the result's notes.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trm.batching import halved_micro_batch, largest_divisor_at_most
from trm.oom import OutOfMemory, free_cached_memory

if TYPE_CHECKING:
    import torch

    from trm.launch.host.hardware import HardwareTable, Tier, Workload
    from trm.launch.host.nvidia_smi import GpuInfo
    from trm.training.config import TrainConfig

log = logging.getLogger(__name__)

MICRO_KEY = "micro_batch_size"


@dataclass
class AdaptBatch:
    """The adaptation's batch layout per process, and why: `chosen_by` says where the micro-batch came from,
    `steps_down` the out-of-memory step-downs since (from, to, after_step)."""

    global_batch_size: int
    world_size: int
    micro_batch_size: int
    chosen_by: str
    steps_down: list[dict[str, int]] = field(default_factory=list)

    @property
    def grad_accumulation(self) -> int:
        return self.global_batch_size // self.world_size // self.micro_batch_size

    def describe(self) -> str:
        """`micro-batch 32 x 24 accumulation (global batch 768): <why>`."""
        return (
            f"micro-batch {self.micro_batch_size} x {self.grad_accumulation} accumulation (global batch "
            f"{self.global_batch_size}): {self.chosen_by}"
        )

    def halved(self, after_step: int) -> AdaptBatch | None:
        """The layout after an out-of-memory at this micro-batch (None at 1), the step recorded."""
        smaller = halved_micro_batch(self.global_batch_size // self.world_size, self.micro_batch_size)
        if smaller is None:
            return None
        step = {"from": self.micro_batch_size, "to": smaller, "after_step": after_step}
        return dataclasses.replace(self, micro_batch_size=smaller, steps_down=[*self.steps_down, step])

    def notes(self) -> list[str]:
        """What the adaptation's report says about its batch: the layout, then each step down."""
        local = self.global_batch_size // self.world_size
        return [f"adapted with {self.describe()}"] + [
            f"out of GPU memory at micro-batch {s['from']} after step {s['after_step']}: stepped down to "
            f"{s['to']} x {local // s['to']} accumulation (global batch {self.global_batch_size} kept)"
            for s in self.steps_down
        ]

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "grad_accumulation": self.grad_accumulation}


def _tier(gpu: GpuInfo, table: HardwareTable) -> tuple[Tier, str]:
    """The GPU's tier (trm.launch.host.hardware.match_tier); a GPU below every tier gets the smallest one
    (adaptation then steps down on out-of-memory instead of refusing to start)."""
    from trm.errors import TRMError
    from trm.launch.host.hardware import match_tier

    try:
        return match_tier(gpu, table)
    except TRMError:
        smallest = min(table.tiers, key=lambda t: t.min_vram_gib)
        return smallest, f"the smallest tier: {gpu.memory_gib:.1f} GiB is below every tier"


def choose_batch(
    gpu: GpuInfo | None,
    *,
    global_batch_size: int,
    world_size: int,
    configured: int | None,
    forced: bool,
    workload: Workload,
    table: HardwareTable,
) -> AdaptBatch:
    """The micro-batch for an adaptation on `gpu` (None: CPU) of `global_batch_size` rows over `world_size`
    processes; `configured` is the config's micro-batch (the source run's, None: the whole per-process
    batch), `forced` whether the user's overrides set it (then it is kept)."""
    local = global_batch_size // world_size
    if forced:
        return AdaptBatch(global_batch_size, world_size, configured or local, "the micro_batch_size override")
    if gpu is None:
        return AdaptBatch(
            global_batch_size, world_size, configured or local, "CPU: the source run's micro-batch"
        )
    tier, matched_by = _tier(gpu, table)
    rows = table.sizing.rows(tier, workload)
    return AdaptBatch(
        global_batch_size,
        world_size,
        largest_divisor_at_most(local, rows),
        f"{gpu.name} ({gpu.memory_gib:.1f} GiB) is tier {tier.name} (matched by {matched_by}): up to {rows} "
        f"rows of {workload.describe()}; the source run's micro-batch was {configured or local}",
    )


def gpu_facts(device: torch.device) -> GpuInfo | None:
    """The GPU `device` is (None for CPU): nvidia-smi's entry for it, the table's own source of names and
    memory; torch's device properties where nvidia-smi cannot be asked."""
    import torch

    from trm.errors import TRMError
    from trm.launch.host.nvidia_smi import GpuInfo, query_gpus

    if device.type != "cuda":
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    try:
        listed = {g.index: g for g in query_gpus()}
    except TRMError:
        listed = {}
    if index in listed:
        return listed[index]
    props = torch.cuda.get_device_properties(index)
    return GpuInfo(
        index=index,
        name=props.name,
        memory_mib=props.total_memory // 2**20,
        compute_cap=f"{props.major}.{props.minor}",
        driver_version="",
        uuid=str(getattr(props, "uuid", "")),
    )


def workload_of_config(cfg: TrainConfig, dataset: Path) -> Workload:
    """What one row of this adaptation costs: the config's architecture over the dataset's sequence."""
    from trm.data.metadata import DatasetMetadata
    from trm.launch.host.hardware import Workload
    from trm.model.registry import model_config, spec_of

    meta = DatasetMetadata.read(dataset / "train" / "dataset.json")
    model = model_config(
        cfg.arch,
        batch_size=1,
        seq_len=meta.seq_len,
        vocab_size=meta.vocab_size,
        num_puzzle_identifiers=1,
        forward_dtype="bfloat16",
    )
    return Workload(arch=spec_of(cfg.arch).name, tokens=model.total_seq_len, task="adaptation")


def batch_for(
    cfg: TrainConfig, dataset: Path, overrides: tuple[str, ...], device: torch.device, world_size: int
) -> AdaptBatch:
    """`choose_batch` for this host: the GPU `device` is, the tier table, the config's workload."""
    from trm.launch.host.hardware import load_table
    from trm.training.config import override_key

    return choose_batch(
        gpu_facts(device),
        global_batch_size=cfg.global_batch_size,
        world_size=world_size,
        configured=cfg.micro_batch_size,
        forced=any(override_key(o) == MICRO_KEY for o in overrides),
        workload=workload_of_config(cfg, dataset),
        table=load_table(),
    )


def train_within_memory(
    attempt: Callable[[TrainConfig], tuple[int, Any]],
    cfg: TrainConfig,
    batch: AdaptBatch,
) -> tuple[int, Any, AdaptBatch]:
    """`attempt(cfg at batch's micro-batch)` -> (exit code, trainer); on a CUDA out-of-memory error
    (`trm.oom.OutOfMemory`, which only CUDA raises) of a one-process run, again at half the micro-batch (it
    resumes from the newest checkpoint), down to 1."""
    while True:
        run_cfg = dataclasses.replace(cfg, micro_batch_size=batch.micro_batch_size)
        try:
            code, trainer = attempt(run_cfg)
            return code, trainer, batch
        except OutOfMemory as err:
            smaller = batch.halved(err.step) if batch.world_size == 1 else None
            if smaller is None:
                raise OutOfMemory(
                    _give_up(batch, err), micro_batch_size=err.micro_batch_size, step=err.step
                ) from None
            log.warning(
                "adaptation ran out of GPU memory at micro-batch %d after step %d: again at %d x %d accumulation "
                "(global batch %d kept)",
                batch.micro_batch_size, err.step, smaller.micro_batch_size, smaller.grad_accumulation,
                batch.global_batch_size,
            )  # fmt: skip
            batch = smaller
        free_cached_memory()  # the failed attempt's tensors, now unreachable


def _give_up(batch: AdaptBatch, err: OutOfMemory) -> str:
    """Why adaptation stops after an out-of-memory, and what to do."""
    where = f"adaptation ran out of GPU memory at micro-batch {batch.micro_batch_size} after step {err.step}"
    if batch.micro_batch_size == 1:
        return f"{where}, and a micro-batch of 1 is the smallest: adapt on a GPU with more memory"
    smaller = halved_micro_batch(batch.global_batch_size // batch.world_size, batch.micro_batch_size)
    return (
        f"{where} on {batch.world_size} processes (only a one-process adaptation steps down by itself): run it "
        f"again with the override micro_batch_size={smaller} (`trm adapt … micro_batch_size={smaller}`, `infer "
        f"--adapt-override micro_batch_size={smaller}`); it resumes from its newest checkpoint"
    )
