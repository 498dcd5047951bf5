"""Run the launch's subprocesses: tee their output to the run directory, forward stop requests, classify
torchrun outcomes by the exit codes each rank recorded, and stop the trainer at the cost guard's deadline."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from trm import exit_codes
from trm.launch.supervision.ledger import RunLedger
from trm.safe_remove import remove_own_temp

LEDGER_EVERY_S = 60.0  # a killed launcher loses at most this much of the run's counted time


def utc_stamp(t: float | None = None) -> str:
    """ISO-8601 UTC time stamp."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if t is None else t))


class Console:
    """Launcher messages: to stdout and appended to launch.log."""

    def __init__(self, log_path: Path | None = None, stream: IO[str] | None = None) -> None:
        self.log_path = log_path
        self.stream = stream or sys.stdout
        self._lock = threading.Lock()

    def log(self, message: str) -> None:
        """Print and append one (possibly multi-line) message."""
        text = "".join(
            f"[trm launch {time.strftime('%H:%M:%S', time.gmtime())}] {line}\n"
            for line in message.splitlines()
        )
        with self._lock:
            self.stream.write(text)
            self.stream.flush()
            if self.log_path is not None:
                self.log_path.parent.mkdir(parents=True, exist_ok=True)
                with open(self.log_path, "a", encoding="utf-8") as f:
                    f.write(text)


class EventLog:
    """Append-only JSON lines (launch/events.jsonl): sessions, attempts, stops; the handoff reads them."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, event: str, **fields: object) -> None:
        """Append one event (fsync'd: the handoff relies on it after a crash)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        record = {"event": event, "time": time.time(), "utc": utc_stamp(), **fields}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())


def read_events(path: Path) -> list[dict[str, object]]:
    """Events of a run; a torn last line (crash while appending) is skipped."""
    if not path.exists():
        return []
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return events


def _write_out(stream: IO[str], chunk: bytes) -> None:
    buffer = getattr(stream, "buffer", None)
    if buffer is not None:
        buffer.write(chunk)
        buffer.flush()
    else:
        stream.write(chunk.decode("utf-8", errors="replace"))
        stream.flush()


@dataclass
class AttemptResult:
    """How one torchrun (or other) run ended."""

    returncode: int
    rank_codes: dict[int, int] = field(default_factory=dict)

    @property
    def outcome(self) -> str:
        """ok, saved, out_of_memory, hung or failed.

        saved: some rank exited 75 and no rank failed otherwise (torchrun itself exits 0 then: the rank
        wrappers run with --saved-exits-zero). The trainer exits 75 only after the
        collective save completed, and once one rank has exited torchrun SIGTERMs the others; a rank
        that was already shutting down then dies of that SIGTERM (-15 / 143), which is not a failure.
        hung: some rank's watchdog exited 77 and no rank exited with a code that forbids a retry (2, 74,
        78). Other failures are the hang's consequences: the watchdog fires only after minutes without
        progress, so anything that failed first would have ended the attempt before it; and a rank whose
        peer exited mid-collective fails there (gloo: connection closed, NCCL: abort), or is SIGKILLed by
        torchrun when it ignores the SIGTERM.
        out_of_memory: some rank exited 80 (trm.oom: CUDA out of memory) and no rank exited 2, 74 or 78; the
        other ranks' failures, a watchdog's 77 included, are its consequences (their peer left a collective).
        """
        codes = set(self.rank_codes.values())
        benign = {0, exit_codes.SAVED_RETRY, -signal.SIGTERM, 128 + signal.SIGTERM}
        if exit_codes.SAVED_RETRY in codes and codes <= benign:
            return "saved"  # also with torchrun's 0: each rank wrapper exits 0 for a trainer's 75
        if self.returncode == 0:
            return "ok"
        final = {exit_codes.CONFIG_ERROR, exit_codes.DISK_FULL, exit_codes.NONFINITE}
        if exit_codes.OUT_OF_MEMORY in codes and not codes & final:
            return "out_of_memory"
        if exit_codes.HUNG in codes and not codes & final:
            return "hung"
        return "failed"

    @property
    def failure_code(self) -> int:
        """The launcher's exit code for a failed attempt. torchrun exits 1 whatever its child's code, so a
        rank's own code that tells an orchestrator what to do wins: 2 (fix the configuration), 74 (free
        disk space), 78 (change the math); each of 2 and 78 is a terminal end the run's ledger keeps. Else
        torchrun's code (1 when it died of a signal)."""
        code = self.returncode if self.returncode > 0 else 1
        for own in (exit_codes.DISK_FULL, exit_codes.CONFIG_ERROR, exit_codes.NONFINITE):
            if own in self.rank_codes.values():
                code = own
        return code


def child_pids(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux /proc; empty where it cannot be read)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # exited while scanning
            continue
        # "pid (comm) state ppid …": comm may hold spaces and parentheses, so split after its last ')'
        fields = text[text.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[1] == str(pid):
            children.append(int(stat.parent.name))
    return sorted(children)


def read_rank_codes(exit_dir: Path) -> dict[int, int]:
    """Exit codes recorded by `trm.launch.supervision.worker`, by rank."""
    codes: dict[int, int] = {}
    if not exit_dir.is_dir():
        return codes
    for path in sorted(exit_dir.glob("rank_*.json")):
        try:
            data = json.loads(path.read_text())
            codes[int(data["rank"])] = int(data["exit_code"])
        except (OSError, ValueError, KeyError):
            continue
    return codes


class Supervisor:
    """Owns the running child; stop requests (signals, cost guard) become SIGTERM to it.

    A torchrun child (a run with an `exit_dir`) is stopped through its ranks: each rank wrapper gets the
    SIGTERM, not torchrun. torchrun would turn a SIGTERM of its own into a SignalException traceback on the
    console and, before torch 2.12, SIGKILL the ranks 30 s later whatever SHUTDOWN_TIMEOUT says; its ranks
    save for as long as they need and exit 75, and torchrun ends quietly. Only when the ranks have not
    finished `shutdown_timeout` seconds after the request does torchrun itself get the SIGTERM (then its own
    shutdown applies)."""

    def __init__(self, console: Console, events: EventLog, *, shutdown_timeout: float | None = None) -> None:
        self.console = console
        self.events = events
        self.shutdown_timeout = shutdown_timeout
        self.stop_reason: str | None = None
        self.budget_stop = False  # the first stop request came from the cost guard (MAX_HOURS)
        self._child: subprocess.Popen[bytes] | None = None
        self._child_is_torchrun = False
        self._escalation: threading.Timer | None = None
        self._lock = threading.Lock()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT/SIGHUP become a stop request."""

        def handler(signum: int, _frame: object) -> None:
            self.request_stop(f"received {signal.Signals(signum).name}")

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, handler)

    def request_stop(self, reason: str, *, budget: bool = False) -> None:
        """Ask the running child to save and stop (idempotent; later requests re-send SIGTERM).

        budget=True marks the cost guard's request: the launcher then exits BUDGET_STOPPED, not 75.
        """
        with self._lock:
            first = self.stop_reason is None
            if first:
                self.stop_reason = reason
                self.budget_stop = budget
            child = self._child
            torchrun = self._child_is_torchrun
        if first:
            self.console.log(f"stop requested ({reason}): asking the trainer to save and exit")
            self.events.write("stop_requested", reason=reason)
        if child is not None and child.poll() is None:
            self._stop(child, torchrun)

    def _stop(self, child: subprocess.Popen[bytes], torchrun: bool) -> None:
        """SIGTERM to torchrun's ranks (then, after shutdown_timeout, to torchrun), or to the child itself."""
        ranks = child_pids(child.pid) if torchrun else []
        if not ranks:  # not torchrun, or no rank started yet: nothing can be lost by stopping it directly
            child.send_signal(signal.SIGTERM)
            return
        for pid in ranks:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        if self.shutdown_timeout is not None:
            with self._lock:
                if self._escalation is None:
                    self._escalation = threading.Timer(self.shutdown_timeout, self._escalate, args=(child,))
                    self._escalation.daemon = True
                    self._escalation.start()

    def _escalate(self, child: subprocess.Popen[bytes]) -> None:
        """The ranks did not finish within shutdown_timeout: stop torchrun itself."""
        if child.poll() is None:
            self.console.log(
                f"the ranks have not finished {self.shutdown_timeout:g} s after the stop request "
                "(SHUTDOWN_TIMEOUT): stopping torchrun"
            )
            child.send_signal(signal.SIGTERM)

    def run(
        self,
        cmd: list[str],
        *,
        env: dict[str, str],
        logs: list[Path],
        exit_dir: Path | None = None,
        label: str,
        stream: IO[str] | None = None,
        on_start: Callable[[subprocess.Popen[bytes]], None] | None = None,
        pass_fds: tuple[int, ...] = (),
    ) -> AttemptResult:
        """Run `cmd` in its own session, tee its output into `logs`, return how it ended; `pass_fds` are
        descriptors the child keeps open (the run directory's lock)."""
        stream = stream or self.console.stream
        if exit_dir is not None:
            for old in exit_dir.glob("rank_*.json"):
                remove_own_temp(old)  # this node's rank records of an earlier attempt
        for log in logs:
            log.parent.mkdir(parents=True, exist_ok=True)
        handles = [open(log, "ab") for log in logs]  # noqa: SIM115 (closed below)
        started = time.time()
        banner = f"===== {label} started {utc_stamp(started)}: {' '.join(cmd)}\n".encode()
        try:
            for h in handles:
                h.write(banner)
                h.flush()
            self.events.write("process_start", label=label)
            with self._lock:
                proc = subprocess.Popen(
                    cmd,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    pass_fds=pass_fds,
                )
                self._child = proc
                self._child_is_torchrun = exit_dir is not None
                pending_stop = self.stop_reason is not None
            if pending_stop:
                proc.send_signal(signal.SIGTERM)
            if on_start is not None:
                on_start(proc)
            assert proc.stdout is not None
            while chunk := proc.stdout.read1(65536):
                _write_out(stream, chunk)
                for h in handles:
                    h.write(chunk)
                    h.flush()
            code = proc.wait()
        finally:
            with self._lock:
                self._child = None
                self._child_is_torchrun = False
                if self._escalation is not None:
                    self._escalation.cancel()
                    self._escalation = None
            for h in handles:
                h.close()
        result = AttemptResult(code, read_rank_codes(exit_dir) if exit_dir is not None else {})
        self.events.write(
            "process_end",
            label=label,
            returncode=code,
            rank_codes=result.rank_codes,
            outcome=result.outcome,
            seconds=round(time.time() - started, 3),
        )
        return result


class CostGuard(threading.Thread):
    """Logs the running cost and asks the supervisor to stop at `deadline` (epoch seconds)."""

    def __init__(
        self,
        supervisor: Supervisor,
        *,
        session_start: float,
        deadline: float | None,
        num_gpus: int,
        hourly_usd: float | None,
        log_every_s: float,
        clock: Callable[[], float] = time.time,
        ledger: RunLedger | None = None,
        run_gpus: int = 0,
    ) -> None:
        super().__init__(name="cost-guard", daemon=True)
        self.supervisor = supervisor
        self.session_start = session_start
        self.deadline = deadline
        self.num_gpus = num_gpus
        self.hourly_usd = hourly_usd
        self.log_every_s = max(log_every_s, 1.0)
        self.clock = clock
        self._stopped = threading.Event()
        # The run's ledger (node 0 only): this session's time is added to what earlier sessions spent.
        self.ledger = ledger
        self.run_gpus = max(run_gpus, 1)
        self.counted_from = clock()
        self._ledger_base = (ledger.hours, ledger.gpu_hours, ledger.usd) if ledger is not None else (0.0,) * 3
        self._ledger_lock = threading.Lock()

    def account(self, now: float | None = None) -> None:
        """Write the run's spent hours so far (this session added to the earlier ones) into its ledger."""
        if self.ledger is None:
            return
        hours = ((now or self.clock()) - self.counted_from) / 3600
        base_hours, base_gpu_hours, base_usd = self._ledger_base
        with self._ledger_lock:
            self.ledger.hours = base_hours + hours
            self.ledger.gpu_hours = base_gpu_hours + hours * self.run_gpus
            self.ledger.usd = base_usd + hours * self.run_gpus * (self.hourly_usd or 0.0)
            self.ledger.save()

    def cost_usd(self, now: float | None = None) -> float | None:
        """Cost since the session started (None without a price)."""
        if self.hourly_usd is None:
            return None
        hours = ((now or self.clock()) - self.session_start) / 3600
        return hours * max(self.num_gpus, 1) * self.hourly_usd

    def cost_line(self, now: float | None = None) -> str:
        """One log line: elapsed time, cost, time left before the guard stops the trainer."""
        now = now or self.clock()
        hours = (now - self.session_start) / 3600
        cost = self.cost_usd(now)
        text = f"elapsed {hours:.2f} h"
        if cost is not None:
            text += f", cost so far ${cost:.2f} ({max(self.num_gpus, 1)} GPU x ${self.hourly_usd:g}/h)"
        if self.ledger is not None:
            text += f", {self.ledger.hours:.2f} h in the run"
        if self.deadline is not None:
            left = max(self.deadline - now, 0)
            when = f"{left / 3600:.2f} h" if left >= 3600 else f"{left / 60:.1f} min"
            text += f", cost guard stops the trainer in {when}"
        return text

    def run(self) -> None:
        next_log = self.clock() + self.log_every_s
        next_account = self.clock() + LEDGER_EVERY_S
        while not self._stopped.is_set():
            now = self.clock()
            if now >= next_account:
                self.account(now)
                next_account = now + LEDGER_EVERY_S
            if self.deadline is not None and now >= self.deadline:
                self.account(now)
                self.supervisor.request_stop(
                    f"cost guard: MAX_HOURS reached ({self.cost_line(now)})", budget=True
                )
                return
            if now >= next_log:
                cost = self.cost_usd(now)
                if cost is not None:
                    self.supervisor.console.log(self.cost_line(now))
                self.supervisor.events.write("heartbeat", usd=round(cost, 4) if cost is not None else None)
                next_log = now + self.log_every_s
            wake = min(next_log, next_account, self.deadline if self.deadline is not None else next_log)
            self._stopped.wait(max(0.05, min(wake - now, 5.0)))

    def stop(self) -> None:
        """End the guard thread, then write the session's last spent time into the ledger (after the thread
        is gone, so that the launcher's own ledger writes never race it)."""
        self._stopped.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=30)
        self.account()
