"""Shared test configuration: GPU-marked tests skip without CUDA, or fail under `nox -s gpu`.

Under TRM_REQUIRE_GPU=1 (`nox -s gpu`, `nox -s gpu_acceptance`) a gpu-marked test may not skip at all: a
skip there (a missing extension via importorskip, a skipif) is reported as a failure, so a GPU run can
never pass by running nothing.
"""

from __future__ import annotations

import os

import pytest


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items or _cuda_available():
        return
    if gpu_required():
        raise pytest.UsageError(
            "TRM_REQUIRE_GPU=1 but torch sees no CUDA GPU: run `nox -s gpu` on a GPU host or inside a GPU "
            "image (docker run --gpus all …), and check `nvidia-smi`."
        )
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run `nox -s gpu` on a GPU host)")
    for item in gpu_items:
        item.add_marker(skip)


def gpu_required() -> bool:
    return os.environ.get("TRM_REQUIRE_GPU") == "1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    outcome = yield
    report = outcome.get_result()
    if report.skipped and gpu_required() and item.get_closest_marker("gpu"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = (
            f"TRM_REQUIRE_GPU=1: gpu test {item.nodeid} was skipped ({reason}); a GPU run must run every gpu "
            "test: install what it needs (README: GPU host checks) or fix the host"
        )
    return report


@pytest.fixture(autouse=True)
def _offline_tracking(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test ever talks to W&B."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
