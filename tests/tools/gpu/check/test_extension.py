"""The extension-build part and the parts that require the extension, on CPU: built only from an sdist,
nvcc checked first, a build that outlives call 1, the requirement reaching every child."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from tests.e2e import test_train as e2e
from tests.tools.gpu.check.helpers import fake_ctx
from tools.gpu import extension as ext
from tools.gpu.check import core, curves, driver, probe, resume, step, suite
from tools.gpu.check import extension as check_ext
from tools.gpu.check import optimizer as opt


def test_the_extension_is_built_only_from_an_sdist_and_required_only_when_asked(tmp_path, monkeypatch):
    for module in (check_ext, opt):
        monkeypatch.setattr(module, "extension_imports", lambda python, env: False)
    ctx = fake_ctx(tmp_path)
    ctx.adam_sdist = tmp_path / "missing.tar.gz"
    outcome = check_ext.extension_build(ctx)
    assert (
        outcome.status == "skip" and outcome.skipped == core.NOT_WANTED and "make gpu-kit" in outcome.summary
    )
    ctx.require_extension = True
    assert check_ext.extension_build(ctx).status == "fail"
    # Not built and not required: the optimizer part records why and that training uses the torch backend.
    ctx.require_extension = False
    skipped = opt.optimizer(ctx)
    assert (
        skipped.status == "skip"
        and "torch backend" in skipped.summary
        and "install-adam-atan2" in skipped.summary
    )
    ctx.require_extension = True
    assert opt.optimizer(ctx).status == "fail"


def test_the_build_part_checks_nvcc_before_it_starts(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(check_ext, "extension_imports", lambda python, env: False)
    ctx = core.Context(
        out=tmp_path, work=tmp_path, python=sys.executable, env={"PATH": str(tmp_path / "empty")}
    )
    ctx.adam_sdist = tmp_path / "adam.tar.gz"
    ctx.adam_sdist.write_bytes(b"sdist")
    ctx.require_extension = True
    outcome = check_ext.extension_build(ctx)
    assert outcome.status == "fail" and outcome.summary.startswith("cannot build the extension: ")
    assert ctx.extension is None  # nothing started


def _sleeper(seconds: float, site: str) -> list[str]:
    code = f"import os, time; time.sleep({seconds}); os.makedirs({site!r}, exist_ok=True)"
    return [sys.executable, "-c", code]


def test_an_unfinished_build_outlives_call_1_and_call_2_picks_it_up(tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "extension"
    env = {**os.environ, "PYTHONPATH": str(core.ROOT)}
    build = ext.ExtensionBuild.start(folder, _sleeper(2.0, str(folder / "site")), env, core.ROOT)
    record = json.loads((folder / ext.BUILD).read_text())
    assert record["pid"] == build.record["pid"] and build.state() == "running"

    # Call 1 ends while it compiles: with keep_extension_build the build is left running and the report says so.
    ctx = core.Context(out=tmp_path / "call-1", work=tmp_path, python=sys.executable, env=env, extension_dir=folder,
                     keep_extension_build=True)  # fmt: skip
    ctx.extension = build
    report = driver.run_parts([], ctx, lambda r: None, budget_s=10, cuda=False, call=1)
    assert report["extension_build_left_running"] == {"pid": build.record["pid"], "folder": str(folder)}
    assert build.state() == "running"

    # Call 2 (another process in real life) finds it from its files, waits for it and uses it.
    found = ext.ExtensionBuild.find(folder)
    assert found is not None and found.picked_up and found.state() == "running"
    monkeypatch.setattr(check_ext, "extension_imports", lambda python, env: False)
    ctx2 = core.Context(out=tmp_path / "call-2", work=tmp_path, python=sys.executable, env=env, extension_dir=folder,
                      require_extension=True)  # fmt: skip
    outcome = check_ext.extension_build(ctx2)
    assert outcome.status == "pass" and outcome.data["picked_up"] and "picked up the build" in outcome.summary
    built, note = ctx2.extension.wait(30)
    assert built and note.startswith("built in "), note
    assert json.loads((folder / ext.RESULT).read_text())["exit_code"] == 0 and (folder / "site").is_dir()


def test_without_a_second_call_an_unfinished_build_is_stopped(tmp_path: Path) -> None:
    folder = tmp_path / "extension"
    env = {**os.environ, "PYTHONPATH": str(core.ROOT)}
    build = ext.ExtensionBuild.start(folder, _sleeper(60, str(folder / "site")), env, core.ROOT)
    ctx = core.Context(out=tmp_path, work=tmp_path, python=sys.executable, env=env, extension_dir=folder)
    ctx.extension = build
    report = driver.run_parts([], ctx, lambda r: None, budget_s=10, cuda=False)
    assert "extension_build_left_running" not in report
    deadline = time.monotonic() + 10
    while build.state() == "running" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert build.state() == "lost"  # killed: no result, no process


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
    monkeypatch.setattr(check_ext, "extension_imports", lambda python, env: site_on(env))

    def site_on(env: dict[str, str]) -> bool:
        return str(site) in env.get("PYTHONPATH", "").split(os.pathsep)

    seen: dict[str, dict[str, str]] = {}

    def fake_run(cmd, ctx, *, timeout_s, log_name, env=None):
        seen[log_name] = env
        if log_name == "gpu-tests.log":
            junit = next(c.split("=", 1)[1] for c in cmd if c.startswith("--junitxml="))
            Path(junit).write_text('<testsuite tests="17" failures="0" errors="0" skipped="0"/>')
        return 0, "17 passed"

    monkeypatch.setattr(suite, "run_command", fake_run)
    ctx = core.Context(out=tmp_path, work=tmp_path, python=sys.executable, env={"PATH": "/usr/bin:/bin"})
    ctx.extension = _Built(site)  # type: ignore[assignment]
    outcome = suite.gpu_tests(ctx)
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
    suite.gpu_tests(ctx)
    assert "TRM_REQUIRE_ADAM_EXT" not in seen["gpu-tests.log"]


def test_a_required_extension_that_is_not_ready_fails_the_gpu_tests_without_running_them(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(check_ext, "extension_imports", lambda python, env: False)
    for module in (suite, resume, probe, step, curves):
        monkeypatch.setattr(
            module, "run_command", lambda *a, **k: pytest.fail("the gpu tests ran on the torch backend")
        )

    class Failed(_Built):
        def wait(self, timeout_s: float) -> tuple[bool, str]:
            return False, "build failed (exit 1): nvcc fatal"

    # With an upstream checkout, so that the parts that compare with upstream's trainer get as far as the extension.
    ctx = fake_ctx(tmp_path, TRM_UPSTREAM=str(tmp_path / "upstream"))
    ctx.extension = Failed(tmp_path / "site")  # type: ignore[assignment]
    for part in (suite.gpu_tests, resume.resume, probe.probe, step.step_ab, curves.curves):
        outcome = part(ctx)
        assert outcome.status == "fail" and "build failed (exit 1): nvcc fatal" in outcome.summary, part
        assert outcome.summary.startswith("not run: ") and outcome.data == {"extension_required": True}, part
