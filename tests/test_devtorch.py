"""`make venv`'s torch step (trm.devtorch): the CPU build on any machine, offline fallback, no network."""

from __future__ import annotations

import subprocess

import pytest

from trm import devtorch


def never_called():
    raise AssertionError("the index must not be probed here")


def test_linux_takes_the_cpu_build_from_the_pytorch_index_when_it_answers():
    plan = devtorch.plan_install("2.13.0", None, lambda: True, platform="linux")
    # `+cpu` exists only on the CPU index, so pip cannot resolve PyPI's CUDA wheel instead
    assert plan.pip_args == ["install", "--extra-index-url", devtorch.CPU_INDEX, "torch==2.13.0+cpu"]
    assert not plan.warning


def test_unreachable_index_falls_back_to_the_plain_pin_and_warns():
    plan = devtorch.plan_install("2.13.0", None, lambda: False, platform="linux")
    assert plan.pip_args == ["install", "torch==2.13.0"]
    assert "CUDA build" in plan.warning and "PIP_FIND_LINKS" in plan.warning


def test_an_installed_cpu_build_is_kept_without_probing():
    plan = devtorch.plan_install("2.13.0", "2.13.0+cpu", never_called, platform="linux")
    assert plan.pip_args is None


def test_an_installed_cuda_build_is_replaced_by_the_cpu_build():
    plan = devtorch.plan_install("2.13.0", "2.13.0", lambda: True, platform="linux")
    assert plan.pip_args[-1] == "torch==2.13.0+cpu"


def test_macos_uses_pypi_whose_wheel_is_cpu():
    plan = devtorch.plan_install("2.13.0", None, never_called, platform="darwin")
    assert plan.pip_args == ["install", "torch==2.13.0"] and not plan.warning


def test_probe_fails_fast_when_nothing_answers():
    import socket

    with socket.socket() as sock:  # a loopback port that is bound but never accepts: refused, no traffic out
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        assert devtorch.probe_index(f"http://127.0.0.1:{port}/whl/cpu", timeout=1.0) is False


@pytest.mark.parametrize(("reachable", "expected"), [(True, "torch==2.13.0+cpu"), (False, "torch==2.13.0")])
def test_main_runs_pip_in_the_venv(capsys, reachable, expected):
    calls = []

    def run(cmd, check):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0)

    code = devtorch.main(
        ["--python", "/v/bin/python"], probe=lambda url: reachable, run=run, installed=lambda p: None
    )
    assert code == 0
    if devtorch.sys.platform == "linux":
        assert calls == [["/v/bin/python", "-m", "pip", *calls[0][3:-2], expected, "-q"]]
        assert calls[0][:4] == ["/v/bin/python", "-m", "pip", "install"]
    assert "devtorch: $ /v/bin/python -m pip install" in capsys.readouterr().out


def test_main_installs_with_uv_into_the_named_python_when_asked():
    calls = []

    def run(cmd, check):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0)

    code = devtorch.main(
        ["--python", "/v/bin/python", "--version", "2.10.0", "--uv", "/dev/bin/uv"],
        probe=lambda url: False,
        run=run,
        installed=lambda p: None,
    )
    assert code == 0
    if devtorch.sys.platform == "linux":
        assert calls == [
            ["/dev/bin/uv", "pip", "install", "torch==2.10.0", "--python", "/v/bin/python", "-q"]
        ]
