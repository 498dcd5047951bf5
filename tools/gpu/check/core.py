"""What every part of the GPU check shares: its folders and names, a part's outcome, the context parts run
in, the part's definition, and running one command within a part's time limit."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tools.gpu.extension import ExtensionBuild

ROOT = Path(__file__).resolve().parents[3]
DEFAULT_OUT = Path("build/gpu-acceptance")
# Where the check finds the GPU kit (tools.gpu.kit writes it): the adam-atan2 sdist, an upstream checkout.
DEFAULT_KIT = Path("build/gpu-kit")
ADAM_SDIST = "adam_atan2-0.0.3.tar.gz"
UPSTREAM_DIR = "upstream"
DEFAULT_BUDGET_S = 540  # a 10-minute call, with a minute for starting and copying the report back
PROFILES = ("quick", "full")
STATUSES = ("pass", "fail", "error", "skip")
# Why a part was skipped: no CUDA device, not enough budget left, or not wanted on this host.
NO_GPU, NO_TIME, NOT_WANTED = "no-gpu", "time", "not-wanted"
OUTPUT_TAIL = 4000  # characters of each part's output kept in the report


@dataclasses.dataclass
class Outcome:
    """What one part found; `skipped` says why a skip happened (NO_GPU, NO_TIME or NOT_WANTED)."""

    status: str
    summary: str
    data: dict[str, Any] = dataclasses.field(default_factory=dict)
    output: str = ""
    skipped: str | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {STATUSES}")


@dataclasses.dataclass
class Context:
    """Where parts write, what they run with, and how long they may take."""

    out: Path
    work: Path
    python: str
    env: dict[str, str]
    profile: str = "quick"
    deadline: float = float("inf")  # time.monotonic() at which the budget ends
    require_extension: bool = False
    adam_sdist: Path | None = None
    extension: ExtensionBuild | None = None
    kit: Path = ROOT / DEFAULT_KIT
    # Where the extension is built; two calls share it (call 1 starts the build, call 2 picks it up).
    extension_dir: Path | None = None
    # Leave an unfinished build running when the check ends (call 1: call 2 reuses it).
    keep_extension_build: bool = False

    def __post_init__(self) -> None:
        if self.extension_dir is None:
            self.extension_dir = self.work / "extension"

    def seconds_left(self) -> float:
        return self.deadline - time.monotonic()

    def limit(self, part_limit_s: float) -> float:
        """A command's time limit: the part's own, cut to what is left of the budget."""
        return max(1.0, min(part_limit_s, self.seconds_left()))


@dataclasses.dataclass(frozen=True)
class Part:
    """One check: its name, a one-line description, its planned seconds on one H100 per profile, a hard
    limit, whether it needs a CUDA device, the function, and whether the check's verdict needs it (the plan
    must fit the budget with the required parts; the others run when time is left)."""

    name: str
    what: str
    planned_s: dict[str, int]
    limit_s: int
    run: Callable[[Context], Outcome]
    needs_cuda: bool = True
    required: bool = True


def tail(text: str, limit: int = OUTPUT_TAIL) -> str:
    return text if len(text) <= limit else "…" + text[-limit:]


def run_command(
    cmd: Sequence[str], ctx: Context, *, timeout_s: float, log_name: str, env: dict[str, str] | None = None
) -> tuple[int | None, str]:
    """Run `cmd` in its own process group, output to work/<log_name>; (exit code or None on timeout, output)."""
    log = ctx.work / log_name
    with open(log, "w", encoding="utf-8") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        proc = subprocess.Popen(
            list(cmd),
            stdout=f,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=env or ctx.env,
            start_new_session=True,
        )
        try:
            code: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
    return code, log.read_text(encoding="utf-8", errors="replace")


def upstream_checkout(env: dict[str, str], kit: Path = ROOT / DEFAULT_KIT) -> str | None:
    """TRM_UPSTREAM, else the GPU kit's upstream checkout when it has one."""
    if env.get("TRM_UPSTREAM"):
        return env["TRM_UPSTREAM"]
    kit_upstream = kit / UPSTREAM_DIR
    return str(kit_upstream) if kit_upstream.is_dir() else None
