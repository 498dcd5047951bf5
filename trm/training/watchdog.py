"""Hang watchdog: a daemon thread per rank ends a run that stopped making progress.

The training thread pets the watchdog after every optimizer step and every evaluation batch. When no pet
comes within the allowance of the current phase (`watchdog.first_step_minutes` until the process's first
step: torch.compile and the loader's warm-up; `watchdog.eval_minutes` between two evaluation batches;
`watchdog.timeout_minutes` otherwise), the thread writes every Python thread's stack into
`<run_dir>/hang_rank<r>.txt` and, when a process group exists, torch's flight recorder of its recent
collectives (NCCL on GPUs, gloo on CPUs) into `<run_dir>/hang_flight_recorder/trace_rank<r>`, then ends
the process with exit code HUNG (77). Every rank runs its own watchdog: a rank stuck in its loader and the ranks waiting for it in a
collective all stop petting, so all of them dump and exit. The launcher restarts the trainer, which
resumes from the newest complete checkpoint.
"""

from __future__ import annotations

import faulthandler
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trm import exit_codes
from trm.io import atomic_write_bytes

FIRST_STEP, STEP, EVALUATION = "the first step", "an optimizer step", "an evaluation batch"
# Collectives torch's flight recorder keeps when the user did not size it (the size PyTorch's debugging
# docs use; an entry is a few hundred bytes). Off (0) by default in torch.
FLIGHT_RECORDER_ENTRIES = "2000"
FLIGHT_RECORDER_SIZES = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")  # new name, old name


@dataclass(frozen=True)
class Allowances:
    """Seconds without a pet before the watchdog fires, per phase."""

    step_s: float
    first_step_s: float
    eval_s: float

    def of(self, phase: str) -> float:
        """The allowance of `phase` (FIRST_STEP, STEP or EVALUATION)."""
        return {FIRST_STEP: self.first_step_s, STEP: self.step_s, EVALUATION: self.eval_s}[phase]

    @classmethod
    def from_config(cls, cfg: Any) -> Allowances | None:
        """From a TrainConfig's watchdog.* keys; None when watchdog.timeout_minutes is 0 (watchdog off)."""
        if not cfg.watchdog.timeout_minutes:
            return None
        step = float(cfg.watchdog.timeout_minutes) * 60
        # A phase allowance shorter than the step allowance would only make the watchdog stricter there.
        return cls(
            step_s=step,
            first_step_s=max(step, float(cfg.watchdog.first_step_minutes) * 60),
            eval_s=max(step, float(cfg.watchdog.eval_minutes) * 60),
        )


def enable_flight_recorder(environ: dict[str, str] | Any = os.environ) -> None:
    """Size torch's flight recorder so a hang dump has the recent collectives in it.

    Must run before the process group is created; a size the user set (either name) wins."""
    if not any(name in environ for name in FLIGHT_RECORDER_SIZES):
        environ[FLIGHT_RECORDER_SIZES[0]] = FLIGHT_RECORDER_ENTRIES


def stack_dump_path(run_dir: Path, rank: int) -> Path:
    """Where rank `rank` writes its thread stacks."""
    return run_dir / f"hang_rank{rank}.txt"


def flight_recorder_path(run_dir: Path, rank: int) -> Path:
    """Where rank `rank` writes the flight recorder (`<prefix><rank>`, as torch's fr_trace reader expects)."""
    return run_dir / "hang_flight_recorder" / f"trace_rank{rank}"


def dump_stacks(path: Path, header: str) -> None:
    """`header`, then every Python thread's stack (faulthandler: safe while other threads hold locks)."""
    with tempfile.TemporaryFile() as buf:
        faulthandler.dump_traceback(file=buf, all_threads=True)
        buf.seek(0)
        stacks = buf.read()
    atomic_write_bytes(path, header.encode() + stacks)


def dump_flight_recorder(path: Path) -> bool:
    """The flight recorder's pickled trace of this rank's collectives; False without a process group.

    It reads the recorder's ring buffer under its own lock, so it works while the training thread
    waits inside a collective."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return False
    import torch._C._distributed_c10d as c10d

    # The NCCL recorder has its own dump in CUDA builds; _dump_fr_trace dumps the gloo (CPU) one.
    name = "_dump_nccl_trace" if dist.get_backend() == "nccl" else "_dump_fr_trace"
    dump = getattr(c10d, name, None)
    if dump is None:
        return False
    atomic_write_bytes(path, dump())
    return True


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.1f} s"


def _say(message: str) -> None:
    """One line to stderr without `logging`: a hung main thread may hold the logging lock."""
    os.write(2, f"trm watchdog: {message}\n".encode())


class Watchdog:
    """Fires when the training thread stops petting it; see the module docstring."""

    def __init__(
        self,
        run_dir: Path,
        rank: int,
        allowances: Allowances | None,
        *,
        clock: Callable[[], float] = time.monotonic,
        exit_process: Callable[[int], Any] = os._exit,
    ) -> None:
        self.run_dir = run_dir
        self.rank = rank
        self.allowances = allowances
        self.clock = clock
        self.exit_process = exit_process
        # (time of the last pet, phase, last step): replaced as one tuple, so the thread never reads a mix.
        self._state: tuple[float, str, int | None] = (clock(), FIRST_STEP, None)
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        smallest = min(vars(allowances).values()) if allowances is not None else 0.0
        self.poll_s = min(max(smallest / 20, 0.05), 10.0)

    def start(self) -> None:
        """Start watching (nothing when the watchdog is off): the first-step allowance runs from now."""
        if self.allowances is None:
            return
        self._state = (self.clock(), FIRST_STEP, None)
        self._thread = threading.Thread(target=self._watch, name=f"trm-watchdog-rank{self.rank}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (the run ended normally)."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def pet(self, step: int | None = None) -> None:
        """Progress: an optimizer step (pass its number) or an evaluation batch finished."""
        _, phase, last = self._state
        if phase == FIRST_STEP and step is not None:
            phase = STEP
        self._state = (self.clock(), phase, step if step is not None else last)

    @contextmanager
    def evaluation(self) -> Iterator[None]:
        """An evaluation: its batches get the evaluation allowance; after it, the step allowance."""
        _, before, last = self._state
        self._state = (self.clock(), EVALUATION, last)
        try:
            yield
        finally:
            self._state = (self.clock(), STEP if before == EVALUATION else before, last)

    def check(self) -> bool:
        """Fire if the current phase's allowance is spent; True when it fired."""
        if self.allowances is None:
            return False
        since, phase, last = self._state
        waited = self.clock() - since
        allowance = self.allowances.of(phase)
        if waited <= allowance:
            return False
        self.fire(phase, waited, allowance, last)
        return True

    def fire(self, phase: str, waited: float, allowance: float, last: int | None) -> None:
        """Dump the stacks (and the flight recorder), then end the process with HUNG."""
        where = "before the first step" if last is None else f"after step {last}"
        header = (
            f"trm watchdog: rank {self.rank} (pid {os.getpid()}) made no progress for {_duration(waited)} "
            f"{where}, waiting for {phase} (allowance {allowance / 60:g} min); "
            f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}. Thread stacks, most recent call first; "
            "'Current thread' is the watchdog itself; the training thread is the one that runs train/_run, "
            "and its top frames show where it waits:\n\n"
        )
        path = stack_dump_path(self.run_dir, self.rank)
        written = [str(path)]
        try:
            dump_stacks(path, header)
        except OSError as err:  # a full or gone disk must not keep a hung run alive
            written = [f"(stacks not written: {err})"]
        try:
            if dump_flight_recorder(flight_recorder_path(self.run_dir, self.rank)):
                written.append(str(flight_recorder_path(self.run_dir, self.rank)))
        except Exception as err:  # a failed optional dump must not stop the exit
            written.append(f"(flight recorder not written: {err})")
        _say(
            f"rank {self.rank}: no progress for {_duration(waited)} {where} (waiting for {phase}, allowance "
            f"{allowance / 60:g} min); dumps: {', '.join(written)}; exiting {exit_codes.HUNG} (the launcher "
            "restarts from the newest complete checkpoint)"
        )
        # os._exit, not an exception or sys.exit: the training thread is blocked (in the loader, in a C++
        # collective that ignores Python signals, or holding locks), so nothing raised in this thread can
        # reach it, and a normal exit would wait on it (atexit handlers, non-daemon threads, the process
        # group's destructor waiting on the hung collective). The dumps above are fsynced; unsaved training
        # since the newest checkpoint is lost either way, and the restart resumes from that checkpoint.
        self.exit_process(exit_codes.HUNG)

    def _watch(self) -> None:
        while not self._stopped.wait(self.poll_s):
            if self.check():
                return


def for_run(cfg: Any, run_dir: Path, rank: int) -> Watchdog:
    """The run's watchdog, not started (inert when watchdog.timeout_minutes=0)."""
    return Watchdog(run_dir, rank, Allowances.from_config(cfg))
