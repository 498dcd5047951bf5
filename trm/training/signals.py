"""Stop and save requests from signals: SIGTERM/SIGINT ask for save-and-exit, SIGUSR1 for a save only.

The handlers only set flags; the training loop checks them between optimizer steps (so the current step
always finishes) and, during an evaluation, between test batches (the evaluation is then dropped and run
again on resume). Under torchrun every rank gets the signal, but maybe at different steps, so the loop
agrees on the flags with one all-reduce per step or test batch (`distributed.any_rank`).
"""

from __future__ import annotations

import signal
import time
import types
from collections.abc import Iterator
from contextlib import contextmanager

DEADLINE = "time budget"  # `signal_name` of a stop asked for by the deadline, not by a signal
_clock = time.monotonic  # what deadlines are measured against (tests replace it)


class StopRequests:
    """Flags set by signal handlers: `stop` (save, then exit SAVED_RETRY) and `save` (save, keep going).

    With a `deadline` (a `time.monotonic()` value) `stop` also turns true once it has passed, as if a
    SIGTERM had arrived then; `signal_name` is then DEADLINE.
    """

    def __init__(self, deadline: float | None = None) -> None:
        self._stop = False
        self.save = False
        self.signal_name: str | None = None
        self.deadline = deadline
        self._count = 0

    @property
    def stop(self) -> bool:
        """A stop was asked for: by a signal, or by the deadline having passed."""
        if not self._stop and self.deadline is not None and _clock() >= self.deadline:
            self._stop, self.signal_name = True, DEADLINE
        return self._stop

    def _on_stop(self, signum: int, _frame: types.FrameType | None) -> None:
        self._count += 1
        self._stop = True
        self.signal_name = signal.Signals(signum).name
        if self._count >= 3 and signum == signal.SIGINT:
            # Third Ctrl-C: the user really wants out now, without the checkpoint.
            raise KeyboardInterrupt

    def _on_save(self, _signum: int, _frame: types.FrameType | None) -> None:
        self.save = True

    def take_save(self) -> bool:
        """Return and clear the save-only request."""
        wanted, self.save = self.save, False
        return wanted


@contextmanager
def handle_signals(deadline: float | None = None) -> Iterator[StopRequests]:
    """Install the handlers for the duration of the block (main thread only) and restore the old ones."""
    requests = StopRequests(deadline)
    wanted = {signal.SIGTERM: requests._on_stop, signal.SIGINT: requests._on_stop}
    if hasattr(signal, "SIGUSR1"):
        wanted[signal.SIGUSR1] = requests._on_save
    previous = {sig: signal.signal(sig, handler) for sig, handler in wanted.items()}
    try:
        yield requests
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
