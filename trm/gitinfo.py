"""The git commit of the running code: one lookup for checkpoints, the launcher's handoff, image builds
and the image banner.

Inside an image the commit comes from `TRM_IMAGE_GIT_SHA`, which docker/Dockerfile sets from the build
argument `GIT_SHA` (the checkout's HEAD, `-dirty` when tracked files differed). Outside an image it is
read from the git checkout the package was imported from. `unknown` when neither says.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

ENV_VAR = "TRM_IMAGE_GIT_SHA"
UNKNOWN = "unknown"
PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def checkout_sha(root: Path) -> str | None:
    """HEAD of the git checkout at `root`, with `-dirty` when tracked files differ; None outside git."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--"], cwd=root, timeout=30).returncode != 0
    except (OSError, subprocess.SubprocessError):
        return None
    return (sha + ("-dirty" if dirty else "")) if sha else None


def code_git_sha(env: Mapping[str, str] | None = None, root: Path | None = None) -> str:
    """The commit of the code that runs: $TRM_IMAGE_GIT_SHA (images), else the checkout's HEAD."""
    env = os.environ if env is None else env
    value = env.get(ENV_VAR, "").strip()
    if value and value != UNKNOWN:
        return value
    return checkout_sha(root or PACKAGE_ROOT) or UNKNOWN
