"""Execute the `bash cpu` blocks of every runbook, in order, against a fresh copy of the project.

The copy holds the repository's tracked and unignored files; `python -m trm` there imports that copy.
All runbooks share one `$WORKSPACE` (a temp dir), so a later runbook finds what an earlier one made
(the smoke run's checkpoints are what the monitoring and handoff runbooks look at). Within a runbook,
the blocks run in one bash process, so variables set in one block stay set for the next.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools.runbooks.runbook import Runbook, load_all
from tools.secrets.scan import repo_files
from trm.errors import TRMError
from trm.safe_remove import remove_own_temp

RUNBOOKS_DIR = Path("runbooks")


def copy_project(root: Path, dest: Path) -> Path:
    """Copy the repository's files (not its ignored build outputs) to `dest`."""
    for rel in repo_files(root):
        src = root / rel
        if not src.is_file():
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target, follow_symlinks=False)
    # A git repository of its own, so commands that read the commit (handoff) behave as in a clone.
    git = [
        "git",
        "-c",
        "user.name=runbooks",
        "-c",
        "user.email=runbooks@localhost",
        "-c",
        "commit.gpgsign=false",
    ]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "--allow-empty", "-m", "runbook test copy"]):
        subprocess.run([*git, *args], cwd=dest, check=True, capture_output=True)
    return dest


def script_for(book: Runbook) -> str:
    """One bash script of a runbook's cpu blocks, reporting the block that failed."""
    parts = [
        "set -euo pipefail",
        "__runbook_block=start",
        "trap 'echo \"runbook step failed: $__runbook_block\" >&2' ERR",
    ]
    for block in book.blocks_of("cpu"):
        parts.append(f"__runbook_block={shlex.quote(block.where)}")
        parts.append(f"echo {shlex.quote('::: ' + block.where)}")
        parts.append(block.code)
    return "\n".join(parts) + "\n"


def runbook_env(project: Path, workspace: Path) -> dict[str, str]:
    """The environment the blocks run in: this interpreter first on PATH, the copy on PYTHONPATH."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(project)
    env["WORKSPACE"] = str(workspace)
    env["WANDB_MODE"] = "disabled"
    env["TRM_RUNBOOK_TEST"] = "1"
    env.pop("WANDB_API_KEY", None)
    return env


def run_cpu_blocks(
    root: str | Path,
    *,
    names: list[str] | None = None,
    workdir: str | Path | None = None,
    timeout_s: float = 1800,
) -> list[tuple[str, float]]:
    """Run the cpu blocks; return (runbook, seconds) per runbook; raise TRMError at the first failure."""
    root = Path(root).resolve()
    books = load_all(root / RUNBOOKS_DIR)
    if names:
        unknown = sorted(set(names) - {b.name for b in books})
        if unknown:
            raise TRMError(f"no runbook named {', '.join(unknown)}; have {', '.join(b.name for b in books)}.")
        books = [b for b in books if b.name in names]
    owned = workdir is None
    base = Path(tempfile.mkdtemp(prefix="trm-runbooks-")) if owned else Path(workdir)
    timings = []
    try:
        project = copy_project(root, base / "project")
        workspace = base / "workspace"
        workspace.mkdir(parents=True, exist_ok=True)
        env = runbook_env(project, workspace)
        deadline = time.monotonic() + timeout_s
        for book in books:
            if not book.blocks_of("cpu"):
                timings.append((book.name, 0.0))
                continue
            print(
                f"::: runbook {book.name} v{book.version} ({len(book.blocks_of('cpu'))} cpu blocks)",
                flush=True,
            )
            start = time.monotonic()
            try:
                proc = subprocess.run(
                    ["bash", "-c", script_for(book)],
                    cwd=project,
                    env=env,
                    timeout=max(1.0, deadline - start),
                    check=False,
                )
            except subprocess.TimeoutExpired as err:
                raise TRMError(
                    f"runbook {book.name}: cpu blocks exceeded the {timeout_s:.0f} s budget."
                ) from err
            if proc.returncode != 0:
                raise TRMError(
                    f"runbook {book.name} ({book.path}): a cpu block failed with exit {proc.returncode} "
                    "(the failing block is printed above); fix the command or the runbook."
                )
            timings.append((book.name, time.monotonic() - start))
        return timings
    finally:
        if owned:
            remove_own_temp(base)
