"""The accelerator checks on CPU: the fp32 matmul precision is set through torch's current API, only inside
the check, and restored after it (pytest runs with warnings as errors, so a deprecated flag would fail)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from trm.launch.host.gpu_checks import ieee_fp32_matmul, matmul_check

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def tf32_matmuls():
    """fp32 CUDA matmuls set to TF32 before the test, torch's default after it."""
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    matmul.fp32_precision = "tf32"
    yield
    matmul.fp32_precision = before


def test_ieee_matmul_block_is_scoped_and_restored(tf32_matmuls) -> None:
    with ieee_fp32_matmul():
        assert torch.backends.cuda.matmul.fp32_precision == "ieee"
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"
    with pytest.raises(RuntimeError, match="boom"), ieee_fp32_matmul():
        raise RuntimeError("boom")
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"


def test_matmul_check_leaves_the_process_precision_alone(tf32_matmuls) -> None:
    result = matmul_check("cpu", size=64, bench_size=64, repeats=1)
    assert result.ok and result.uuid == "cpu"
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"


def test_no_module_sets_the_legacy_tf32_flags() -> None:
    """torch >= 2.9 warns on `allow_tf32` (an error under filterwarnings=error) and it is process-wide."""
    legacy = re.compile(r"\ballow_tf32\s*=|allowTF32")
    offenders = [
        str(p.relative_to(ROOT)) for p in sorted((ROOT / "trm").rglob("*.py")) if legacy.search(p.read_text())
    ]
    assert offenders == []
