"""The launcher's guards for a batch on a GPU host: a MAX_HOURS budget and SYNC_TO copies.

Budget (`BatchBudget`): the hours of the whole batch, every session of the same batch together, kept in
`LOG_DIR/ledger.json` (the launcher's run ledger, `trm.launch.supervision.ledger`, with the batch as its
run). When they reach MAX_HOURS less STOP_MARGIN_MINUTES the batch asks every running trainer to save
and stop, and exits BUDGET_STOPPED (79) as the launcher does; the same batch started again with the same
budget does not train and exits 0 (what every restart policy stops on); raising MAX_HOURS continues it.

Sync (`BatchSync`): with SYNC_TO, each run is copied to SYNC_TO/<run name> (the launcher's layout, so
`python -m trm sync --from` restores it) every SYNC_EVERY_MINUTES while it trains and once more when it
ends, after its handoff bundle (into SYNC_TO/<run name>/handoff/); the batch's own records (logs,
batch_results.json) go to SYNC_TO/batches/<batch id> at the end. A failed upload is retried with backoff,
logged in LOG_DIR/sync.log and recorded in batch_results.json; it never stops the batch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trm.errors import TRMError
from trm.launch.config.variables import BY_NAME
from trm.launch.storage.sync import Syncer, SyncError, rclone_binary
from trm.launch.supervision.ledger import RunLedger

SYNC_LOG = "sync.log"
BATCHES_SUBDIR = "batches"  # SYNC_TO/batches/<batch id>: the batch's logs and batch_results.json


def env_setting(name: str, env: Mapping[str, str]) -> float | str | None:
    """The launcher's variable `name` (MAX_HOURS, STOP_MARGIN_MINUTES, SYNC_TO, SYNC_EVERY_MINUTES) from
    `env`, parsed and checked as the launcher does; its default when unset."""
    return BY_NAME[name].read(env, {})


def parse_setting(name: str, flag: str, raw: str) -> Any:
    """A flag's value checked as the launcher checks its variable `name` (TRMError naming `flag`)."""
    return BY_NAME[name].parse(flag, raw)


@dataclass
class BatchBudget:
    """MAX_HOURS for one batch: what earlier sessions spent (the ledger) plus this session's wall time."""

    ledger: RunLedger
    max_hours: float
    margin_minutes: float
    gpus: int
    started: float = field(default_factory=time.monotonic)
    _hours: float = 0.0
    _gpu_hours: float = 0.0

    @classmethod
    def open(cls, log_dir: Path, max_hours: float, margin_minutes: float, gpus: int) -> BatchBudget:
        if margin_minutes / 60 >= max_hours:
            raise TRMError(
                f"STOP_MARGIN_MINUTES={margin_minutes:g} leaves no training time within --max-hours {max_hours:g}; "
                "lower STOP_MARGIN_MINUTES or raise --max-hours"
            )
        ledger = RunLedger.load(log_dir)
        return cls(ledger, max_hours, margin_minutes, gpus, _hours=ledger.hours, _gpu_hours=ledger.gpu_hours)

    def refusal(self) -> str | None:
        """Why the batch may not start (its budget is spent), None when it may."""
        left = self.ledger.budget_left_hours(self.max_hours, self.margin_minutes)
        if left is None or left > 0:
            return None
        return (
            f"the batch has spent {self.ledger.hours:.4g} h of --max-hours {self.max_hours:g} (stop margin "
            f"{self.margin_minutes:g} min, {self.ledger.sessions} session(s), kept in {self.ledger.path}): not "
            f"training. To continue, raise --max-hours (MAX_HOURS) above "
            f"{self.ledger.hours + self.margin_minutes / 60:.4g}"
        )

    def spent_hours(self) -> float:
        return self._hours + (time.monotonic() - self.started) / 3600

    def due(self) -> bool:
        """Whether this session has reached the budget (less the stop margin)."""
        return self.spent_hours() >= self.max_hours - self.margin_minutes / 60

    def record(self, *, new_session: bool = False) -> None:
        """Write the hours spent so far into the ledger (atomically)."""
        elapsed = (time.monotonic() - self.started) / 3600
        self.ledger.hours = self._hours + elapsed
        self.ledger.gpu_hours = self._gpu_hours + elapsed * self.gpus
        self.ledger.sessions += 1 if new_session else 0
        self.ledger.save()


class BatchSync:
    """SYNC_TO uploads of the batch's runs (periodic while each trains, final at its end) and records."""

    def __init__(self, remote: str, every_minutes: float, log_dir: Path) -> None:
        try:
            rclone_binary()
        except SyncError as err:
            raise TRMError(f"--sync-to {remote}: {err}") from None
        self.remote, self.every_s, self.log_dir = remote.rstrip("/"), every_minutes * 60, log_dir
        self._syncers: dict[str, Syncer] = {}
        self._lock = threading.Lock()

    def log(self, line: str) -> None:
        """Append a line to LOG_DIR/sync.log (the periodic uploads run in threads)."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        with self._lock, open(self.log_dir / SYNC_LOG, "a", encoding="utf-8") as f:
            f.write(f"{stamp} {line}\n")

    def target(self, run_dir: Path) -> str:
        return f"{self.remote}/{run_dir.name}"

    def start(self, run_dir: Path, handoff_dir: Path) -> None:
        """Begin the periodic uploads of a run that starts training."""
        syncer = Syncer(
            run_dir, self.target(run_dir), self.log, every_s=self.every_s, handoff_dir=handoff_dir
        )
        syncer.prune = True  # the launcher's default (SYNC_PRUNE=on): the remote holds what the host holds
        syncer.start()
        self._syncers[str(run_dir)] = syncer

    def finish(self, run_dir: Path, handoff_dir: Path) -> str:
        """The final upload of a run that ended (after its handoff bundle); 'done' or 'failed: why'."""
        syncer = self._syncers.pop(str(run_dir), None) or Syncer(
            run_dir, self.target(run_dir), self.log, handoff_dir=handoff_dir, prune=True
        )
        syncer.handoff_dir = handoff_dir
        ok = syncer.final()
        return "done" if ok else f"failed: {syncer.last_error}"

    def records(self, batch_id: str) -> str:
        """Upload the batch's log dir (logs, batch_results.json, handoff bundles) to SYNC_TO/batches/<id>."""
        syncer = Syncer(self.log_dir, f"{self.remote}/{BATCHES_SUBDIR}/{batch_id}", self.log)
        ok = syncer.sync_with_retries()
        return "done" if ok else f"failed: {syncer.last_error}"
