"""Copy a run directory to object storage with rclone, and bring it back on a new machine (SYNC_TO).

Upload (`sync_up`), incremental (rclone copies only what changed; `copy` never deletes on the remote):
  pass 1  every file of the run directory except the checkpoints' COMPLETE markers; never a `.partial`
          or `.old` directory (the trainer's in-progress saves), never a `step_N/` without COMPLETE,
          never an atomic-write temp file
  pass 2  the COMPLETE markers of the checkpoints copied in pass 1
so a checkpoint on the remote has its COMPLETE marker only once every one of its files got there: an
upload cut off half way leaves a remote `step_N/` without COMPLETE, which the next upload finishes and a
restore ignores. The handoff bundle goes to REMOTE/handoff/.

Remote retention (`prune=True`, SYNC_PRUNE=on, the launcher's default): after the upload, a `step_N/` on
the remote is deleted (`rclone purge`) when it is complete there, no longer present in the run directory
(the trainer pruned it: CHECKPOINT_KEEP) and older than the newest checkpoint complete on the remote. The
newest complete remote checkpoint is never deleted, and neither is a folder still being uploaded (it is
present locally) or a remote folder without COMPLETE. So the remote holds what the machine holds, once the
machine's checkpoints got there, instead of every checkpoint of the run.

Restore (`sync_down`): everything but the checkpoints, plus the newest checkpoint that is complete on the
remote, into the run directory; the same launch command then resumes from it. A file the run directory
already holds is replaced only by a newer one (`--update`): a restart on a machine that kept its disk keeps
its own records, newer than the remote's (the launcher's ledger of hours spent among them), and a machine
whose copy is older than what another machine uploaded since gets the newer one. A non-empty folder that
is no run directory (neither run.json, launch/ nor a step_N/ in it: a path named by mistake) is refused
before anything is copied, and so is a run directory whose lock (trm.runlock) a running launcher or trainer
holds. The lock file itself is never uploaded nor restored: it belongs to the machine that holds it. A
checkpoint complete there already is not copied again; one without its COMPLETE marker (a restore cut off
half way) is finished.

`Syncer` runs the upload every SYNC_EVERY_MINUTES in a background thread (training never waits for it),
retrying with backoff, and once more at the end (`final`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from trm.errors import TRMError
from trm.runlock import LOCK_FILE, owned
from trm.secrets import redact

STEP_RE = re.compile(r"^step_(\d+)$")
HANDOFF_SUBDIR = "handoff"
# Paths never uploaded: in-progress and superseded checkpoint folders, atomic-write temp files, the
# launcher's scratch runs (smoke gate, probe: full-size checkpoints nobody resumes from) and its pid file.
EXCLUDES = (
    "/.step_*.partial/**", "/.step_*.old/**", "/.*.partial/**", "/.*.old-*/**", ".*.tmp",
    "/launch/smoke/**", "/launch/probe/**", "/launch/onstart.pid", f"/{LOCK_FILE}",
)  # fmt: skip
# rclone's own retries stay low: Syncer retries the whole pass with backoff.
RCLONE_FLAGS = ("--retries", "2", "--low-level-retries", "5", "--stats", "0")
RCLONE_SECRET_OPTION = re.compile(r"KEY|SECRET|PASS|TOKEN|SAS_URL|CREDENTIAL|AUTH", re.I)
SECRET_HINTS = ("key", "secret", "password", "token", "pass=", "sas_url")

Log = Callable[[str], None]


RCLONE_DIR_NOT_FOUND = 3  # rclone's exit status for "directory not found"
# rclone's exit statuses for errors it says no retry resolves: 6 "can't/shouldn't be retried", 7 "fatal" (an
# account suspended, a quota, a bad configuration).
RCLONE_NO_RETRY = (6, 7)


class SyncError(Exception):
    """An rclone call failed (after its own retries). `permanent`: retrying the same call cannot succeed (rclone
    missing, rclone's no-retry or fatal exit), so Syncer gives up at once instead of waiting out its backoff."""

    def __init__(self, message: str, returncode: int | None = None, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.returncode = returncode
        self.permanent = permanent or returncode in RCLONE_NO_RETRY


def _connection_params(remote: str) -> str:
    """The `param=value,...` part of an rclone connection string (`:backend,params:path`) or of a named
    remote with parameters (`name,params:path`); "" when there is none."""
    head = remote.split(":", 2)[1] if remote.startswith(":") else remote.split(":", 1)[0]
    return head.split(",", 1)[1] if "," in head else ""


def check_remote(remote: str, name: str = "SYNC_TO") -> str:
    """A `remote:path` rclone understands, without credentials in it (they would land in the resume
    command and handoff.json): no secret-named parameter (`:s3,secret_access_key=...:`,
    `name,secret_access_key=...:`), no URL with a user and password or a token, no vendor token."""
    remote = remote.strip()
    if not remote:
        return ""
    params = _connection_params(remote).lower()
    if any(h in params for h in SECRET_HINTS) or redact(remote) != remote:
        raise TRMError(
            f"{name} holds credentials (value not shown); they would be written to the resume command, "
            "plan.json and handoff.json: configure the remote with RCLONE_CONFIG_<NAME>_* environment "
            "variables or `rclone config` and set " + name + "=<name>:bucket/path"
        )
    if ":" not in remote and not remote.startswith("/"):
        raise TRMError(
            f"{name}={remote!r} is not an rclone remote: use remote:bucket/path (a remote from `rclone config` "
            "or RCLONE_CONFIG_<NAME>_* variables) or an absolute path"
        )
    return remote


def rclone_secrets(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The values of the RCLONE_CONFIG_<REMOTE>_<OPTION> variables whose option is a credential (a key,
    secret, password, token or SAS URL): taken out of rclone's messages before they reach launch.log."""
    return [
        v for k, v in environ.items() if k.startswith("RCLONE_CONFIG_") and RCLONE_SECRET_OPTION.search(k)
    ]


def rclone_binary() -> str:
    binary = shutil.which("rclone")
    if binary is None:
        raise SyncError(
            "rclone is not installed: `apt-get install -y rclone` (Debian/Ubuntu) or see https://rclone.org/install/",
            permanent=True,
        )
    return binary


def _join(remote: str, sub: str) -> str:
    return remote.rstrip("/") + "/" + sub


def _run(args: list[str], log: Log, *, timeout: float | None = None) -> str:
    cmd = [rclone_binary(), *args, *RCLONE_FLAGS]
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise SyncError(f"rclone {args[0]} timed out after {timeout:g} s") from None
    if result.returncode != 0:
        tail = redact(" | ".join(result.stderr.strip().splitlines()[-3:]), rclone_secrets())
        raise SyncError(f"rclone {args[0]} failed (exit {result.returncode}): {tail}", result.returncode)
    return result.stdout


def complete_steps(run_dir: Path) -> list[str]:
    """Names of the `step_N/` folders that have their COMPLETE marker, oldest first."""
    found = []
    for p in run_dir.iterdir() if run_dir.is_dir() else []:
        m = STEP_RE.match(p.name)
        if m and p.is_dir() and (p / "COMPLETE").is_file():
            found.append((int(m.group(1)), p.name))
    return [name for _, name in sorted(found)]


def _upload_filters(run_dir: Path) -> tuple[list[str], list[str]]:
    """rclone filter flags for pass 1 (everything but COMPLETE markers) and pass 2 (only those markers)."""
    done = complete_steps(run_dir)
    torn = sorted(
        p.name for p in run_dir.iterdir() if p.is_dir() and STEP_RE.match(p.name) and p.name not in done
    )
    first: list[str] = []
    for pattern in (*EXCLUDES, *(f"/{name}/**" for name in torn), "/step_*/COMPLETE"):
        first += ["--exclude", pattern]
    second: list[str] = []
    for name in done:
        second += ["--include", f"/{name}/COMPLETE"]
    return first, second


def sync_up(
    run_dir: Path, remote: str, log: Log, *, handoff_dir: Path | None = None, prune: bool = False
) -> list[str]:
    """Copy `run_dir` (and the handoff bundle into REMOTE/handoff/) to `remote`, then, with `prune`, delete
    the remote checkpoints the run directory no longer has (`prune_remote`); returns those. Raises
    SyncError."""
    if not run_dir.is_dir():
        raise SyncError(f"{run_dir} is not a directory", permanent=True)
    first, second = _upload_filters(run_dir)
    _run(["copy", str(run_dir), remote, *first], log)
    if second:
        _run(["copy", str(run_dir), remote, *second], log)
    if handoff_dir is not None and handoff_dir.is_dir():
        _run(["copy", str(handoff_dir), _join(remote, HANDOFF_SUBDIR), "--exclude", ".*.tmp"], log)
    return prune_remote(run_dir, remote, log) if prune else []


def prunable(remote_steps: list[str], local_steps: set[str]) -> list[str]:
    """Of the checkpoints complete on the remote (oldest first), those to delete there: gone from the run
    directory and older than the newest complete one (which always stays)."""
    return [name for name in remote_steps[:-1] if name not in local_steps]


def prune_remote(run_dir: Path, remote: str, log: Log) -> list[str]:
    """Delete from `remote` the checkpoints `prunable` names; returns them (oldest first)."""
    local = {p.name for p in run_dir.iterdir() if STEP_RE.match(p.name) and p.is_dir()}
    doomed = prunable(remote_complete_steps(remote, log), local)
    for name in doomed:
        _run(["purge", _join(remote, name)], log)
        log(f"pruned {name} from {remote} (no longer in {run_dir}; a newer complete checkpoint is there)")
    return doomed


def remote_complete_steps(remote: str, log: Log) -> list[str]:
    """Checkpoints whose COMPLETE marker reached the remote, oldest first."""
    out = _run(["lsf", "-R", "--files-only", "--include", "/step_*/COMPLETE", remote], log)
    steps = []
    for line in out.splitlines():
        name = line.strip().split("/", 1)[0]
        m = STEP_RE.match(name)
        if m and line.strip() == f"{name}/COMPLETE":
            steps.append((int(m.group(1)), name))
    return [name for _, name in sorted(steps)]


def is_run_directory(folder: Path) -> bool:
    """Whether `folder` holds a run's own files: the trainer's run.json, the launcher's launch/ or a checkpoint."""
    return (folder / "run.json").is_file() or (folder / "launch").is_dir() or any(folder.glob("step_*"))


def sync_down(remote: str, run_dir: Path, log: Log, *, missing_ok: bool = False) -> str | None:
    """Bring a run back from `remote` into `run_dir`: its records and its newest complete checkpoint.

    Returns the checkpoint restored (None when the remote has none). Checkpoint files go in before their
    COMPLETE marker, so an interrupted restore leaves no folder the trainer would resume from. With
    `missing_ok`, a remote that does not exist yet (the first session of a run) restores nothing."""
    try:
        steps = remote_complete_steps(remote, log)
    except SyncError as err:
        if missing_ok and err.returncode == RCLONE_DIR_NOT_FOUND:
            log(f"{remote} does not exist yet: nothing to restore (a new run)")
            return None
        raise
    newest = steps[-1] if steps else None
    held = run_dir.is_dir() and any(run_dir.iterdir())
    if held and not is_run_directory(run_dir):
        raise TRMError(
            f"{run_dir} holds files but is no run directory (no run.json, launch/ or step_N/ in it): refusing to "
            "restore into it; nothing was copied. Name the run's own directory or an empty/new folder"
        )
    advice = (
        "Restore only a run nothing is running: stop it first (SIGTERM saves and exits), or restore into "
        "another folder"
    )
    # A launcher or trainer running this run holds its lock: refused before anything is copied.
    with owned(run_dir, "restore", advice):
        return _restore(remote, run_dir, newest, held, log)


def _restore(remote: str, run_dir: Path, newest: str | None, held: bool, log: Log) -> str | None:
    # The lock file is the local machine's (a remote copy is an old holder's record, never restored).
    others = ["--exclude", f"/{HANDOFF_SUBDIR}/**", "--exclude", "/step_*/**", "--exclude", "/.*/**"]
    others += ["--exclude", f"/{LOCK_FILE}"]
    _run(["copy", remote, str(run_dir), *others, "--update"], log)
    if held:
        log(f"{run_dir} already held the run: a file there was replaced only by a newer copy from {remote}")
    if newest is not None and (run_dir / newest / "COMPLETE").is_file():
        log(f"{newest} is complete in {run_dir} already: not copied again")
    elif newest is not None:
        target = _join(remote, newest)
        _run(["copy", target, str(run_dir / newest), "--exclude", "/COMPLETE"], log)
        _run(["copy", target, str(run_dir / newest), "--include", "/COMPLETE"], log)
        log(f"restored {newest} from {remote}")
    else:
        log(f"{remote} holds no complete checkpoint; restored the run's records only")
    return newest


@dataclass
class Syncer:
    """Upload the run every `every_s` seconds in a background thread, and once more at the end."""

    run_dir: Path
    remote: str
    log: Log
    every_s: float = 600.0
    handoff_dir: Path | None = None
    prune: bool = False
    retries: int = 4
    backoff_s: float = 15.0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None

    def sync_with_retries(self, retries: int | None = None, *, periodic: bool = False) -> bool:
        """One upload, retried with doubling waits; True when it succeeded. Never raises. A permanent error
        (SyncError.permanent) is not retried. A periodic upload gives up its waits as soon as stop() is called
        (the final upload follows)."""
        attempts = (self.retries if retries is None else retries) + 1
        wait = self.backoff_s
        for attempt in range(1, attempts + 1):
            try:
                with self._lock:
                    sync_up(
                        self.run_dir, self.remote, self.log, handoff_dir=self.handoff_dir, prune=self.prune
                    )
            except (SyncError, OSError) as err:
                self.last_error = str(err)
                if isinstance(err, SyncError) and err.permanent:
                    self.log(f"sync to {self.remote} failed ({err}); giving up: no retry can fix this")
                    return False
                left = attempts - attempt
                self.log(
                    f"sync to {self.remote} failed ({err}); "
                    + (f"retry in {wait:g} s" if left else "giving up")
                )
                if left:
                    if periodic:
                        if self._stop.wait(wait):
                            return False
                    else:
                        time.sleep(wait)
                wait *= 2
                continue
            self.last_error = None
            return True
        return False

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            if self.sync_with_retries(retries=1, periodic=True):
                self.log(f"synced {self.run_dir} to {self.remote}")

    def start(self) -> None:
        """Begin the periodic uploads (the first one after `every_s`)."""
        rclone_binary()
        self._thread = threading.Thread(target=self._loop, name="trm-sync", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the periodic uploads (an upload under way finishes first)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def final(self) -> bool:
        """The last upload, after the final checkpoint and the handoff bundle; True when it succeeded."""
        self.stop()
        ok = self.sync_with_retries()
        self.log(
            f"final sync to {self.remote}: {'done' if ok else 'FAILED (' + str(self.last_error) + ')'}; "
            f"restore on a new machine: python -m trm sync --from {self.remote} {self.run_dir}"
        )
        return ok
