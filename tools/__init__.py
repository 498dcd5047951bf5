"""Repository tooling, run from a source checkout and never shipped in the wheel: runbooks, Kubernetes and
SkyPilot jobs, image builds and pins, releases, the secret scan, benchmarks and the GPU host check.

Imports point one way: tools/ may import trm/, trm/ never imports tools/ (tests/test_import_layers.py).
"""

from __future__ import annotations

import os
from pathlib import Path

# The checkout tools/ runs from: `python -m tools.…` in a child process finds the package through it.
CHECKOUT = Path(__file__).resolve().parents[1]


def checkout_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) with the checkout first on PYTHONPATH, for a child process that runs
    `python -m tools.…` from another directory (the wheel installs trm/ only, never tools/)."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(CHECKOUT), env.get("PYTHONPATH", "")) if p)
    return env
