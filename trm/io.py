"""Atomic, durable file writes: temp file + fsync + rename, so a crash never leaves a torn file.

Replacing or removing a folder is `trm.safe_remove`'s job: `atomic_directory` asks it before it replaces
anything and marks every folder it publishes as written by trm-stack."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from trm import safe_remove
from trm.errors import TRMError


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Flush a directory entry (after a rename or create) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write `data` to `path` so that readers see either the old file or the complete new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_dead_leftovers(path)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{path.name}.{safe_remove.owner_tag()}.", suffix=".tmp", dir=path.parent
    )
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        safe_remove.remove_own_temp(tmp)
        raise
    fsync_dir(path.parent)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any, *, indent: int | None = 2) -> None:
    atomic_write_text(path, json.dumps(obj, indent=indent, sort_keys=False) + "\n")


def fsync_tree(root: str | os.PathLike[str]) -> None:
    """fsync every file and directory below `root` (before publishing it with a rename)."""
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(dirpath)


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def exchange(a: Path, b: Path) -> bool:
    """Swap the paths `a` and `b` in one step (Linux's renameat2 with RENAME_EXCHANGE). False, with nothing
    changed, where this system or filesystem cannot (then two renames are the caller's fallback)."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    # no such call, flag or support on this filesystem (NFS, some FUSE); EXDEV: overlayfs across layers
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def remove_dead_leftovers(target: str | os.PathLike[str]) -> list[Path]:
    """Delete temp directories next to `target` that a killed writer on this host left behind.

    `atomic_directory` names its temp directory `.<name>.<host>-<pid>.<random>.partial` (and a replaced
    target `.<name>.old-<host>-<pid>`), `atomic_write_bytes` its temp file `.<name>.<host>-<pid>.<random>.tmp`.
    A SIGKILLed writer never cleans up; a leftover whose host is this one and whose pid no longer runs is
    removed, except a target moved aside whose replacement was never published: it is put back at `target`.
    Leftovers of other hosts (shared volumes) and of other users (a shared /tmp) stay. Returns what was removed.
    """
    target = Path(target)
    host = safe_remove.host_tag()
    removed = []
    kinds = (  # (pattern, whether a leftover is the target moved aside)
        (f".{target.name}.{host}-*.partial", False),
        (f".{target.name}.{host}-*.tmp", False),
        (f".{target.name}.old-{host}-*", True),
    )
    for pattern, moved_aside in kinds:
        for leftover in target.parent.glob(pattern):
            owner = leftover.name[len(f".{target.name}.") :].removeprefix("old-")
            if not safe_remove.owner_is_dead(owner) or leftover.lstat().st_uid != os.geteuid():
                continue  # a live writer's, or another user's (a shared /tmp): not ours to touch
            if moved_aside and not (target.exists() or target.is_symlink()):
                os.replace(leftover, target)  # moved aside, the new one never published: put it back
                continue
            safe_remove.remove_own_temp(leftover)
            removed.append(leftover)
    return removed


def _own_temp_dir(target: Path) -> Path:
    """A new `.<name>.<host>-<pid>.<random>.partial` folder next to `target`, after the ones a killed process
    of this host left there were removed (`remove_dead_leftovers`)."""
    remove_dead_leftovers(target)
    prefix = f".{target.name}.{safe_remove.owner_tag()}."
    return Path(tempfile.mkdtemp(prefix=prefix, suffix=".partial", dir=target.parent))


@contextlib.contextmanager
def scratch_directory(name: str, parent: str | os.PathLike[str] | None = None) -> Iterator[Path]:
    """A private scratch folder in `parent` (default: the system's temp folder), removed when the block ends.

    Unlike `tempfile.TemporaryDirectory` its name (`.<name>.<host>-<pid>.<random>.partial`) says who made it,
    so the folder a SIGKILLed process leaves (it never runs its cleanup) is removed by the next scratch folder
    of the same `name` on this host instead of staying in /tmp for good."""
    tmp = _own_temp_dir(Path(parent if parent is not None else tempfile.gettempdir()) / name)
    try:
        yield tmp
    finally:
        safe_remove.remove_own_temp(tmp)


@contextlib.contextmanager
def atomic_directory(
    target: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    kind: str = "output",
    tool: str = "trm-stack",
    sources: Iterable[str | os.PathLike[str]] = (),
    listed_by: safe_remove.ListedBy | None = None,
    flag: str,
) -> Iterator[Path]:
    """Yield a fresh temp directory next to `target`; on success publish it at `target` by rename.

    On any exception the temp directory is removed and `target` is left untouched. With
    `overwrite=True` an existing `target` is replaced (swapped with the new folder in one step where the
    filesystem can, else moved aside first; then deleted), but
    only when `trm.safe_remove` allows it: an output of the same `kind` that trm-stack wrote, holding
    nothing else, not a run, checkpoint or dataset, and not one of the `sources` the command reads. The
    check runs before anything is staged and again right before the rename. The published folder carries
    the creation marker (`tool`, `kind`, its files), unless `listed_by` names the files from the folder's
    own manifest (a dataset, whose files must be upstream's exactly). Leftovers of earlier writers that were killed
    (SIGKILL, OOM) are removed first (a replaced folder one of them had moved aside is put back). `flag`: what the caller's user calls `target` (its command-line flag, or
    a name such as "the handoff folder"), named by every refusal; each caller must say it.
    """
    target = Path(target)
    sources = list(sources)
    # First, so that a folder a killed writer had moved aside is back before anything is judged.
    remove_dead_leftovers(target)
    safe_remove.check_replaceable(target, kind=kind, sources=sources, listed_by=listed_by, flag=flag)
    if target.exists() and not overwrite:
        raise TRMError(
            f"{flag} {target}: already exists; choose another folder, or pass --overwrite to replace what "
            "trm-stack wrote there"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _own_temp_dir(target)
    owner = safe_remove.owner_tag()
    try:
        yield tmp
        if listed_by is None:
            safe_remove.write_marker(tmp, tool=tool, kind=kind)
        fsync_tree(tmp)
        old = None
        if target.exists() or target.is_symlink():
            # Changed while staging?
            safe_remove.check_replaceable(target, kind=kind, sources=sources, listed_by=listed_by, flag=flag)
            if exchange(tmp, target):  # one step: a kill leaves the old folder or the new one at `target`
                old = tmp
            else:
                old = target.with_name(f".{target.name}.old-{owner}")
                os.replace(target, old)
        if old is not tmp:
            os.replace(tmp, target)
        fsync_dir(target.parent)
        if old is not None:
            safe_remove.remove_own_temp(old)
    except BaseException:
        safe_remove.remove_own_temp(tmp)
        raise


def sha256_file(path: str | os.PathLike[str], chunk_size: int = 1 << 20) -> str:
    """Hex sha256 of a file, streamed."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_size):
            h.update(chunk)
    return h.hexdigest()
