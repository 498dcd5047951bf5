"""The background extension build (tools.gpu.extension) on CPU: its prerequisites (nvcc, of torch's CUDA
major, able to target the GPU) and a failed build reported with its log. The check's part that starts it,
and the parts that require it, are tested in tests/tools/gpu/check/test_extension.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tools.gpu import extension as ext

ROOT = Path(__file__).resolve().parents[3]


def _fake_nvcc(folder: Path, release: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    nvcc = folder / "nvcc"
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.1'\n")
    nvcc.chmod(0o755)
    return nvcc


def test_prerequisites_name_what_is_missing_and_the_fix(tmp_path: Path) -> None:
    bare = {"PATH": str(tmp_path / "empty")}
    missing = ext.prerequisite_problem(bare, "13.0")
    assert missing is not None and missing.startswith("no nvcc on PATH: install CUDA 13.x's nvcc")
    assert "\n" not in missing and "set CUDA_HOME" in missing
    old = _fake_nvcc(tmp_path / "cuda12" / "bin", "12.8")
    wrong = ext.prerequisite_problem({"PATH": str(old.parent)}, "13.0")
    assert wrong == (
        f"{old} is CUDA 12.8, torch's CUDA is 13.0: install CUDA 13.x's nvcc (torch 13.0 was built with CUDA 13)"
        " and put its bin/ on PATH, or set CUDA_HOME to that toolkit"
    )
    new = _fake_nvcc(tmp_path / "cuda13" / "bin", "13.0")
    assert (
        ext.prerequisite_problem({"PATH": str(old.parent), "CUDA_HOME": str(new.parent.parent)}, "13.0")
        is None
    )
    home = ext.prerequisite_problem({"PATH": "", "CUDA_HOME": str(tmp_path / "none")}, "13.0")
    assert home is not None and home.startswith(f"CUDA_HOME={tmp_path / 'none'} has no bin/nvcc")
    assert "CUDA build of torch" in (ext.prerequisite_problem(bare, None) or "")


def test_a_blackwell_gpu_needs_an_nvcc_that_targets_it(tmp_path: Path) -> None:
    """CUDA 12.8 is the first nvcc with sm_100/sm_120: a CUDA 12.6 nvcc next to a CUDA 12 torch passed the
    major check before and failed inside nvcc ('Unsupported gpu architecture')."""
    old = _fake_nvcc(tmp_path / "cuda126" / "bin", "12.6")
    problem = ext.prerequisite_problem({"PATH": str(old.parent)}, "12.8", "10.0")
    assert problem == (
        f"{old} is CUDA 12.6, which cannot compile for compute capability 10.0 (first in CUDA 12.8): install "
        "CUDA 12.8+'s nvcc of the same major as torch (12.8), or run the GPU check from the image of these GPUs "
        "(docs/images.md)"
    )
    assert ext.prerequisite_problem({"PATH": str(old.parent)}, "12.8", "9.0") is None  # Hopper: any CUDA 12
    new = _fake_nvcc(tmp_path / "cuda13" / "bin", "13.0")
    assert ext.prerequisite_problem({"PATH": str(new.parent)}, "13.0", "12.0") is None


def test_a_failed_build_is_reported_with_its_log(tmp_path: Path) -> None:
    folder = tmp_path / "extension"
    cmd = [sys.executable, "-c", "import sys; print('nvcc fatal: unsupported gpu architecture'); sys.exit(1)"]
    build = ext.ExtensionBuild.start(folder, cmd, {**os.environ, "PYTHONPATH": str(ROOT)}, ROOT)
    built, note = build.wait(30)
    assert not built and note.startswith("build failed (exit 1)") and "unsupported gpu architecture" in note
