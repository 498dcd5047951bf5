"""The test-suite parts on recorded outputs: junit counts, a skipped gpu test is a failure."""

from __future__ import annotations

from pathlib import Path

from tests.tools.gpu.check.helpers import fake_ctx
from tools.gpu.check import suite


def test_junit_counts(tmp_path: Path) -> None:
    xml = tmp_path / "j.xml"
    xml.write_text(
        '<testsuites><testsuite name="pytest" tests="9" failures="1" errors="0" skipped="2"/></testsuites>'
    )
    assert suite.junit_counts(xml) == {"tests": 9, "failures": 1, "errors": 0, "skipped": 2}
    assert suite.junit_counts(tmp_path / "missing.xml") == {}


def test_gpu_tests_part_fails_on_skips(tmp_path: Path, monkeypatch) -> None:
    def fake_run(cmd, ctx, *, timeout_s, log_name, env=None):
        assert env["TRM_REQUIRE_GPU"] == "1" and cmd[cmd.index("-m", 2) + 1] == "gpu and not adam_ext"
        # the host's own pytest plugins stay out (pytest-benchmark broke this part on an H100 host)
        assert env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1"
        assert f"not {suite.RESUME_TWIN_TEST}" in cmd  # the quick profile leaves out what `resume` repeats
        junit = next(c.split("=", 1)[1] for c in cmd if c.startswith("--junitxml="))
        Path(junit).write_text('<testsuite tests="11" failures="0" errors="0" skipped="1"/>')
        return 0, "10 passed, 1 skipped"

    monkeypatch.setattr(suite, "run_command", fake_run)
    outcome = suite.gpu_tests(fake_ctx(tmp_path))
    assert outcome.status == "fail" and outcome.data["skipped"] == 1
