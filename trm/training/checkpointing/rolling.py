"""When a rolling checkpoint is due: every `checkpoint.every_steps` optimizer steps and/or
`checkpoint.every_minutes` of wall time since the last checkpoint (of any kind).

Under torchrun only rank 0 asks (its clock decides); the loop shares the answer through the per-step
all-reduce it already makes for the stop flags, so every rank saves at the same step.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class RollingSchedule:
    """Decides after each optimizer step whether a rolling checkpoint is due."""

    def __init__(
        self,
        every_minutes: float | None,
        every_steps: int | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.every_seconds = 60.0 * every_minutes if every_minutes else None
        self.every_steps = every_steps or None
        self.clock = clock
        self._last = clock()

    def due(self, step: int) -> bool:
        """True when `step` ends a steps interval or the time interval has passed since the last save."""
        if self.every_steps is not None and step % self.every_steps == 0:
            return True
        return self.every_seconds is not None and self.clock() - self._last >= self.every_seconds

    def saved(self) -> None:
        """A checkpoint was just taken: the time interval starts again."""
        self._last = self.clock()
