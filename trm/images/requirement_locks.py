"""Where the hash-locked requirement files are: `docker/requirements/{runtime,build}-<lock>.txt`.

One fact shared by two sides: the build host resolves and builds from them (tools.images.requirements),
and a published checkpoint names the runtime lock it trained with (trm.hub.publish).
"""

from __future__ import annotations

from pathlib import Path

REQUIREMENTS_DIR = Path("docker/requirements")


def runtime_lock(root: Path, lock: str) -> Path:
    return root / REQUIREMENTS_DIR / f"runtime-{lock}.txt"


def build_lock(root: Path, lock: str) -> Path:
    return root / REQUIREMENTS_DIR / f"build-{lock}.txt"
