"""The flags the ranks agree on after every optimizer step, by name, in one all-reduce.

Each rank fills a `StepFlags` with what it knows (a signal arrived, rank 0's clock says a rolling
checkpoint is due, rank 0's background save failed, the step's loss or gradients are not finite);
`any_rank` ORs every field over the ranks in a single collective, so every rank reads the same answer.
The order of the fields is the order of the reduced tensor: add a flag as a field, never by position.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trm import distributed as dist_utils
from trm.distributed import DistInfo


@dataclass(frozen=True)
class WriterFlags:
    """The outcome of the last background save, read without waiting for it (rank 0 writes)."""

    failed: bool = False
    disk_full: bool = False

    def as_list(self) -> list[bool]:
        return [self.failed, self.disk_full]

    @classmethod
    def from_list(cls, values: list[bool]) -> WriterFlags:
        failed, disk_full = values
        return cls(failed=failed, disk_full=disk_full)

    def any_rank(self, info: DistInfo) -> WriterFlags:
        """These flags OR-ed over the ranks (one all-reduce; none in one process)."""
        return WriterFlags.from_list(dist_utils.any_rank(self.as_list(), info))


@dataclass(frozen=True)
class StepFlags:
    """One rank's view after a step; `any_rank` gives every rank's view OR-ed together."""

    stop: bool = False
    """SIGTERM/SIGINT or the deadline: save and return SAVED_RETRY."""
    save: bool = False
    """SIGUSR1: save and go on."""
    rolling: bool = False
    """A rolling checkpoint is due (rank 0's schedule decides)."""
    writer: WriterFlags = WriterFlags()
    """The last background save failed (and whether for a full disk)."""
    nonfinite: tuple[bool, ...] = ()
    """The step's non-finite flags (trm.training.nonfinite: loss, gradients)."""

    def as_list(self) -> list[bool]:
        """The named booleans in field order (the non-finite ones travel as a device tensor)."""
        return [self.stop, self.save, self.rolling, *self.writer.as_list()]

    @classmethod
    def from_list(cls, values: list[bool]) -> StepFlags:
        """Inverse of `as_list`, with any further values as the non-finite flags."""
        n = len(cls().as_list())
        stop, save, rolling = values[:3]
        return cls(
            stop=stop,
            save=save,
            rolling=rolling,
            writer=WriterFlags.from_list(values[3:n]),
            nonfinite=tuple(values[n:]),
        )

    def any_rank(self, info: DistInfo, nonfinite: torch.Tensor | None = None) -> StepFlags:
        """Every field OR-ed over the ranks, with this step's device-side non-finite flags (`nonfinite`,
        0/1 values) in the same all-reduce: one collective per step."""
        return StepFlags.from_list(dist_utils.any_rank(self.as_list(), info, extra=nonfinite))

    @property
    def wants_save(self) -> bool:
        """Some rank asked for a checkpoint now (stop, SIGUSR1 or a due rolling one)."""
        return self.stop or self.save or self.rolling
