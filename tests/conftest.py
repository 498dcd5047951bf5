"""Shared test configuration: GPU-marked tests skip without CUDA, or fail under `nox -s gpu`."""

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
    if os.environ.get("TRM_REQUIRE_GPU") == "1":
        raise pytest.UsageError(
            "TRM_REQUIRE_GPU=1 but torch sees no CUDA GPU: run `nox -s gpu` on a GPU host or inside a GPU "
            "image (docker run --gpus all …), and check `nvidia-smi`."
        )
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run `nox -s gpu` on a GPU host)")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture(autouse=True)
def _offline_tracking(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test ever talks to W&B."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
