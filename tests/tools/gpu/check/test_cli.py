"""The check's command line on CPU: the plan (--dry-run), the two calls of a loan, usage errors, and
`make gpu-check` starting the host's Python as it is."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import main_in_process
from tools.gpu.check import cli, core, driver, plan

ROOT = Path(__file__).resolve().parents[4]


_DRY_RUN_ENV = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}


def _dry_run(tmp_path: Path, *args: str, **env_extra: str) -> subprocess.CompletedProcess[str]:
    env = {**_DRY_RUN_ENV, **env_extra}
    return subprocess.run(
        [sys.executable, "-m", "tools.gpu.check", "--dry-run", "--kit", str(tmp_path / "no-kit"), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.e2e  # tens of seconds: out of the default suite, run by make test-e2e
def test_dry_run_prints_every_part_and_touches_nothing(tmp_path: Path) -> None:
    out = tmp_path / "report"
    proc = _dry_run(tmp_path, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    for part in plan.PARTS:
        assert f"  {part.name} " in proc.stdout
    assert f"report: {out / 'report.json'}" in proc.stdout
    assert "upstream: not compared (TRM_UPSTREAM unset" in proc.stdout
    # Every part in one call is more than one 10-minute call holds: the plan says so.
    required = driver.planned_total(plan.PARTS, "quick", required_only=True)
    assert required > core.DEFAULT_BUDGET_S and "does NOT fit: later parts will be skipped" in proc.stdout
    assert "eval " in proc.stdout and "[optional: runs when time is left]" in proc.stdout
    assert not out.exists()
    proc = _dry_run(tmp_path, "--only", "bench", TRM_UPSTREAM="/opt/upstream")
    assert proc.returncode == 0 and "1 part(s)" in proc.stdout and "upstream: /opt/upstream" in proc.stdout


def test_each_call_fits_the_budget_and_puts_the_proof_before_the_benches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    by_name = {p.name: p for p in plan.PARTS}
    monkeypatch.chdir(ROOT)
    for call, names in plan.CALLS.items():
        parts = [by_name[n] for n in names]
        required = driver.planned_total(parts, "quick", required_only=True)
        assert required <= core.DEFAULT_BUDGET_S == 540, (call, required)
        # _dry_run's command in this process (the e2e test above starts it): an interpreter a call costs 2 s
        argv = ["--dry-run", "--kit", str(tmp_path / "no-kit"), "--call", str(call)]
        proc = main_in_process(monkeypatch, capsys, cli.main, argv, _DRY_RUN_ENV)
        assert proc.returncode == 0, proc.stderr
        assert f"required parts {required} s (fits)" in proc.stdout
        assert f"report: {ROOT / 'build/gpu-acceptance' / f'call-{call}' / 'report.json'}" in proc.stdout
        assert f"call {call}: the extension is required" in proc.stdout
        # docs/gpu-host-checks.md states each call's plan: it must be this one
        assert f"| {required} s " in (ROOT / "docs" / "gpu-host-checks.md").read_text(), (call, required)
    # Call 1 proves (the gpu tests first of the GPU work, then the extension and training on it); call 2 measures.
    one, two = plan.CALLS[1], plan.CALLS[2]
    assert one.index("gpu-tests") < one.index("optimizer") < one.index("resume")
    assert one.index("kit") < one.index("imports") < one.index("extension-build") < one.index("gpu-tests")
    assert {"probe", "step-ab", "sdpa", "profile"} <= set(two) and not {"gpu-tests", "resume"} & set(two)
    order = [p.name for p in plan.PARTS]  # one call with every part: the proof before every bench
    assert max(order.index(n) for n in ("gpu-tests", "optimizer", "resume")) < min(
        order.index(n) for n in ("probe", "step-ab", "sdpa", "profile", "bench", "checkpoint", "eval")
    )


def test_unknown_part_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["--dry-run", "--only", "nope"])
    assert info.value.code == 2
    assert (
        "unknown part(s) nope; choose from facts, kit, imports, extension-build, collect, gpu-tests"
        in capsys.readouterr().err
    )


def test_make_gpu_check_runs_the_hosts_python_as_it_is() -> None:
    """`make gpu-check` starts the check with the given (host) Python and nothing else: no venv, no pip,
    so a host's own CUDA torch is never replaced; TRM_REQUIRE_GPU is the gpu-tests part's business."""
    proc = subprocess.run(
        ["make", "-n", "-s", "-C", str(ROOT), "gpu-check", "GPU_PYTHON=/opt/host/bin/python3", "ARGS=--budget-s 300"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    commands = [line for line in proc.stdout.splitlines() if not line.startswith("make")]
    assert commands == ["/opt/host/bin/python3 -m tools.gpu.check --budget-s 300"]


def test_both_calls_run_in_order_and_a_cpu_host_reports_every_cuda_part_as_no_gpu(
    tmp_path, monkeypatch
) -> None:
    """The simulated loan: call 1, then call 2, each writing its own report; on CPU only the CUDA parts skip."""
    from tools.gpu import kit as gpu_kit

    monkeypatch.setattr(cli, "cuda_available", lambda: False)
    ran: list[str] = []

    def fake(name: str):
        def run(ctx: core.Context) -> core.Outcome:
            ran.append(name)
            assert ctx.require_extension  # a call insists on the extension
            return core.Outcome("pass", f"{name} ok")

        return run

    parts = tuple(dataclasses.replace(p, run=fake(p.name)) for p in plan.PARTS)
    cuda = {p.name for p in parts if p.needs_cuda}
    for call in (1, 2):
        out = tmp_path / f"call-{call}"
        assert cli.main(["--call", str(call), "--out", str(out)], parts=parts) == 3
        report = json.loads((out / "report.json").read_text())
        assert report["call"] == call and [p["name"] for p in report["parts"]] == list(plan.CALLS[call])
        assert gpu_kit.check_simulated_report(report, cuda) == []
        assert report["status_reason"].startswith("skipped: no GPU: ")
    assert ran == [n for c in (1, 2) for n in plan.CALLS[c] if n not in cuda]
