"""What the GPU check's part tests share: a context that runs nothing on a GPU and has no kit."""

from __future__ import annotations

import sys
from pathlib import Path

from tools.gpu.check.core import Context


def fake_ctx(tmp_path: Path, **env: str) -> Context:
    """A part's context writing under `tmp_path`, with a bare PATH plus `env` and no GPU kit."""
    return Context(
        out=tmp_path, work=tmp_path, python=sys.executable, env={"PATH": "/usr/bin:/bin", **env},
        kit=tmp_path / "no-kit",
    )  # fmt: skip
