"""Kill a command at every point where it changes the disk, and check what each kill leaves.

A real SIGKILL (the OOM killer, a preemption, `kill -9`) can land between any two system calls of a command.
`sweep` reproduces each of those points in this process:

1. `setup(root)` lays out the command's starting state under `root` (its inputs, perhaps an earlier output),
   and `command(root)` runs it (a `main(argv)`) once, uninterrupted, counting its *mutations* below `root`:
   every open for writing (builtins/io `open`, `os.open` with a write flag, and so `tempfile.mkstemp`),
   `os.replace`, `os.rename`, `os.link`, `os.symlink`, `os.fsync`, `os.mkdir` (so `Path.mkdir` and
   `tempfile.mkdtemp`), `os.unlink`/`os.remove`, `os.rmdir` (so `shutil.rmtree`, file by file) and
   `os.truncate`. The result is the *expected* tree.
2. For each mutation index N, `root` is laid out afresh and the command runs again with `Killed` raised just
   before mutation N. `Killed` is a BaseException: no `except Exception` of the command can swallow it. From
   then on the process counts as dead: every further mutation (a cleanup in `finally` or in
   `except BaseException`) raises `Killed` too, so the disk is left as the kill would leave it. An open for
   writing is two points: before it, and just after it created or truncated the file (a kill before the
   first byte reaches the disk leaves an empty file). While it runs `os.getpid()` answers the pid of a
   process that has ended, as the next run would find a killed writer's pid, and after the kill the
   descriptors it opened below `root` are closed, as the kernel closes a dead process's (and drops its
   `flock`s).
3. After each kill: every file that was under `root` before the command is byte-identical, or holds what
   the uninterrupted run left there (the command's documented replacement), or is absent where the
   uninterrupted run removed it too; an `atomic` folder is wholly the old one or wholly the new one.
4. The same command runs again without a fault. It either succeeds and leaves exactly the expected tree (a
   killed run's leftovers are recognised and cleared), or exits non-zero with one error line; then
   `follow_fix(root, error)` must do what that line says (the test asserts the line names the leftover and
   the fix), after which the command must succeed with the expected tree.

Writes the command makes through C code (torch's zip writer, numpy's memory maps) are not seen: they count
as a part of the Python-level mutation around them. Paths outside `root` (caches, pytest's own files) are
neither counted nor interrupted.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ended_pid


class Killed(BaseException):
    """The simulated SIGKILL: a BaseException, so `except Exception` in the command cannot catch it."""


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _fd_path(fd: int) -> str | None:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def _full(path: Any, dir_fd: int | None = None) -> str | None:
    """The absolute path a call names (None: not a path, e.g. a pipe's descriptor)."""
    if isinstance(path, int):
        return _fd_path(path)
    try:
        name = os.fsdecode(os.fspath(path))
    except TypeError:
        return None
    if dir_fd is not None and not os.path.isabs(name):
        base = _fd_path(dir_fd)
        return None if base is None else os.path.join(base, name)
    return os.path.abspath(name)


@dataclass
class Injector:
    """Counts the mutations below `root`; with `kill_at`, raises Killed before that one and after it."""

    roots: tuple[str, ...]
    kill_at: int | None = None
    count: int = 0
    dead: bool = False
    log: list[str] = field(default_factory=list)
    opened: list[tuple[int, int, int]] = field(default_factory=list)
    """(fd, device, inode) of each descriptor os.open gave out below the root."""

    def close_leaked(self) -> None:
        """Close what the killed run left open, as the kernel does when a process dies (its flocks go)."""
        for fd, dev, ino in self.opened:
            with contextlib.suppress(OSError):
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino) == (dev, ino):
                    os.close(fd)

    def relative(self, path: str | None) -> str | None:
        """`path` relative to the root it lies below (None: outside)."""
        for r in self.roots:
            if path is not None and (path == r or path.startswith(r + os.sep)):
                return os.path.relpath(path, r)
        return None

    def point(self, what: str, *paths: str | None) -> None:
        """One mutation point about to happen to `paths` (a rename names two): count it, or die there."""
        path = next((rel for rel in map(self.relative, paths) if rel is not None), None)
        if path is None:
            return
        if self.dead:
            raise Killed(f"already killed; {what} {path}")
        index = self.count
        self.count += 1
        self.log.append(f"{index}: {what} {path}")
        if index == self.kill_at:
            self.dead = True
            raise Killed(f"killed before mutation {index}: {what} {path}")


def _writes(mode: str) -> bool:
    return any(c in mode for c in "wax+")


@contextlib.contextmanager
def injected(root: Path, kill_at: int | None = None) -> Iterator[Injector]:
    """Patch the mutating calls of `os`, `open` and `io.open` for the block (see the module doc)."""
    inj = Injector(tuple(sorted({os.path.abspath(root), os.path.realpath(root)})), kill_at)
    real = {name: getattr(os, name) for name in (
        "replace", "rename", "link", "symlink", "fsync", "mkdir", "unlink", "remove", "rmdir", "truncate",
        "open", "getpid",
    )}  # fmt: skip
    real_open = builtins.open
    dead_pid = ended_pid() if kill_at is not None else None

    def two_paths(name: str) -> Callable[..., Any]:
        def call(src: Any, dst: Any, *args: Any, **kwargs: Any) -> Any:
            inj.point(name, _full(src, kwargs.get("src_dir_fd")), _full(dst, kwargs.get("dst_dir_fd")))
            return real[name](src, dst, *args, **kwargs)

        return call

    def one_path(name: str) -> Callable[..., Any]:
        def call(path: Any, *args: Any, **kwargs: Any) -> Any:
            inj.point(name, _full(path, kwargs.get("dir_fd")))
            return real[name](path, *args, **kwargs)

        return call

    def os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        full = _full(path, kwargs.get("dir_fd"))
        if not flags & _WRITE_FLAGS:
            return real["open"](path, flags, *args, **kwargs)
        inj.point("open for writing", full)
        fd = real["open"](path, flags, *args, **kwargs)
        st = os.fstat(fd)
        inj.opened.append((fd, st.st_dev, st.st_ino))
        try:
            inj.point("write into the opened file", full)
        except Killed:
            os.close(fd)
            raise
        return fd

    def py_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, int) or not _writes(mode):
            return real_open(file, mode, *args, **kwargs)
        full = _full(file)
        inj.point("open for writing", full)
        handle = real_open(file, mode, *args, **kwargs)
        try:
            inj.point("write into the opened file", full)
        except Killed:
            handle.close()
            raise
        return handle

    patches = {
        "replace": two_paths("replace"),
        "rename": two_paths("rename"),
        "link": two_paths("link"),
        "symlink": lambda src, dst, *a, **k: (
            inj.point("symlink", _full(dst, k.get("dir_fd"))), real["symlink"](src, dst, *a, **k)
        )[1],
        "fsync": lambda fd: (inj.point("fsync", _fd_path(fd) if isinstance(fd, int) else _full(fd.fileno())),
                             real["fsync"](fd))[1],
        "mkdir": one_path("mkdir"),
        "unlink": one_path("unlink"),
        "remove": one_path("remove"),
        "rmdir": one_path("rmdir"),
        "truncate": one_path("truncate"),
        "open": os_open,
    }  # fmt: skip
    if dead_pid is not None:
        patches["getpid"] = lambda: dead_pid
    with pytest.MonkeyPatch.context() as mp:
        for name, fn in patches.items():
            mp.setattr(os, name, fn)
        mp.setattr(builtins, "open", py_open)
        mp.setattr(io, "open", py_open)
        try:
            yield inj
        finally:
            if inj.dead:
                inj.close_leaked()


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file (bytes), symbolic link and folder (None) below `root`, by relative path."""
    tree: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            tree[rel] = b"-> " + os.fsencode(os.readlink(path))
        elif path.is_file():
            tree[rel] = path.read_bytes()
        elif path.is_dir():
            tree[rel] = None
    return tree


def _files(tree: Mapping[str, bytes | None], under: str = "") -> dict[str, bytes | None]:
    prefix = f"{under}/" if under else ""
    return {k[len(prefix) :]: v for k, v in tree.items() if k.startswith(prefix)}


@dataclass
class SweepResult:
    """What the sweep did: mutations counted, kills whose rerun needed the printed fix, seconds taken."""

    mutations: int
    log: list[str]
    killed: int
    fixed_by_hand: list[tuple[int, str]]
    seconds: float


Tree = dict[str, bytes | None]


def changes_the_tree(point: str) -> bool:
    """False for an fsync: it changes nothing a process sees (this harness models a killed process, not a lost
    page cache), so a kill before it leaves the tree a kill before the next point leaves. A third of a
    command's points are fsyncs; the sweeps skip them."""
    return not point.split(": ", 1)[1].startswith("fsync ")


def sampled_inside(marker: str, every: int) -> Callable[[str], bool]:
    """A `select` for `sweep`: every point (fsyncs aside, see `changes_the_tree`) whose path does not contain
    `marker`, and of those that do one in `every` (by index). Inside a staging folder (marker `.partial/`)
    every kill leaves the same kind of leftover, a part-written staging folder: a sample of them is enough."""

    def chosen(point: str) -> bool:
        index, rest = point.split(": ", 1)
        return changes_the_tree(point) and (marker not in rest or int(index) % every == 0)

    return chosen


def sweep(
    root: Path,
    setup: Callable[[Path], None],
    command: Callable[[Path], tuple[int, str]],
    *,
    atomic: tuple[str, ...] = (),
    moved_aside: bool = False,
    follow_fix: Callable[[Path, str], None] | None = None,
    normalize: Callable[[str, bytes | None], bytes | None] = lambda rel, data: data,
    select: Callable[[str], bool] | None = None,
) -> SweepResult:
    """Kill `command` before each of its mutations below `root` and check each kill (module doc).

    `command(root)` returns (exit code, stderr); it must exit 0 when not interrupted. `atomic`: folders
    (relative to `root`) that must be wholly old or wholly new after any kill; with `moved_aside` (a filesystem
    without renameat2's exchange: trm.io's two renames) an `atomic` folder may also be absent while the old one
    lies whole at `.<name>.old-<owner>`, for the next run to put back. `follow_fix(root, error)` does
    what a refusal after a kill says, and asserts the line names the leftover and the fix (None: a rerun must
    simply succeed). `normalize(rel, data)`: what of a file is compared (e.g. leave out a timestamp).
    `select(point)`: whether to kill at a point, by its line in the log ("N: what path"; default: every point
    but an fsync, see `changes_the_tree`)."""
    started = time.monotonic()

    def fresh() -> Tree:
        if root.exists():
            shutil.rmtree(root)
        root.mkdir(parents=True)
        setup(root)
        return snapshot(root)

    def compared(tree: Tree) -> Tree:
        return {rel: normalize(rel, data) for rel, data in tree.items()}

    before = fresh()
    with injected(root) as counting:
        code, err = command(root)
    assert code == 0, f"the uninterrupted command failed ({code}): {err}"
    expected = snapshot(root)
    fixed: list[tuple[int, str]] = []
    killed = 0
    chosen = select or changes_the_tree
    for index in (i for i, point in enumerate(counting.log) if chosen(point)):
        fresh()
        killed += 1
        with injected(root, kill_at=index), pytest.raises(Killed):
            command(root)
        where = f"killed before mutation {counting.log[index]}"
        left = snapshot(root)
        _check_kept(before, _seen_put_back(left, atomic) if moved_aside else left, expected, atomic, where)
        if moved_aside:
            _check_put_back(root, left, atomic, where)
        code, err = command(root)
        if code != 0:
            assert follow_fix is not None, f"{where}: the next run failed ({code}): {err}"
            lines = err.strip().splitlines()
            assert len(lines) == 1, f"{where}: the next run's refusal is not one line:\n{err}"
            follow_fix(root, lines[0])
            code, err = command(root)
            assert code == 0, f"{where}: following the fix of {lines[0]!r} did not help ({code}): {err}"
            fixed.append((index, lines[0]))
        after = compared(snapshot(root))
        want = compared(expected)
        assert after == want, f"{where}: the next run left another tree than an uninterrupted run: " + _diff(
            want, after
        )
    return SweepResult(counting.count, counting.log, killed, fixed, time.monotonic() - started)


def _seen_put_back(left: Tree, atomic: tuple[str, ...]) -> Tree:
    """`left` with each absent `atomic` folder seen at its name when exactly one `.<name>.old-*` folder (the
    folder a killed writer had moved aside) lies next to it; that copy is what the next run puts back."""
    view = dict(left)
    for folder in atomic:
        if folder in view:
            continue
        parent, _, name = folder.rpartition("/")
        prefix = f"{parent}/.{name}.old-" if parent else f".{name}.old-"
        asides = {
            rel for rel, data in left.items() if rel.startswith(prefix) and "/" not in rel[len(prefix) :]
        }
        if len(asides) != 1:
            continue
        (aside,) = asides
        for rel in [r for r in view if r == aside or r.startswith(aside + "/")]:
            view[folder + rel[len(aside) :]] = view.pop(rel)
    return view


def _check_put_back(root: Path, left: Tree, atomic: tuple[str, ...], where: str) -> None:
    """What the next writer of a folder does first (trm.io.remove_dead_leftovers) brings the folder a killed
    writer moved aside back, whole, before anything else can fail."""
    from trm.io import remove_dead_leftovers

    seen = _seen_put_back(left, atomic)
    for folder in atomic:
        if folder in left or folder not in seen:
            continue
        remove_dead_leftovers(root / folder)
        assert _files(snapshot(root), folder) == _files(seen, folder), (
            f"{where}: {folder}, moved aside, was not put back whole by the next writer"
        )


def _check_kept(before: Tree, left: Tree, expected: Tree, atomic: tuple[str, ...], where: str) -> None:
    for rel, data in before.items():
        if rel in left:
            assert left[rel] in (data, expected.get(rel, data)), f"{where}: {rel} is neither old nor new"
        else:
            assert rel not in expected, f"{where}: {rel} (there before the command) was deleted"
    for folder in atomic:
        now = _files(left, folder) if folder in left else None
        old = _files(before, folder) if folder in before else None
        new = _files(expected, folder)
        assert now in (old, new), f"{where}: {folder} is neither the old nor the new one: " + _diff(
            new, now or {}
        )


def _diff(want: Mapping[str, bytes | None], got: Mapping[str, bytes | None]) -> str:
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    changed = sorted(k for k in set(want) & set(got) if want[k] != got[k])
    return f"missing {missing[:5]}, extra {extra[:5]}, changed {changed[:5]}"
