"""The rows of a training log point: `train/*` (the step's metrics over all ranks) and `perf/*` (the
steps since the last log point: throughput, MFU, peak memory; rank 0's clock, no extra device sync)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch

from trm import distributed as dist_utils
from trm.distributed import DistInfo
from trm.training.builder import Components
from trm.training.curriculum import Stage, train_flops_per_example
from trm.training.throughput import StepTimer, peak_flops, throughput_metrics

log = logging.getLogger(__name__)


def reduce_totals(totals: dict[str, torch.Tensor], info: DistInfo) -> dict[str, float] | None:
    """The step's metric sums over every rank (one all-reduce on every rank); None off rank 0."""
    names = sorted(totals)
    flat = torch.stack([totals[n].double() for n in names])
    dist_utils.all_reduce_sum_([flat], info)
    if not info.is_main:
        return None
    return dict(zip(names, flat.tolist(), strict=True))  # waits for the GPU: the timing window ends here


def train_metrics(values: dict[str, float], lr: float, global_batch_size: int) -> dict[str, float]:
    """`train/*`: losses per example of the global batch, the other metrics per counted example."""
    count = values.get("count", 0.0)
    out: dict[str, float] = {"train/count": count, "train/lr": lr}
    for name, value in values.items():
        if name.endswith("loss"):
            out[f"train/{name}"] = value / global_batch_size
        elif name != "count" and count > 0:
            out[f"train/{name}"] = value / count
    return out


def perf_metrics(
    timer: StepTimer,
    comps: Components,
    global_batch_size: int,
    info: DistInfo,
    step: int,
    schedule: Sequence[Stage],
) -> dict[str, float]:
    """`perf/*` of the steps since the last log point (the window ending at `step`); the training FLOPs
    are those of each step's depth (`schedule`, trm.training.curriculum), so MFU counts a depth
    curriculum's cheaper steps as cheaper."""
    device = info.device
    peak = peak_flops(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
    window = timer.window()
    try:
        first = max(1, step - window.steps + 1)
        flops: float | None = train_flops_per_example(comps.model.config, schedule, first, step)
    except ValueError as why:
        flops = None
        log.debug("no MFU: %s", why)
    out = throughput_metrics(
        window,
        examples_per_step=global_batch_size,
        tokens_per_example=comps.train_loader.metadata.seq_len,
        train_flops_per_example=flops,
        peak_flops_total=peak * info.world_size if peak else None,
    )
    if device.type == "cuda":
        out["perf/peak_memory_gib"] = torch.cuda.max_memory_allocated(device) / 1024**3
    return out
