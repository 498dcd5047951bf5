"""Stop and save requests from signals: SIGTERM/SIGINT ask for save-and-exit, SIGUSR1 for a save only.

The handlers only set flags; the training loop checks them between optimizer steps (so the current step
always finishes) and, during an evaluation, between test batches (the evaluation is then dropped and run
again on resume). Under torchrun every rank gets the signal, but maybe at different steps, so the loop
agrees on the flags with one all-reduce per step or test batch (`distributed.any_rank`).
"""

from __future__ import annotations

import signal
import types
from collections.abc import Iterator
from contextlib import contextmanager


class StopRequests:
    """Flags set by signal handlers: `stop` (save, then exit SAVED_RETRY) and `save` (save, keep going)."""

    def __init__(self) -> None:
        self.stop = False
        self.save = False
        self.signal_name: str | None = None
        self._count = 0

    def _on_stop(self, signum: int, _frame: types.FrameType | None) -> None:
        self._count += 1
        self.stop = True
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
def handle_signals() -> Iterator[StopRequests]:
    """Install the handlers for the duration of the block (main thread only) and restore the old ones."""
    requests = StopRequests()
    wanted = {signal.SIGTERM: requests._on_stop, signal.SIGINT: requests._on_stop}
    if hasattr(signal, "SIGUSR1"):
        wanted[signal.SIGUSR1] = requests._on_save
    previous = {sig: signal.signal(sig, handler) for sig, handler in wanted.items()}
    try:
        yield requests
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
