"""The launcher's answer to a trainer that ran out of GPU memory (exit OUT_OF_MEMORY, trm.oom): train on with
half the micro-batch and twice the gradient accumulation, so micro-batch x accumulation x world size (the
global batch, and with it the training math) stays the same; the trainer resumes from the newest complete
checkpoint. Below micro-batch 1 there is nothing left to try.

Each step-down is recorded in launch/oom_step_down.json (`STEP_DOWN_FILE`): a later session of the run on
the same hardware and plan (a restart policy, the resume command) starts at the micro-batch that fit instead
of running out of memory again; plan.json and the handoff carry the record. A launch planned for other
hardware, another world size or another micro-batch ignores the record and says so.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trm.batching import halved_micro_batch
from trm.io import atomic_write_json
from trm.launch.host.hardware import BatchLayout

STEP_DOWN_FILE = "oom_step_down.json"


@dataclass
class StepDownRecord:
    """The run's out-of-memory step-downs on one hardware plan: what was planned, what trains now, and each
    step (from, to, the accumulation, the checkpoint step the trainer resumes from, where, when)."""

    tier: str
    gpu_name: str
    world_size: int
    global_batch_size: int
    planned_micro_batch_size: int
    micro_batch_size: int
    steps: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def load(cls, launch_dir: Path) -> StepDownRecord | None:
        """The record in `launch_dir` (None when there is none, or it is not one: then it is not applied)."""
        try:
            return cls(**json.loads((launch_dir / STEP_DOWN_FILE).read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            return None

    def save(self, launch_dir: Path) -> Path:
        path = launch_dir / STEP_DOWN_FILE
        atomic_write_json(path, asdict(self))
        return path

    def _for_hardware(self, layout: BatchLayout) -> bool:
        planned = (layout.tier, layout.gpu_name, layout.world_size, layout.global_batch_size)
        return planned == (self.tier, self.gpu_name, self.world_size, self.global_batch_size)

    def continues(self, layout: BatchLayout) -> bool:
        """Whether `layout` is what this record trains now (so a further step-down extends it)."""
        return self._for_hardware(layout) and layout.micro_batch_size == self.micro_batch_size

    def mismatch(self, layout: BatchLayout) -> str | None:
        """Why this record is not for a launch planned as `layout` (None: it is)."""
        if not self._for_hardware(layout):
            return (
                f"it was recorded for tier {self.tier} ({self.gpu_name}, world size {self.world_size}, global "
                f"batch {self.global_batch_size}); this launch plans tier {layout.tier} ({layout.gpu_name}, world "
                f"size {layout.world_size}, global batch {layout.global_batch_size})"
            )
        if layout.micro_batch_size != self.planned_micro_batch_size:
            return (
                f"it steps down from micro-batch {self.planned_micro_batch_size}; this launch plans "
                f"{layout.micro_batch_size} (MICRO_BATCH_SIZE or the hardware table changed)"
            )
        if layout.local_batch_size % self.micro_batch_size:
            return (
                f"its micro-batch {self.micro_batch_size} does not divide the per-rank batch "
                f"{layout.local_batch_size}"
            )
        return None

    def summary(self) -> str:
        """`micro-batch 4 -> 2 -> 1 (x2 -> x4 -> x8 accumulation, global batch 16 kept)`."""
        micros = [self.planned_micro_batch_size, *(s["to"] for s in self.steps)]
        local = self.global_batch_size // self.world_size
        return (
            f"micro-batch {' -> '.join(map(str, micros))} (x{' -> x'.join(str(local // m) for m in micros)} "
            f"accumulation, global batch {self.global_batch_size} kept)"
        )


def step_down(
    layout: BatchLayout,
    record: StepDownRecord | None,
    *,
    where: str,
    resumes_from: int | None,
    now: float | None = None,
) -> tuple[BatchLayout, StepDownRecord] | None:
    """The layout after an out-of-memory at `layout`'s micro-batch, and the record with that step added
    (`record`: the run's so far, None when there is none; `where`: the attempt that ran out, e.g. "train
    attempt 2"; `resumes_from`: the newest complete checkpoint's step). None at micro-batch 1."""
    micro = layout.micro_batch_size
    smaller = halved_micro_batch(layout.local_batch_size, micro)
    if smaller is None:
        return None
    accumulation = layout.local_batch_size // smaller
    stepped = layout.with_micro_batch(
        smaller,
        f"out of memory at micro-batch {micro}: stepped down to {smaller} x {accumulation} accumulation "
        f"(global batch {layout.global_batch_size} kept)",
    )
    if record is None or not record.continues(layout):
        record = StepDownRecord(
            tier=layout.tier,
            gpu_name=layout.gpu_name,
            world_size=layout.world_size,
            global_batch_size=layout.global_batch_size,
            planned_micro_batch_size=micro,
            micro_batch_size=micro,
        )
    record.steps.append(
        {
            "from": micro,
            "to": smaller,
            "grad_accumulation": accumulation,
            "resumes_from_step": resumes_from,
            "where": where,
            "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        }
    )
    record.micro_batch_size = smaller
    return stepped, record


def apply_record(layout: BatchLayout, record: StepDownRecord) -> BatchLayout:
    """`layout` at the record's micro-batch (the caller checked `record.mismatch(layout)` first)."""
    return layout.with_micro_batch(
        record.micro_batch_size, f"an earlier attempt ran out of memory: {record.summary()}"
    )


def complete_steps(run_dir: Path) -> list[int]:
    """The steps of the `step_N/` folders of `run_dir` that have their COMPLETE marker, ascending."""
    return sorted(
        int(d.name[5:])
        for d in run_dir.glob("step_*")
        if d.name[5:].isdigit() and d.is_dir() and (d / "COMPLETE").exists()
    )


def has_complete_checkpoint(run_dir: Path) -> bool:
    """Whether `run_dir` holds a `step_N/` with its COMPLETE marker."""
    return bool(complete_steps(run_dir))
