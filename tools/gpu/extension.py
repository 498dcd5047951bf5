"""The adam-atan2 extension build of the GPU check: its prerequisites, and a build that outlives the call.

The build (`python -m trm.images.buildtools install-adam-atan2`, 65-89 s on the first H100 host) runs
detached in its own folder:

    <dir>/build.json    who started it: pid, command, start time (written before the build runs)
    <dir>/build.log     the build's output
    <dir>/result.json   its exit code and seconds (written by this module's wrapper when the build ends)
    <dir>/site/         the installed extension, for PYTHONPATH

so that a check call ending while it still compiles leaves it running (`keep`), and the next call
picks it up from these files instead of starting again. A new build replaces an earlier build's files there,
and nothing else: a folder holding anything more (a user's `site/`, their notes) is refused untouched
(`refusal`). Run as a module, this is that wrapper:

    python -m tools.gpu.extension DIR -- COMMAND ...
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from trm.errors import TRMError
from trm.images.compat import arch_cuda_floor, cuda_major_minor
from trm.io import atomic_write_json
from trm.safe_remove import remove_own_temp

BUILD, LOG, RESULT, SITE = "build.json", "build.log", "result.json", "site"
OWN_NAMES = frozenset({BUILD, LOG, RESULT, SITE})  # all that a build writes in its folder
_NVCC_RELEASE = re.compile(r"release (\d+)\.(\d+)")


def find_nvcc(env: dict[str, str]) -> str | None:
    """The nvcc the build uses: $CUDA_HOME/bin/nvcc when CUDA_HOME is set, else the one on PATH."""
    if env.get("CUDA_HOME"):
        candidate = Path(env["CUDA_HOME"]) / "bin" / "nvcc"
        return str(candidate) if candidate.is_file() else None
    return shutil.which("nvcc", path=env.get("PATH"))


def nvcc_release(nvcc: str) -> tuple[int, int] | None:
    """(major, minor) from `nvcc --version`, None when it does not run or says no release."""
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = _NVCC_RELEASE.search(out)
    return (int(match[1]), int(match[2])) if match else None


def prerequisite_problem(env: dict[str, str], torch_cuda: str | None, archs: str = "") -> str | None:
    """None when the build can start, else one line: what is missing and the fix. `archs` (the visible
    GPUs' TORCH_CUDA_ARCH_LIST, e.g. "10.0") also needs an nvcc that targets them: Blackwell's from CUDA 12.8
    on (trm.images.compat.FIRST_CUDA_FOR_ARCH)."""
    if not torch_cuda:
        return "this torch has no CUDA (torch.version.cuda is None): install the host's CUDA build of torch"
    major = int(torch_cuda.split(".")[0])
    fix = (
        f"install CUDA {major}.x's nvcc (torch {torch_cuda} was built with CUDA {major}) and put its bin/ on "
        "PATH, or set CUDA_HOME to that toolkit"
    )
    nvcc = find_nvcc(env)
    if nvcc is None:
        where = f"CUDA_HOME={env['CUDA_HOME']} has no bin/nvcc" if env.get("CUDA_HOME") else "no nvcc on PATH"
        return f"{where}: {fix}"
    release = nvcc_release(nvcc)
    if release is None:
        return f"{nvcc} --version names no release: {fix}"
    if release[0] != major:
        return f"{nvcc} is CUDA {release[0]}.{release[1]}, torch's CUDA is {torch_cuda}: {fix}"
    needed = arch_cuda_floor([a for a in archs.split(";") if a])
    if needed and release < cuda_major_minor(needed):
        return (
            f"{nvcc} is CUDA {release[0]}.{release[1]}, which cannot compile for compute capability {archs} (first "
            f"in CUDA {needed}): install CUDA {needed}+'s nvcc of the same major as torch ({torch_cuda}), or run "
            "the GPU check from the image of these GPUs (docs/images.md)"
        )
    return None


def refusal(folder: Path) -> str | None:
    """Why a build may not start in `folder` (None: it is absent, empty, or holds only an earlier build's
    files): a new build deletes the earlier one's `site/` and rewrites its records, never a user's files."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        return "it is a file or a symbolic link, not a folder"
    if not folder.exists():
        return None
    names = sorted(p.name for p in folder.iterdir() if not _own_leftover(p.name))
    if not names or names == [LOG]:  # empty, or a build killed before it recorded itself
        return None
    foreign = [n for n in names if n not in OWN_NAMES]
    if foreign:
        return f"it holds {foreign[0]}, which no extension build wrote ({len(foreign)} such name(s))"
    if ExtensionBuild.find(folder) is None:
        return f"it holds {', '.join(names)} but no {BUILD} of an earlier extension build"
    return None


def _own_leftover(name: str) -> bool:
    """A temp file of an atomic write of a build's record, left by a writer that was killed (trm.io)."""
    return any(name.startswith(f".{own}.") and name.endswith(".tmp") for own in (BUILD, RESULT))


def refusal_message(folder: Path, why: str) -> str:
    return (
        f"--extension-dir {folder}: refusing to build the extension there: {why}; nothing was changed. Choose "
        "a new or empty folder (or move what is there yourself)"
    )


def _alive(pid: int) -> bool:
    """Whether `pid` is still this module's wrapper (a reused pid of another program is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    cmdline = Path(f"/proc/{pid}/cmdline")
    with contextlib.suppress(OSError):
        return b"tools.gpu.extension" in cmdline.read_bytes()
    return True


class ExtensionBuild:
    """One build in `folder`: started here (`start`) or found there from an earlier call (`find`)."""

    def __init__(self, folder: Path, record: dict[str, Any], *, picked_up: bool) -> None:
        self.folder = folder
        self.site = folder / SITE
        self.log = folder / LOG
        self.record = record
        self.cmd: list[str] = record["command"]
        self.picked_up = picked_up

    @classmethod
    def start(cls, folder: Path, cmd: list[str], env: dict[str, str], cwd: Path) -> ExtensionBuild:
        """Start `cmd` detached (its own session) through the wrapper; a previous build's files are replaced,
        a folder holding anything else is refused (TRMError, nothing changed)."""
        why = refusal(folder)
        if why is not None:
            raise TRMError(refusal_message(folder, why))
        folder.mkdir(parents=True, exist_ok=True)
        for path in folder.iterdir():  # what an earlier build of this check wrote there (refusal checked it)
            if path.name in (RESULT, BUILD, SITE) or _own_leftover(path.name):
                remove_own_temp(path)
        wrapper = [sys.executable, "-m", "tools.gpu.extension", str(folder), "--", *cmd]
        with open(folder / LOG, "w", encoding="utf-8") as f:
            f.write("$ " + " ".join(cmd) + "\n")
            f.flush()
            proc = subprocess.Popen(
                wrapper, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd, env=env,
                start_new_session=True,
            )  # fmt: skip
        record = {"pid": proc.pid, "command": cmd, "started_unix": time.time()}
        atomic_write_json(folder / BUILD, record)
        build = cls(folder, record, picked_up=False)
        build._proc = proc  # reaped by `wait`/`stop` in this process
        return build

    @classmethod
    def find(cls, folder: Path) -> ExtensionBuild | None:
        """The build an earlier call left in `folder` (running, finished or dead), None when there is none."""
        try:
            record = json.loads((folder / BUILD).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        if not isinstance(record, dict) or not {"pid", "command", "started_unix"} <= set(record):
            return None
        return cls(folder, record, picked_up=True)

    def result(self) -> dict[str, Any] | None:
        try:
            return json.loads((self.folder / RESULT).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None

    def _reap(self) -> None:
        proc = getattr(self, "_proc", None)
        if proc is not None:
            proc.poll()

    def state(self) -> str:
        """ "built", "failed", "running" or "lost" (its process is gone without a result)."""
        self._reap()
        result = self.result()
        if result is not None:
            return "built" if result.get("exit_code") == 0 else "failed"
        return "running" if _alive(self.record["pid"]) else "lost"

    def seconds(self) -> float:
        return time.time() - self.record["started_unix"]

    def wait(self, timeout_s: float, poll_s: float = 0.5) -> tuple[bool, str]:
        """(built, what happened), waiting at most `timeout_s` for the build."""
        deadline = time.monotonic() + max(timeout_s, 0.0)
        while (state := self.state()) == "running" and time.monotonic() < deadline:
            time.sleep(poll_s)
        text = self.log.read_text(encoding="utf-8", errors="replace") if self.log.is_file() else ""
        if state == "running":
            return (
                False,
                f"still building after {self.seconds():.0f} s (pid {self.record['pid']}, log {self.log})",
            )
        if state == "lost":
            return False, f"the build (pid {self.record['pid']}) ended without a result; log {self.log}"
        result = self.result() or {}
        if state == "failed":
            return False, f"build failed (exit {result.get('exit_code')}): {text[-600:]}"
        last = text.strip().splitlines()[-1] if text.strip() else ""
        return True, f"built in {result.get('seconds', 0):.0f} s: {last}"

    def stop(self) -> None:
        """End a running build (its whole process group); never one that already finished."""
        if self.state() == "running":
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.record["pid"], signal.SIGKILL)
            proc = getattr(self, "_proc", None)
            if proc is not None:
                proc.wait()


def main(argv: list[str] | None = None) -> int:
    """The wrapper: run the build command, then write result.json (exit code, seconds)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m tools.gpu.extension DIR -- COMMAND ...", file=sys.stderr)
        return 2
    folder, cmd = Path(argv[0]), argv[2:]
    start = time.monotonic()
    code = subprocess.run(cmd, stdin=subprocess.DEVNULL).returncode
    atomic_write_json(folder / RESULT, {"exit_code": code, "seconds": round(time.monotonic() - start, 1)})
    return code


if __name__ == "__main__":
    sys.exit(main())
