"""`make help` lists every target that documents itself (a `## text` after its colon)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(
    shutil.which("make") is None or shutil.which("column") is None, reason="needs make and column"
)
def test_make_help_lists_every_documented_target() -> None:
    """Fails on the help rule that matched only letters, '_' and '-' (it left out test-e2e and gpu-run-1)."""
    documented = re.findall(r"^([^\s:#.][^\s:]*):[^\n]*## ", (ROOT / "Makefile").read_text(), re.M)
    assert {"test-e2e", "gpu-run-1", "test"} <= set(documented)
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    listed = {line.split()[0] for line in out.splitlines() if line.strip()}
    assert listed == set(documented)
