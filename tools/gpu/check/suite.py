"""The test-suite parts: `collect` (the suite collects on this host) and `gpu-tests` (the `gpu`-marked
tests with a skip counted as a failure, on the extension when it is required)."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from tools.gpu.check.core import Context, Outcome, run_command, tail
from tools.gpu.check.extension import part_env
from trm.optim.backend import REQUIRE_EXTENSION_ENV

# The gpu test that runs the same SIGTERM/resume flow as the `resume` part: the quick profile leaves it out.
RESUME_TWIN_TEST = "test_cuda_run_is_bf16_compiled_evaluates_and_resumes_to_the_same_end"
# pytest-xdist workers for the gpu tests (each module in one worker, --dist loadfile): the tests are mostly
# compilation, which is CPU work; one worker where the host has fewer than 8 cores.
GPU_TEST_WORKERS = 4
GPU_TESTS_LIMIT_S = 600


def pytest_command(ctx: Context, *args: str, workers: int = 1) -> list[str]:
    """pytest with only the plugins the suite uses: a host Python's own plugins (pytest-benchmark, seen on
    an H100 host, errors out beside xdist under our warnings-as-errors) are not loaded; see PYTEST_ENV."""
    cmd = [ctx.python, "-m", "pytest", "-p", "no:cacheprovider", *args]
    if workers > 1:
        cmd += ["-p", "xdist.plugin", "-n", str(workers), "--dist", "loadfile"]
    return [*cmd, "tests"]


# The environment of every pytest the check starts (with pytest_command).
PYTEST_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def collect(ctx: Context) -> Outcome:
    env = {k: v for k, v in ctx.env.items() if k != "TRM_REQUIRE_GPU"}  # collecting needs no GPU
    env.update(PYTEST_ENV)
    cmd = pytest_command(ctx, "--collect-only", "-q", "-rs", "-m", "gpu")
    code, output = run_command(cmd, ctx, timeout_s=ctx.limit(180), log_name="collect.log", env=env)
    gpu_tests = sum(
        1 for line in output.splitlines() if "::" in line and not line.startswith(("SKIPPED", "ERROR"))
    )
    skipped = [line for line in output.splitlines() if line.startswith("SKIPPED")]
    data = {"gpu_tests": gpu_tests, "module_skips": skipped}
    if code is None:
        return Outcome("error", "collection timed out", data, tail(output))
    if code != 0 or skipped or gpu_tests == 0:
        why = f"pytest exit {code}" + (f"; {len(skipped)} module(s) skipped as a whole" if skipped else "")
        return Outcome("fail", f"the test suite does not collect cleanly here ({why})", data, tail(output))
    return Outcome("pass", f"the suite collects; {gpu_tests} gpu test(s)", data)


def gpu_tests(ctx: Context) -> Outcome:
    junit = ctx.work / "gpu-tests.xml"
    select = "gpu and not adam_ext"  # the extension's own tests run in `optimizer`, once it is built
    args = ["-m", select, "-q", "-rA", f"--junitxml={junit}"]
    if ctx.profile == "quick":
        args += ["-k", f"not {RESUME_TWIN_TEST}"]
    workers = GPU_TEST_WORKERS if (os.cpu_count() or 1) >= 8 else 1
    cmd = pytest_command(ctx, *args, workers=workers)
    env = part_env(ctx)
    if isinstance(env, Outcome):
        return env
    limit = ctx.limit(GPU_TESTS_LIMIT_S)
    code, output = run_command(
        cmd,
        ctx,
        timeout_s=limit,
        log_name="gpu-tests.log",
        env={**env, **PYTEST_ENV, "TRM_REQUIRE_GPU": "1"},
    )
    if code is None:
        return Outcome("error", f"timed out after {limit:.0f} s", output=tail(output))
    counts: dict[str, Any] = junit_counts(junit)
    required = env.get(REQUIRE_EXTENSION_ENV) == "1"
    summary = ", ".join(f"{v} {k}" for k, v in counts.items()) or "no junit report"
    summary += "; AdamATan2 on CUDA: the extension, required" if required else "; extension not required"
    counts["extension_required"] = required
    ok = code == 0 and counts.get("tests", 0) > 0 and counts.get("skipped", 0) == 0
    return Outcome("pass" if ok else "fail", f"pytest exit {code}: {summary}", counts, tail(output))


def junit_counts(path: Path) -> dict[str, int]:
    """tests / failures / errors / skipped summed over a junit XML file's test suites."""
    if not path.is_file():
        return {}
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    return {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
