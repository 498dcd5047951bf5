"""The check's shared plumbing: a command killed with its process group at its time limit."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tools.gpu.check import core


def test_run_command_kills_the_whole_process_group_on_timeout(tmp_path: Path) -> None:
    ctx = core.Context(out=tmp_path, work=tmp_path, python=sys.executable, env={"PATH": "/usr/bin:/bin"})
    start = time.monotonic()
    code, output = core.run_command(
        ["bash", "-c", "echo started; sleep 30 & wait"], ctx, timeout_s=1.0, log_name="t.log"
    )
    assert code is None and time.monotonic() - start < 10
    assert output.startswith("$ bash -c") and "started" in output
