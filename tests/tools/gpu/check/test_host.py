"""The host parts: the torch versions the check accepts."""

from __future__ import annotations

from tools.gpu.check import host


def test_the_host_torch_version_range() -> None:
    assert all(host.torch_supported(v) for v in ("2.10.0+cu128", "2.11.0+cu130", "2.13.0", "2.12.1+cpu"))
    assert not any(host.torch_supported(v) for v in ("2.9.1+cu128", "2.14.0", "garbage"))
