"""The one owner of deleting and replacing directories: nothing trm-stack removes is a user's data.

Every folder a command publishes as an output (`trm.io.atomic_directory`: a dataset, a Kaggle bundle, a
Hub staging folder, a report) carries a creation marker, `.trm-created` (JSON: the tool that wrote it,
the kind of output and every file it wrote; no time, so the same inputs still give the same bytes). A command may replace or remove an existing target
only when all of these hold; otherwise it stops with one line (exit 2) and deletes nothing:

- the target is a folder (not a file, not a symbolic link);
- it is empty, or it holds the marker of the same kind of output and no file the marker does not list
  (so `--overwrite` replaces what the tool itself wrote, nothing more);
- it is not, and does not contain, a run directory (`run.json`, `launch/`), a checkpoint (`step_N/` with
  `manifest.json` or `COMPLETE`) or a dataset (`manifest.json` beside a `train/` folder) other than the
  dataset of the same kind being rebuilt;
- it is not the source being read, nor inside it, nor around it.

A single output file (infer's --out and --save-predictions) is replaced atomically, and only when the file
there is one that command writes; a folder or a user's file at that path is refused
(`check_file_replaceable`).

The other deletions are narrow helpers named for what they remove: `remove_own_temp` (a temporary file or
folder the caller itself just made) and `remove_retired_checkpoint` (a complete `step_N/` that checkpoint
retention no longer keeps). `tests/test_safe_remove.py` lists every deleting call in trm/, tools/ and
noxfile.py, and every deleting command of the host's shell (scripts/, .ci/run, the Makefile), so a new one
cannot bypass this module.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from trm.errors import TRMError

MARKER = ".trm-created"
_MARKER_TMP_SUFFIX = ".tmp"
_STEP = re.compile(r"^step_\d+$")


def _relative_files(root: Path) -> list[str]:
    return sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if (p.is_file() or p.is_symlink()) and p.name != MARKER
    )


def write_marker(folder: Path, *, tool: str, kind: str, scratch: bool = False) -> None:
    """Record in `folder` (a staging folder about to be published) that trm-stack wrote every file in it.

    `scratch=True` marks a work folder the tool creates empty and then fills as it goes (a simulation's
    venv): everything below it is the tool's, but the run, checkpoint and dataset checks still apply."""
    record = {
        "tool": tool,
        "kind": kind,
        "scratch": scratch,
        "files": _relative_files(folder),
    }
    # Written beside its name and renamed: a writer killed halfway leaves no torn marker, only a temp file
    # named after its owner, which `clear_killed_marker` recognises once that owner is gone.
    fd, tmp = tempfile.mkstemp(prefix=f"{MARKER}.{owner_tag()}.", suffix=_MARKER_TMP_SUFFIX, dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, folder / MARKER)
    except BaseException:
        remove_own_temp(tmp)
        raise
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def clear_killed_marker(folder: Path) -> None:
    """Delete the temp files of `write_marker`s killed before their rename (their process on this host is
    gone) when they are all `folder` holds: the killed command had found the folder empty (or made it) and
    was claiming it, so it is empty again, as that command found it. A folder holding anything else, or the
    temp of a claim still running, is left as it is."""
    if not folder.is_dir() or folder.is_symlink():
        return
    entries = list(folder.iterdir())
    if entries and all(_is_killed_marker_temp(p) for p in entries):
        for path in entries:
            remove_own_temp(path)


def _is_killed_marker_temp(path: Path) -> bool:
    return (
        path.name.startswith(f"{MARKER}.")
        and path.name.endswith(_MARKER_TMP_SUFFIX)
        and path.is_file()
        and not path.is_symlink()
        and owner_is_dead(path.name[len(f"{MARKER}.") :])
    )


# --- who owns a temp file or folder -------------------------------------------------------------------------
# A writer names its temp files and folders `<prefix>.<host>-<pid>.<random><suffix>`: a later run on the same
# host deletes one only when that process is gone (SIGKILL, OOM). Other hosts' stay (shared volumes).

HOST_TAG_MAX = 24  # a long pod name is cut (and told apart by a hash), so that names stay under NAME_MAX


def host_tag() -> str:
    """This host's name, reduced to characters safe in a file name (hostnames matter on shared disks)."""
    name = "".join(c if c.isalnum() or c in "-_" else "_" for c in socket.gethostname()) or "host"
    if len(name) > HOST_TAG_MAX:
        name = name[: HOST_TAG_MAX - 7] + "_" + hashlib.sha256(name.encode()).hexdigest()[:6]
    return name


def owner_tag() -> str:
    """`<host>-<pid>`: names the process that owns a temp file or folder."""
    return f"{host_tag()}-{os.getpid()}"


def owner_is_dead(tagged: str) -> bool:
    """Whether `tagged` (`<host>-<pid>.<rest>`, a temp name after its prefix) was written by a process of this
    host that no longer runs."""
    host = host_tag()
    if not tagged.startswith(f"{host}-"):
        return False
    pid = tagged[len(host) + 1 :].split(".", 1)[0]
    return pid.isdigit() and not _is_alive(int(pid))


def _is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def read_marker(folder: Path) -> dict[str, Any] | None:
    """The creation record of `folder`, or None when it has none (or an unreadable one)."""
    try:
        record = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("files"), list):
        return None
    return record


def _protected(root: Path, kind: str) -> str | None:
    """What in `root` must never be deleted by a replace: a run directory, a checkpoint, a dataset."""
    for folder in [root, *(p for p in root.rglob("*") if p.is_dir() and not p.is_symlink())]:
        rel = "." if folder == root else folder.relative_to(root).as_posix()
        if _STEP.match(folder.name) and (
            (folder / "COMPLETE").exists() or (folder / "manifest.json").exists()
        ):
            return f"a checkpoint ({rel})"
        if (folder / "run.json").is_file() or (folder / "launch").is_dir():
            return f"a run directory ({rel})"
        is_dataset = (folder / "manifest.json").is_file() and (folder / "train").is_dir()
        if is_dataset and not (folder == root and kind == "dataset"):  # a dataset build replaces its own
            return f"a dataset ({rel})"
    return None


def _overlaps(target: Path, source: Path) -> bool:
    t, s = target.resolve(), source.resolve()
    return t == s or t in s.parents or s in t.parents


# An output whose own manifest lists its files (a dataset: byte-identical to upstream's builder, so no
# marker file) names them through a function: the files it lists (with the manifest), or None when the
# folder holds no such manifest of trm-stack.
ListedBy = Callable[[Path], "list[str] | None"]


def refusal(
    target: str | os.PathLike[str],
    *,
    kind: str,
    sources: Iterable[str | os.PathLike[str]] = (),
    listed_by: ListedBy | None = None,
) -> str | None:
    """Why `target` may not be replaced by an output of `kind` (None: it may, or it does not exist)."""
    target = Path(target)
    for source in sources:
        if _overlaps(target, Path(source)):
            return f"it is, holds or lies inside {source}, which this command reads"
    if target.is_symlink():
        return "it is a symbolic link"
    if not target.exists():
        return None
    if not target.is_dir():
        return "it is a file, not a folder"
    if not any(target.iterdir()):
        return None
    what = _protected(target, kind)
    if what is not None:
        return f"it is or holds {what}"
    if listed_by is not None:
        listed = listed_by(target)
        if listed is None:
            return f"it holds files trm-stack did not write (no manifest of a trm-stack {kind})"
        record: dict[str, Any] | None = {"kind": kind, "files": listed}
    else:
        record = read_marker(target)
    if record is None:
        return f"it holds files trm-stack did not write (no {MARKER} marker)"
    if record.get("kind") != kind:
        return f"it holds a {record.get('kind')!r} output of {record.get('tool')!r}, not a {kind!r}"
    foreign = (
        [] if record.get("scratch") is True else sorted(set(_relative_files(target)) - set(record["files"]))
    )
    if foreign:
        return f"it holds {foreign[0]}, which trm-stack did not write ({len(foreign)} such file(s))"
    return None


def check_replaceable(
    target: str | os.PathLike[str],
    *,
    kind: str,
    sources: Iterable[str | os.PathLike[str]] = (),
    flag: str = "the output folder",
    listed_by: ListedBy | None = None,
) -> None:
    """Raise TRMError (one line, exit 2) when `target` may not be replaced; see the module doc."""
    why = refusal(target, kind=kind, sources=sources, listed_by=listed_by)
    if why is not None:
        raise TRMError(
            f"{flag} {target}: refusing to replace it: {why}; nothing was changed. Choose a new or empty "
            "folder (or move what is there yourself)"
        )


def check_file_replaceable(
    target: str | os.PathLike[str], *, flag: str, ours: Callable[[Path], bool], what: str, example: str
) -> None:
    """Raise TRMError (one line, exit 2) when the output file `target` may not be (re)written: it is a
    folder, its parent is a file, or it holds a file that `ours` does not recognise as `what` (what this
    command writes there). Checked before the work starts, so a bad path never costs the work."""
    target = Path(target)
    if target.is_dir():
        why = f"it is a folder; name the file to write, e.g. {target / example}"
    elif target.parent.exists() and not target.parent.is_dir():
        why = f"{target.parent} is a file, not a folder; choose another path"
    elif target.is_file() and not ours(target):
        why = (
            f"it holds a file that is not {what}, so trm-stack did not write it; nothing was changed. Choose "
            "another path (or move that file yourself)"
        )
    else:
        return
    raise TRMError(f"{flag} {target}: refusing to write it: {why}")


def remove_owned(
    target: str | os.PathLike[str], *, kind: str, sources: Iterable[str | os.PathLike[str]] = ()
) -> None:
    """Delete a published output of `kind` after the checks of `check_replaceable` passed."""
    target = Path(target)
    check_replaceable(target, kind=kind, sources=sources)
    if target.exists():
        _rmtree(target)


def remove_own_temp(path: str | os.PathLike[str]) -> None:
    """Delete a temporary file or folder that the caller itself created (staging, scratch, a probe file).

    Never for anything a user could have put there: for outputs use `remove_owned`."""
    path = Path(path)
    if path.is_symlink() or path.is_file():
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    elif path.exists():
        _rmtree(path)


def remove_retired_checkpoint(folder: str | os.PathLike[str]) -> None:
    """Delete one complete `step_N/` folder that checkpoint retention no longer keeps (or a torn one it
    replaces); refuses anything else."""
    folder = Path(folder)
    if not re.fullmatch(r"\.?step_\d+(\.old|\.partial)?", folder.name):
        raise ValueError(f"{folder} is not a checkpoint folder; refusing to delete it")
    _rmtree(folder)


def _rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
