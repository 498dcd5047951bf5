from __future__ import annotations

import json
import subprocess
import sys

import trm


def test_version_command_prints_json():
    out = subprocess.run(
        [sys.executable, "-m", "trm", "version", "--json"], check=True, capture_output=True, text=True
    ).stdout
    versions = json.loads(out)
    assert versions["trm"] == trm.__version__
    assert versions["torch"].startswith("2.13.0")


def test_unknown_command_fails_with_usage():
    proc = subprocess.run([sys.executable, "-m", "trm", "no-such-command"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "invalid choice" in proc.stderr
