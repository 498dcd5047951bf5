"""The probe: train a few steps at the chosen micro-batch, record peak GPU memory and step time, and halve
the micro-batch on out-of-memory until it fits. The record (launch/probe.json) goes into the handoff bundle.

GPU-only parts: the memory sampler polls `nvidia-smi` while the probe runs; on CPU peak memory is not
measured and the probe only checks that the configuration trains and times its steps.
"""

from __future__ import annotations

import csv
import itertools
import statistics
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trm import exit_codes
from trm.batching import halved_micro_batch
from trm.io import atomic_write_json
from trm.launch.host.nvidia_smi import GpuInfo, Runner, query_memory_used
from trm.launch.plan.plan import LaunchFailed, Step
from trm.launch.supervision.session import Session
from trm.oom import OOM_TEXT
from trm.safe_remove import remove_own_temp

WARMUP_STEPS = 2  # compile and allocator warm-up are excluded from the step time


class MemorySampler(threading.Thread):
    """Polls per-GPU memory in use and keeps the maximum (GPU only): of `gpus` (the plan's, those that
    CUDA_VISIBLE_DEVICES leaves visible) by their CUDA index, or of every GPU nvidia-smi lists."""

    def __init__(
        self, runner: Runner | None = None, interval_s: float = 0.5, gpus: Sequence[GpuInfo] | None = None
    ) -> None:
        super().__init__(name="probe-memory", daemon=True)
        self.runner = runner
        self.gpus = gpus
        self.interval_s = interval_s
        self.peak_mib: dict[int, int] = {}
        self._halt = threading.Event()

    def run(self) -> None:
        """Sample until stopped."""
        while not self._halt.is_set():
            for index, used in query_memory_used(self.runner, self.gpus).items():
                self.peak_mib[index] = max(used, self.peak_mib.get(index, 0))
            self._halt.wait(self.interval_s)

    def stop(self) -> dict[int, int]:
        """Stop sampling and return the peak MiB per GPU index."""
        self._halt.set()
        self.join(timeout=10)
        return dict(self.peak_mib)


def step_seconds(metrics_csv: Path) -> tuple[float | None, int]:
    """Median seconds per optimizer step from metrics.csv wall times (after warm-up), and steps measured."""
    if not metrics_csv.exists():
        return None, 0
    first_wall: dict[int, float] = {}
    with open(metrics_csv, encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            try:
                step, wall = int(float(row["step"])), float(row["wall_time"])
            except (KeyError, TypeError, ValueError):
                continue
            if step > 0 and step not in first_wall:
                first_wall[step] = wall
    steps = sorted(s for s in first_wall if s > WARMUP_STEPS)
    deltas = [(first_wall[b] - first_wall[a]) / (b - a) for a, b in itertools.pairwise(steps) if b > a]
    return (statistics.median(deltas) if deltas else None), len(deltas)


def drift_notes(record: dict[str, Any], table_micro: int, vram_mib: int | None) -> list[str]:
    """How the measurement compares with the hardware table."""
    notes = []
    if record["micro_batch_size"] != table_micro:
        notes.append(
            f"out of memory at the table's micro-batch {table_micro}: stepped down to {record['micro_batch_size']}"
        )
    peak = max(record["peak_mib"].values(), default=None) if record["peak_mib"] else None
    if peak is not None and vram_mib:
        share = peak / vram_mib
        record["peak_share"] = round(share, 3)
        if share > 0.92:
            notes.append(f"peak memory {share:.0%} of VRAM: close to the limit; a longer run may OOM at eval")
        elif share < 0.45 and record["grad_accumulation"] > 1:
            notes.append(
                f"peak memory only {share:.0%} of VRAM: the table's tier could use a larger micro-batch"
            )
    return notes


def probe(session: Session, step: Step) -> None:
    """The probe step: measure the micro-batch on the real GPUs and train with what fits."""
    micro = run_probe(session)
    if micro != session.plan.hardware.micro_batch_size:
        session.train_with(
            session.plan.hardware.with_micro_batch(micro, f"the probe stepped down to {micro}")
        )
        session.console.log(f"probe: training with micro-batch {micro}")


def run_probe(launch: Session, runner: Runner | None = None) -> int:
    """Probe from the plan's micro-batch downwards; returns the micro-batch that trains."""
    s, hw = launch.plan.settings, launch.plan.hardware
    micro = hw.micro_batch_size
    log = s.launch_dir / "probe.log"
    attempts: list[dict[str, Any]] = []
    vram_mib = min((g.memory_mib for g in launch.plan.gpus), default=None)
    while True:
        probe_dir = launch.plan.probe_dir(micro)
        remove_own_temp(probe_dir)  # the probe's own scratch run of an earlier attempt
        offset = log.stat().st_size if log.exists() else 0
        sampler = MemorySampler(runner, gpus=launch.plan.gpus) if hw.device == "cuda" else None
        if sampler is not None:
            sampler.start()
        launch.console.log(f"probe: {s.probe_steps} steps at micro-batch {micro}")
        result = launch.torchrun(launch.plan.probe_command(micro), log, f"probe micro-batch {micro}")
        peak = sampler.stop() if sampler is not None else {}
        with open(log, encoding="utf-8", errors="replace") as f:
            f.seek(offset)
            text = f.read()
        seconds, measured = step_seconds(probe_dir / "metrics.csv")
        record = {
            "micro_batch_size": micro,
            "grad_accumulation": hw.local_batch_size // micro,
            "returncode": result.returncode,
            "out_of_memory": result.returncode != 0
            and (exit_codes.OUT_OF_MEMORY in result.rank_codes.values() or bool(OOM_TEXT.search(text))),
            "peak_mib": {str(k): v for k, v in sorted(peak.items())},
            "vram_mib": vram_mib,
            "step_seconds": round(seconds, 4) if seconds is not None else None,
            "steps_timed": measured,
        }
        attempts.append(record)
        if launch.supervisor.stop_reason:
            raise LaunchFailed(128 + 15, f"stopped during the probe ({launch.supervisor.stop_reason})")
        if result.returncode == 0:
            break
        smaller = halved_micro_batch(hw.local_batch_size, micro)
        if record["out_of_memory"] and smaller is not None:
            launch.console.log(f"probe: out of memory at micro-batch {micro}; trying {smaller}")
            micro = smaller
            continue
        _write(s.launch_dir / "probe.json", hw.tier, hw.micro_batch_size, attempts, [])
        raise LaunchFailed(
            result.returncode if result.returncode > 0 else 1,
            f"probe failed at micro-batch {micro} (exit {result.returncode}"
            + (", out of memory even at micro-batch 1" if record["out_of_memory"] else "")
            + f"); see {log}",
        )
    notes = drift_notes(attempts[-1], hw.micro_batch_size, vram_mib)
    for note in notes:
        launch.console.log(f"probe: {note}")
    last = attempts[-1]
    launch.console.log(
        f"probe: micro-batch {micro} trains; step {last['step_seconds'] or '?'} s, peak "
        + (
            f"{max(int(v) for v in last['peak_mib'].values())} MiB"
            if last["peak_mib"]
            else "memory not measured (CPU)"
        )
    )
    _write(s.launch_dir / "probe.json", hw.tier, hw.micro_batch_size, attempts, notes)
    return micro


def _write(path: Path, tier: str, table_micro: int, attempts: list[dict[str, Any]], notes: list[str]) -> None:
    atomic_write_json(
        path,
        {
            "tier": tier,
            "table_micro_batch_size": table_micro,
            "chosen_micro_batch_size": attempts[-1]["micro_batch_size"]
            if attempts[-1]["returncode"] == 0
            else None,
            "attempts": attempts,
            "drift": notes,
        },
    )
