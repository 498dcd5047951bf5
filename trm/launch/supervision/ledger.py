"""The run's ledger (RUN_DIR/launch/ledger.json): the hours its cost guard counted over every launcher
session, container restart and resume, and how the run last ended when the end was terminal.

A restart policy (Docker's `--restart on-failure`, a Kubernetes Job recreated, a Vast.ai on-start hook)
starts the launcher again with the same environment. Two things keep that from billing in a loop:

- MAX_HOURS bounds the run, not the session: a launch whose run has already spent MAX_HOURS (less
  STOP_MARGIN_MINUTES) does not start; raising MAX_HOURS continues it.
- A trainer that ended with NONFINITE (78), CONFIG_ERROR (2) or OUT_OF_MEMORY (80: even at micro-batch 1,
  after the launcher's step-downs) would replay the same failure: the same configuration does not start
  again. A changed one (other overrides, lr, data path: another train
  command) starts; so does `CONTINUE_RUN=<end id>` (the id the refusal prints), once: a later terminal end
  gets a new id, so the setting left in a container's environment never reopens a loop.
- A launcher that failed itself after admission (a defect, exit 1) is kept the same way, with its reason:
  the restart exits 0 and says why instead of failing again forever; `CONTINUE_RUN` starts it once more.

A refused launch exits OK (0), the one code every restart policy takes as the end: Docker's
`on-failure` restarts on any other code, a Kubernetes Job completes instead of retrying, SkyPilot ends
the managed job. Only node 0 writes the ledger; the file is replaced atomically.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trm import exit_codes
from trm.errors import TRMError
from trm.io import atomic_write_json

LEDGER_FILE = "ledger.json"
CONTINUE_VAR = "CONTINUE_RUN"

TERMINAL_ENDS = {
    exit_codes.BUDGET_STOPPED: "the MAX_HOURS budget of the run is spent",
    exit_codes.NONFINITE: "the loss or the gradients were not finite (NaN/Inf); the same data diverges again",
    exit_codes.CONFIG_ERROR: "the trainer stopped on a configuration error",
    exit_codes.OUT_OF_MEMORY: "the trainer ran out of GPU memory even at micro-batch 1",
}


def config_fingerprint(train_command: list[str]) -> str:
    """What makes two launches 'the same configuration': the exact train command (overrides, paths, size)."""
    return hashlib.sha256(json.dumps(train_command).encode()).hexdigest()[:16]


def _stamp(at: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(at))


@dataclass
class RunLedger:
    """What the run has spent and how it last ended; `load` / `save` keep it in the run directory."""

    path: Path
    hours: float = 0.0
    """Wall-clock hours the cost guard counted, every session together (what MAX_HOURS bounds)."""
    gpu_hours: float = 0.0
    usd: float = 0.0
    """The cost at each session's GPU_HOURLY_USD (0 where no price was set)."""
    sessions: int = 0
    end: dict[str, Any] | None = None
    """The terminal end that blocks a restart: id, exit_code, reason, at, config."""
    refused_at: float | None = None
    """When the latest launch was refused (cleared when one trains)."""
    history: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def load(cls, launch_dir: Path) -> RunLedger:
        """The ledger of the run whose launcher records are in `launch_dir` (empty when there is none)."""
        path = launch_dir / LEDGER_FILE
        if not path.exists():
            return cls(path)
        try:
            data = json.loads(path.read_text())
            return cls(
                path,
                hours=float(data["hours"]),
                gpu_hours=float(data["gpu_hours"]),
                usd=float(data.get("usd", 0.0)),
                sessions=int(data["sessions"]),
                end=data.get("end"),
                refused_at=data.get("refused_at"),
                history=list(data.get("history", [])),
            )
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise TRMError(
                f"{path} is unreadable ({err}): it holds the hours this run has spent. Restore it from a copy "
                "of the run, or delete it to count the budget from zero"
            ) from None

    def save(self) -> None:
        """Replace the file atomically (temp + fsync + rename)."""
        data = asdict(self)
        del data["path"]
        for key in ("hours", "gpu_hours", "usd"):
            data[key] = round(data[key], 6)
        atomic_write_json(self.path, data)

    def budget_left_hours(self, max_hours: float | None, margin_minutes: float) -> float | None:
        """Hours the cost guard may still count this session before it stops the trainer (None: no limit)."""
        if max_hours is None:
            return None
        return max_hours - margin_minutes / 60 - self.hours

    def record_end(
        self, exit_code: int, config: str, *, at: float | None = None, reason: str | None = None
    ) -> None:
        """Keep a terminal end (79, 78, 2; or any code with its `reason`: a launcher failure after admission)
        so that a restart with the same configuration does not train."""
        at = time.time() if at is None else at
        end = {
            "id": f"end{len(self.history) + 1}-exit{exit_code}",
            "exit_code": exit_code,
            "reason": reason or TERMINAL_ENDS[exit_code],
            "at": _stamp(at),
            "config": config,
        }
        self.end = end
        self.history.append({k: end[k] for k in ("id", "exit_code", "at")})


@dataclass(frozen=True)
class Admission:
    """Whether a launch may train: `refusal` is the message when not, `notes` what was cleared and why."""

    refusal: str | None
    notes: tuple[str, ...] = ()


def admit(
    ledger: RunLedger, *, max_hours: float | None, margin_minutes: float, config: str, continue_id: str
) -> Admission:
    """Decide whether this launch of the run may train; clears an end that no longer applies (the caller
    saves the ledger)."""
    notes: list[str] = []
    left = ledger.budget_left_hours(max_hours, margin_minutes)
    if left is not None and left <= 0:
        return Admission(
            f"the run has spent {ledger.hours:.4g} h of MAX_HOURS={max_hours:g} (stop margin "
            f"{margin_minutes:g} min; {ledger.gpu_hours:.1f} GPU-hours over {ledger.sessions} sessions, kept "
            f"in {ledger.path}): not training. To continue, raise MAX_HOURS above "
            f"{ledger.hours + margin_minutes / 60:.4g}"
        )
    end = ledger.end
    if end is None:
        return Admission(None)
    if end["exit_code"] == exit_codes.BUDGET_STOPPED:
        notes.append(f"continuing after {end['id']}: MAX_HOURS leaves {_hours(left)} to train")
    elif end["config"] != config:
        notes.append(f"continuing after {end['id']} ({end['reason']}): the train command has changed since")
    elif continue_id == end["id"]:
        notes.append(f"continuing after {end['id']} ({end['reason']}): {CONTINUE_VAR}={end['id']}")
    else:
        return Admission(
            f"the run ended with exit {end['exit_code']} at {end['at']}: {end['reason']}. The same "
            "configuration would fail the same way, so it does not train again (restart policies stop on "
            "this exit 0). Fix the cause (troubleshooting lists it by exit code), then change the "
            f"configuration, or keep it and set {CONTINUE_VAR}={end['id']} to start it once more"
        )
    ledger.end = None
    return Admission(None, tuple(notes))


def _hours(left: float | None) -> str:
    return "no limit" if left is None else f"{left:.2f} h"


def last_launch_refused(launch_dir: Path) -> bool:
    """Whether the latest launch of the run was refused (it trained nothing and released nothing)."""
    try:
        return RunLedger.load(launch_dir).refused_at is not None
    except TRMError:
        return False
