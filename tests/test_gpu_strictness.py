"""Under TRM_REQUIRE_GPU=1 a skipped gpu test is a failure (`nox -s gpu` cannot pass by running nothing)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

INNER_CONFTEST = f"""
import importlib.util

_spec = importlib.util.spec_from_file_location("trm_tests_conftest", {str(TESTS / "conftest.py")!r})
_ours = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_ours)
pytest_runtest_makereport = _ours.pytest_runtest_makereport  # the hook under test, without the CUDA check
"""

INNER_TESTS = """
import pytest

@pytest.mark.gpu
def test_needs_an_extension():
    pytest.importorskip("no_such_extension_module")

@pytest.mark.gpu
@pytest.mark.skipif(True, reason="skipif on a gpu test")
def test_skipif():
    pass

def test_cpu_skip_is_still_a_skip():
    pytest.skip("not a gpu test")
"""


def run_inner(tmp_path: Path, require: bool) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(INNER_CONFTEST)
    (tmp_path / "test_inner.py").write_text(INNER_TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: needs a CUDA GPU\n")
    env = {k: v for k, v in os.environ.items() if k != "TRM_REQUIRE_GPU"}
    if require:
        env["TRM_REQUIRE_GPU"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "--tb=long", "-p", "no:cacheprovider", "-p", "no:xdist", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize("require", [True, False])
def test_skipped_gpu_tests_fail_only_when_a_gpu_is_required(tmp_path: Path, require: bool) -> None:
    proc = run_inner(tmp_path, require)
    out = proc.stdout
    if require:
        assert proc.returncode == 1, out
        # importorskip in the test body fails the test; a skipif fails its setup (reported as an error).
        assert "1 failed, 1 skipped, 1 error" in out, out
        assert "was skipped (Skipped: could not import 'no_such_extension_module'" in out, out
        assert "was skipped (Skipped: skipif on a gpu test)" in out, out
    else:
        assert proc.returncode == 0 and "3 skipped" in out, out
