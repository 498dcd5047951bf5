"""Test helpers for the launch tooling: a fake `nvidia-smi` on PATH that replays recorded outputs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "nvidia_smi"
FAKE_SMI = FIXTURES / "fake-nvidia-smi"
SHAPES = [
    f"{model}x{n}"
    for model in ("h100", "h200", "a100-40g", "a100-80g", "l40s", "rtx4090")
    for n in (1, 2, 4, 8)
]


def fake_smi_env(tmp_path: Path, shape: str | None, base: dict[str, str] | None = None) -> dict[str, str]:
    """An environment whose PATH has a fake nvidia-smi for `shape` (None: no nvidia-smi at all)."""
    env = dict(base if base is not None else os.environ)
    bindir = tmp_path / "fake-bin"
    bindir.mkdir(exist_ok=True)
    link = bindir / "nvidia-smi"
    if link.exists() or link.is_symlink():
        link.unlink()
    # Keep python/torchrun reachable, but hide any real nvidia-smi that the host may have.
    path = [str(bindir)] + [
        p for p in env.get("PATH", "").split(os.pathsep) if p and not (Path(p) / "nvidia-smi").exists()
    ]
    if shape is not None:
        link.symlink_to(FAKE_SMI)
        env["FAKE_NVIDIA_SMI_DIR"] = str(FIXTURES / shape)
    env["PATH"] = os.pathsep.join(path)
    return env


def install_fake_smi(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, shape: str | None) -> dict[str, str]:
    """Put a fake nvidia-smi for `shape` (None: no nvidia-smi) on this process's PATH; returns the env."""
    env = fake_smi_env(tmp_path, shape)
    for key in ("PATH", "FAKE_NVIDIA_SMI_DIR"):
        if key in env:
            monkeypatch.setenv(key, env[key])
        else:
            monkeypatch.delenv(key, raising=False)
    return env
