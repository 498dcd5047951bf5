"""Shared test configuration: GPU-marked tests skip without CUDA, or fail under `nox -s gpu`.

Under TRM_REQUIRE_GPU=1 (`nox -s gpu`, `nox -s gpu_acceptance`) a gpu-marked test may not skip at all: a
skip there (a missing extension via importorskip, a skipif) is reported as a failure, so a GPU run can
never pass by running nothing.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

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
            "test: install what it needs (docs/gpu-host-checks.md) or fix the host"
        )
    return report


@pytest.fixture(autouse=True)
def _offline_tracking(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test ever talks to W&B."""
    monkeypatch.setenv("WANDB_MODE", "disabled")


# Real external tools a test may start only under the marker that says so (fakes under tests/ are fine).
TOOL_MARKERS = {
    "docker": "docker",
    "kubectl": "kube",
    "kustomize": "kube",
    "nvidia-smi": "gpu",
    "torchrun": "dist",
}
TESTS_DIR = Path(__file__).resolve().parent


def started_tool(args: Any, env: dict[str, str] | None) -> str | None:
    """The guarded tool a Popen call starts (`python -m torch.distributed.run` counts as torchrun), unless
    the executable found is one of the suite's fakes."""
    argv = shlex.split(args) if isinstance(args, str) else [os.fspath(a) for a in args]
    if not argv:
        return None
    name = Path(argv[0]).name
    if name.startswith("python") and argv[1:3] == ["-m", "torch.distributed.run"]:
        return "torchrun"
    if name not in TOOL_MARKERS:
        return None
    path = (env or os.environ).get("PATH")
    found = argv[0] if os.sep in argv[0] else shutil.which(argv[0], path=path)
    if found and TESTS_DIR in Path(found).resolve().parents:
        return None  # a fake from tests/fixtures
    return name


@pytest.fixture(autouse=True)
def _external_tools_need_markers(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail a test that starts docker, kubectl, nvidia-smi or torchrun without the matching marker, so the
    default suite never depends on them by accident."""
    marks = {mark.name for mark in request.node.iter_markers()}
    real_init = subprocess.Popen.__init__

    def guarded_init(self: subprocess.Popen, args: Any, *rest: Any, **kwargs: Any) -> None:
        tool = started_tool(args, kwargs.get("env"))
        if tool is not None and TOOL_MARKERS[tool] not in marks:
            pytest.fail(
                f"{request.node.nodeid} starts {tool} but is not marked "
                f"@pytest.mark.{TOOL_MARKERS[tool]}: mark it, or use the fakes in tests/helpers.py"
            )
        real_init(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", guarded_init)
