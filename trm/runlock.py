"""One owner per run directory: an exclusive `flock` on RUN_DIR/.trm-run.lock for the owner's lifetime.

The launcher (`python -m trm launch`, node 0) and a trainer started without it (`python -m trm.train`,
global rank 0) take the lock before they touch the run. A second one finds it held and stops with
CONFIG_ERROR (2), naming the holder from the record the holder wrote into the lock file: pid, host, start
time and command. The kernel drops the lock when the last descriptor of its open file is closed, which
includes kill -9, so a crash never leaves a stale lock; the record may outlive its holder and is only read
while somebody holds the lock.

The launcher's trainer must not be refused: the launcher passes its lock descriptor to its torchrun runs
(so a trainer left running after the launcher was killed keeps the run locked) and names itself in
HOLDER_ENV; a trainer that finds the lock held by the pid in HOLDER_ENV runs under it.

The lock file is written in place, never replaced by a rename and never deleted: the lock belongs to the
file's inode, and a new inode would let a second owner lock it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from trm.errors import TRMError

LOCK_FILE = ".trm-run.lock"
HOLDER_ENV = "TRM_RUN_LOCK_HOLDER"
"""Set by the launcher for its children: the pid whose lock covers them."""


@dataclass(frozen=True)
class Holder:
    """What the owner of a run directory recorded in its lock file."""

    pid: int | None
    host: str
    started: str
    command: str

    def describe(self) -> str:
        return f"pid {self.pid} on host {self.host}, started {self.started}, command: {self.command}"


class RunLocked(TRMError):
    """Another process owns the run directory (exit CONFIG_ERROR)."""


# `name=value` words whose name says it holds a credential: their values never reach the lock file (it lives in
# the run directory, which is synced, handed off and published).
_SECRET_ASSIGNMENT = re.compile(r"(?i)(\S*(?:key|token|secret|password)[\w.-]*=)\S+")


def redact(command: str) -> str:
    """`command` with the value of every key=/token=/secret=/password= word replaced by `***`."""
    return _SECRET_ASSIGNMENT.sub(r"\1***", command)


def _record(command: str) -> bytes:
    command = redact(command)
    return (
        json.dumps(
            {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "command": command,
            }
        )
        + "\n"
    ).encode()


def read_holder(path: Path) -> Holder | None:
    """The record in the lock file `path`; None when it is missing or unreadable (a write in progress)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        pid = data.get("pid")
        return Holder(
            int(pid) if pid is not None else None,
            str(data.get("host", "?")),
            str(data.get("started", "?")),
            str(data.get("command", "?")),
        )
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def _gone_hint(holder: Holder) -> str:
    """On the holder's own host a dead pid means a process it started (its trainer) still holds the lock."""
    if holder.pid is None or holder.host != socket.gethostname():
        return ""
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return (
            f" (pid {holder.pid} has exited: a process it started, such as its torchrun, still runs and holds "
            "the lock; stop that process)"
        )
    except PermissionError:
        pass
    return ""


class RunLock:
    """The exclusive lock on `run_dir`; `acquire` raises RunLocked naming the holder, `release` drops it."""

    def __init__(self, run_dir: str | os.PathLike[str], what: str) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self.what = what  # who asks, for the refusal: "launch", "trainer"
        self.fd: int | None = None

    def try_acquire(self, command: str) -> Holder | None:
        """Take the lock and record this process in it; None on success, else the current holder's record
        (Holder with pid None when it could not be read)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return read_holder(self.path) or Holder(None, "?", "?", "? (its record is being written)")
        except OSError as err:
            os.close(fd)
            raise TRMError(
                f"cannot lock {self.path} ({err.strerror or err}): the filesystem of the run directory "
                "offers no file locks; see docs/launch.md (one launcher per run) for the volumes that do"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, _record(command), 0)
        os.fsync(fd)
        self.fd = fd
        return None

    def acquire(
        self,
        command: str,
        *,
        wait_other_host_s: float = 0.0,
        log: Callable[[str], None] | None = None,
        poll_s: float = 1.0,
    ) -> RunLock:
        """Take the lock or raise RunLocked naming the holder and the fix.

        `wait_other_host_s`: when the holder is on another host, keep trying this long first. On a shared
        volume (NFSv4) the lock of a node that died is held by the server until the node's lease expires
        (90 s by default): the pod that replaces it must not fail for that."""
        deadline = time.monotonic() + wait_other_host_s
        told = False
        while True:
            holder = self.try_acquire(command)
            if holder is None:
                return self
            if holder.host in ("?", socket.gethostname()) or time.monotonic() >= deadline:
                raise RunLocked(self.refusal(holder))
            if log is not None and not told:
                log(
                    f"{self.run_dir} is locked by host {holder.host} (pid {holder.pid}); waiting up to "
                    f"{wait_other_host_s:.0f} s in case that host is gone and its lease has still to expire"
                )
                told = True
            time.sleep(poll_s)

    def refusal(self, holder: Holder, advice: str | None = None) -> str:
        """The one-line refusal; `advice` replaces the default way out (wait, stop it, or another run)."""
        advice = advice or (
            "Wait for it to end or stop it (SIGTERM saves and exits), or give this one another RUN_NAME / "
            "checkpoint_path"
        )
        return (
            f"{self.run_dir} is in use by another process ({holder.describe()}){_gone_hint(holder)}: this "
            f"{self.what} does not start, so that two never write one run. {advice}"
        )

    def inheritable_fd(self) -> int:
        """The lock's descriptor, made inheritable for a child that must keep the run locked (pass_fds)."""
        assert self.fd is not None, "the lock is not held"
        os.set_inheritable(self.fd, True)
        return self.fd

    def release(self) -> None:
        """Drop the lock (the file and its record stay: see the module's note)."""
        if self.fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def _is_rank_zero(environ: dict[str, str] | os._Environ[str]) -> bool:
    return environ.get("RANK", "0").strip() in ("", "0")


@contextlib.contextmanager
def trainer_lock(run_dir: str | os.PathLike[str], environ: dict[str, str] | None = None) -> Iterator[None]:
    """The lock a trainer holds while it runs (global rank 0 only): taken unless its launcher (the pid in
    HOLDER_ENV) already holds it for it. Raises RunLocked when anybody else holds it."""
    env = os.environ if environ is None else environ
    if not _is_rank_zero(env):
        yield
        return
    lock = RunLock(run_dir, "trainer")
    holder = lock.try_acquire(" ".join([sys.executable, *sys.argv]))
    if holder is not None:
        parent = env.get(HOLDER_ENV, "").strip()
        if not (parent.isdigit() and holder.pid == int(parent)):
            raise RunLocked(lock.refusal(holder))
    try:
        yield
    finally:
        lock.release()


@contextlib.contextmanager
def owned(run_dir: str | os.PathLike[str], what: str, advice: str) -> Iterator[RunLock]:
    """Hold `run_dir`'s lock for the `with` block, for a command that writes into a run (`what` names it in
    the refusal); raises RunLocked naming the holder and `advice` (the way out) when another process holds
    it. No waiting: for a holder on another host see `RunLock.acquire`."""
    lock = RunLock(run_dir, what)
    holder = lock.try_acquire(" ".join([sys.executable, *sys.argv]))
    if holder is not None:
        raise RunLocked(lock.refusal(holder, advice))
    try:
        yield lock
    finally:
        lock.release()
