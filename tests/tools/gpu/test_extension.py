"""The extension build of the GPU check on CPU: its prerequisites (nvcc, of torch's CUDA major), a build that
outlives call 1 and that call 2 picks up, and the requirement (TRM_REQUIRE_ADAM_EXT) reaching every child."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from tests.e2e import test_train as e2e
from tools.gpu import check as ga
from tools.gpu import extension as ext


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


def test_the_build_part_checks_nvcc_before_it_starts(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(ga, "extension_imports", lambda python, env: False)
    ctx = ga.Context(
        out=tmp_path, work=tmp_path, python=sys.executable, env={"PATH": str(tmp_path / "empty")}
    )
    ctx.adam_sdist = tmp_path / "adam.tar.gz"
    ctx.adam_sdist.write_bytes(b"sdist")
    ctx.require_extension = True
    outcome = ga.extension_build(ctx)
    assert outcome.status == "fail" and outcome.summary.startswith("cannot build the extension: ")
    assert ctx.extension is None  # nothing started


def _sleeper(seconds: float, site: str) -> list[str]:
    code = f"import os, time; time.sleep({seconds}); os.makedirs({site!r}, exist_ok=True)"
    return [sys.executable, "-c", code]


def test_an_unfinished_build_outlives_call_1_and_call_2_picks_it_up(tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "extension"
    env = {**os.environ, "PYTHONPATH": str(ga.ROOT)}
    build = ext.ExtensionBuild.start(folder, _sleeper(2.0, str(folder / "site")), env, ga.ROOT)
    record = json.loads((folder / ext.BUILD).read_text())
    assert record["pid"] == build.record["pid"] and build.state() == "running"

    # Call 1 ends while it compiles: with keep_extension_build the build is left running and the report says so.
    ctx = ga.Context(out=tmp_path / "call-1", work=tmp_path, python=sys.executable, env=env, extension_dir=folder,
                     keep_extension_build=True)  # fmt: skip
    ctx.extension = build
    report = ga.run_parts([], ctx, lambda r: None, budget_s=10, cuda=False, call=1)
    assert report["extension_build_left_running"] == {"pid": build.record["pid"], "folder": str(folder)}
    assert build.state() == "running"

    # Call 2 (another process in real life) finds it from its files, waits for it and uses it.
    found = ext.ExtensionBuild.find(folder)
    assert found is not None and found.picked_up and found.state() == "running"
    monkeypatch.setattr(ga, "extension_imports", lambda python, env: False)
    ctx2 = ga.Context(out=tmp_path / "call-2", work=tmp_path, python=sys.executable, env=env, extension_dir=folder,
                      require_extension=True)  # fmt: skip
    outcome = ga.extension_build(ctx2)
    assert outcome.status == "pass" and outcome.data["picked_up"] and "picked up the build" in outcome.summary
    built, note = ctx2.extension.wait(30)
    assert built and note.startswith("built in "), note
    assert json.loads((folder / ext.RESULT).read_text())["exit_code"] == 0 and (folder / "site").is_dir()


def test_without_a_second_call_an_unfinished_build_is_stopped(tmp_path: Path) -> None:
    folder = tmp_path / "extension"
    env = {**os.environ, "PYTHONPATH": str(ga.ROOT)}
    build = ext.ExtensionBuild.start(folder, _sleeper(60, str(folder / "site")), env, ga.ROOT)
    ctx = ga.Context(out=tmp_path, work=tmp_path, python=sys.executable, env=env, extension_dir=folder)
    ctx.extension = build
    report = ga.run_parts([], ctx, lambda r: None, budget_s=10, cuda=False)
    assert "extension_build_left_running" not in report
    deadline = time.monotonic() + 10
    while build.state() == "running" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert build.state() == "lost"  # killed: no result, no process


def test_a_failed_build_is_reported_with_its_log(tmp_path: Path) -> None:
    folder = tmp_path / "extension"
    cmd = [sys.executable, "-c", "import sys; print('nvcc fatal: unsupported gpu architecture'); sys.exit(1)"]
    build = ext.ExtensionBuild.start(folder, cmd, {**os.environ, "PYTHONPATH": str(ga.ROOT)}, ga.ROOT)
    built, note = build.wait(30)
    assert not built and note.startswith("build failed (exit 1)") and "unsupported gpu architecture" in note


class _Built:
    """A finished build whose site is on disk (what ExtensionBuild gives the parts)."""

    def __init__(self, site: Path) -> None:
        site.mkdir(parents=True, exist_ok=True)
        self.site = site

    def wait(self, timeout_s: float) -> tuple[bool, str]:
        return True, "built in 70 s"


def test_the_gpu_tests_and_training_require_the_extension_built_in_this_run(
    tmp_path: Path, monkeypatch
) -> None:
    site = tmp_path / "extension" / "site"
    monkeypatch.setattr(ga, "extension_imports", lambda python, env: site_on(env))

    def site_on(env: dict[str, str]) -> bool:
        return str(site) in env.get("PYTHONPATH", "").split(os.pathsep)

    seen: dict[str, dict[str, str]] = {}

    def fake_run(cmd, ctx, *, timeout_s, log_name, env=None):
        seen[log_name] = env
        if log_name == "gpu-tests.log":
            junit = next(c.split("=", 1)[1] for c in cmd if c.startswith("--junitxml="))
            Path(junit).write_text('<testsuite tests="17" failures="0" errors="0" skipped="0"/>')
        return 0, "17 passed"

    monkeypatch.setattr(ga, "run_command", fake_run)
    ctx = ga.Context(out=tmp_path, work=tmp_path, python=sys.executable, env={"PATH": "/usr/bin:/bin"})
    ctx.extension = _Built(site)  # type: ignore[assignment]
    outcome = ga.gpu_tests(ctx)
    assert outcome.status == "pass" and outcome.data["extension_required"], outcome
    env = seen["gpu-tests.log"]
    assert env["TRM_REQUIRE_ADAM_EXT"] == "1" and site_on(env) and env["TRM_REQUIRE_GPU"] == "1"
    # The e2e trainer subprocesses the gpu tests start rebuild their environment: the extension and the
    # requirement still reach them (the checkout first, then what was on PYTHONPATH).
    monkeypatch.setattr(os, "environ", {**env})
    child = e2e.env()
    assert child["TRM_REQUIRE_ADAM_EXT"] == "1"
    assert child["PYTHONPATH"].split(os.pathsep)[:2] == [str(e2e.ROOT), str(site)]
    # No build in this run and not asked for: nothing is required (hosts without nvcc train on torch).
    ctx.extension = None
    ga.gpu_tests(ctx)
    assert "TRM_REQUIRE_ADAM_EXT" not in seen["gpu-tests.log"]


def test_a_required_extension_that_is_not_ready_fails_the_gpu_tests_without_running_them(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(ga, "extension_imports", lambda python, env: False)
    monkeypatch.setattr(
        ga, "run_command", lambda *a, **k: pytest.fail("the gpu tests ran on the torch backend")
    )

    class Failed(_Built):
        def wait(self, timeout_s: float) -> tuple[bool, str]:
            return False, "build failed (exit 1): nvcc fatal"

    ctx = ga.Context(out=tmp_path, work=tmp_path, python=sys.executable, env={"PATH": "/usr/bin:/bin"})
    ctx.extension = Failed(tmp_path / "site")  # type: ignore[assignment]
    for part in (ga.gpu_tests, ga.resume, ga.probe):
        outcome = part(ctx)
        assert outcome.status == "fail" and "build failed (exit 1): nvcc fatal" in outcome.summary, part
