"""Where the runs of a batch go and how each starts: GPU slots side by side, or one CPU run at a time.

On a host with N visible GPUs and K GPUs per run there are N // K slots; slot i gets visible GPUs
[i·K, (i+1)·K) through `CUDA_VISIBLE_DEVICES` (the GPUs the caller's own `CUDA_VISIBLE_DEVICES` leaves, when
it restricts them, by nvidia-smi index, or MIG UUID for a slice). K = 1 runs `python -m trm.train`; K > 1 runs the launcher's torchrun command
(`trm.launch.plan.plan.torchrun_command`: each rank under `trm.launch.supervision.worker`, which records its exit code).
Each run gets the hardware tier's batch layout for its K GPUs (`trm.launch.host.hardware.select_layout`, the
launcher's own choice), so the training math is the recipe's on every host. Without GPUs: one slot, CPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from trm import exit_codes
from trm.errors import TRMError
from trm.launch.host.hardware import select_layout
from trm.launch.host.nvidia_smi import GpuInfo, NvidiaSmiMissing, query_gpus
from trm.launch.plan.plan import TRAINER_ENV_DEFAULTS, torchrun_command
from trm.launch.supervision.supervisor import AttemptResult, read_rank_codes

SHUTDOWN_TIMEOUT_S = 300  # what the launcher gives torchrun's workers to save after SIGTERM (its default)


@dataclass(frozen=True)
class Slot:
    """GPUs one run gets (none: CPU)."""

    index: int
    devices: tuple[str, ...] = ()
    gpus: tuple[GpuInfo, ...] = ()

    @property
    def label(self) -> str:
        return f"GPU {','.join(self.devices)}" if self.devices else "CPU"


def visible_devices(gpus: Sequence[GpuInfo]) -> list[str]:
    """The `CUDA_VISIBLE_DEVICES` id of each GPU runs may use (`gpus` from `query_gpus`: those the caller's
    own CUDA_VISIBLE_DEVICES leaves, in its order): nvidia-smi's index of a whole GPU, a slice's MIG UUID."""
    return [g.uuid if g.mig_profile else str(g.index if g.smi_index is None else g.smi_index) for g in gpus]


def detect_gpus(environ: Mapping[str, str]) -> list[GpuInfo]:
    """The GPUs `environ`'s CUDA_VISIBLE_DEVICES leaves of nvidia-smi's; none on a host without nvidia-smi."""
    try:
        return query_gpus(environ=environ)
    except NvidiaSmiMissing:
        return []


def make_slots(gpus: Sequence[GpuInfo], devices: Sequence[str], gpus_per_run: int) -> list[Slot]:
    """N // K slots of K GPUs each (`devices[i]` is the id of `gpus[i]`); one CPU slot without devices."""
    if gpus_per_run < 1:
        raise TRMError(f"--gpus-per-run {gpus_per_run}: give 1 or more")
    if not devices:
        return [Slot(0)]
    if gpus_per_run > len(devices):
        raise TRMError(
            f"--gpus-per-run {gpus_per_run} but only {len(devices)} GPU(s) are visible "
            f"({','.join(devices)}); use --gpus-per-run {len(devices)} or fewer"
        )
    k = gpus_per_run
    return [
        Slot(i, tuple(devices[i * k : (i + 1) * k]), tuple(gpus[i * k : (i + 1) * k]))
        for i in range(len(devices) // k)
    ]


def hardware_overrides(slot: Slot, global_batch_size: int) -> list[str]:
    """The launcher's batch layout for this slot's GPUs (CPU without): micro-batch, compile, device."""
    layout = select_layout(
        list(slot.gpus),
        num_gpus=len(slot.gpus),
        global_batch_size=global_batch_size,
        expected_global_batch_size=global_batch_size,
    )
    return layout.overrides()


def command(python: str, slot: Slot, overrides: list[str], exit_dir: Path) -> list[str]:
    """The trainer (one GPU or CPU) or torchrun over the slot's GPUs."""
    if len(slot.devices) > 1:
        return torchrun_command(
            python,
            overrides,
            exit_dir=exit_dir,
            nproc_per_node=len(slot.devices),
            shutdown_timeout=SHUTDOWN_TIMEOUT_S,
        )
    return [python, "-m", "trm.train", *overrides]


def environment(slot: Slot, environ: Mapping[str, str]) -> dict[str, str]:
    """The run's environment additions: the launcher's trainer defaults and the slot's GPUs."""
    env = {k: v for k, v in TRAINER_ENV_DEFAULTS.items() if k not in environ}
    if slot.devices:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(slot.devices)
    return env


def exit_code(slot: Slot, returncode: int, exit_dir: Path) -> int:
    """The trainer's exit code: torchrun reports 1 for any failed rank, the ranks' records say which."""
    if len(slot.devices) <= 1:
        return returncode
    result = AttemptResult(returncode, read_rank_codes(exit_dir))
    if result.outcome == "ok":
        return exit_codes.OK
    if result.outcome == "saved":
        return exit_codes.SAVED_RETRY
    for code in (exit_codes.CONFIG_ERROR, exit_codes.DISK_FULL):
        if code in result.rank_codes.values():
            return code
    return returncode if returncode > 0 else 1
