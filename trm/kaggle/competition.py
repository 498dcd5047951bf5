"""The hardware and time a Kaggle competition gives a submission notebook: one table, one place.

`python -m trm infer --competition NAME` (default `arc-prize-2025`) plans adaptation and inference for the
competition's GPUs and hours (trm.kaggle.plan); `--gpus N` / `--hours H` override the table's figures, for
a competition whose limits differ (the 2026 limits were to be announced when this was written).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from trm.errors import TRMError


@dataclass(frozen=True)
class Competition:
    """What a competition's notebook runs on."""

    name: str
    gpu: str
    """The GPU model as nvidia-smi names it: its peak FLOP/s (trm.training.throughput) and hardware tier."""
    gpus: int
    hours: float
    """The notebook's run-time limit; submission.json must be written before it."""
    internet: bool = False

    @property
    def minutes(self) -> float:
        return self.hours * 60.0

    def describe(self) -> str:
        """`arc-prize-2025: 4 x NVIDIA L4, 12 h, offline`."""
        net = "internet on" if self.internet else "offline"
        return f"{self.name}: {self.gpus} x {self.gpu}, {self.hours:g} h, {net}"


# ARC Prize 2025's Kaggle rules: four L4 GPUs (24 GB each), 12 hours of run time, internet disabled.
COMPETITIONS: dict[str, Competition] = {
    "arc-prize-2025": Competition("arc-prize-2025", gpu="NVIDIA L4", gpus=4, hours=12.0),
}
DEFAULT = "arc-prize-2025"


def competition(name: str = DEFAULT, *, gpus: int | None = None, hours: float | None = None) -> Competition:
    """The table's competition `name` with `--gpus` / `--hours` overrides; TRMError naming the flag."""
    found = COMPETITIONS.get(name)
    if found is None:
        raise TRMError(f"--competition {name!r}: not in the table; use one of {', '.join(sorted(COMPETITIONS))} "
                       "(with --gpus / --hours for other limits)")  # fmt: skip
    if gpus is not None and gpus < 1:
        raise TRMError(f"--gpus {gpus}: must be at least 1")
    if hours is not None and not hours > 0:
        raise TRMError(f"--hours {hours}: must be positive")
    return dataclasses.replace(
        found, gpus=found.gpus if gpus is None else gpus, hours=found.hours if hours is None else hours
    )
