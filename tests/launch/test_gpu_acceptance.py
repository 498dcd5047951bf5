"""The GPU acceptance runner on CPU: the plan (--dry-run), the report with fake parts, the parsers."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trm.launch import gpu_acceptance as ga

ROOT = Path(__file__).resolve().parents[2]


def test_dry_run_prints_every_part_and_touches_nothing(tmp_path: Path) -> None:
    out = tmp_path / "report"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "trm.launch.gpu_acceptance", "--dry-run", "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for name in ("facts", "gpu-tests", "optimizer", "resume", "probe", "bench"):
        assert f"  {name} " in proc.stdout
    assert f"report: {out / 'report.json'}" in proc.stdout
    assert "upstream: not compared (TRM_UPSTREAM unset)" in proc.stdout
    assert not out.exists()
    proc = subprocess.run(
        [sys.executable, "-m", "trm.launch.gpu_acceptance", "--dry-run", "--only", "bench"],
        cwd=ROOT, env={**env, "TRM_UPSTREAM": "/opt/upstream"}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0 and "1 part(s)" in proc.stdout and "upstream: /opt/upstream" in proc.stdout


def test_unknown_part_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        ga.main(["--dry-run", "--only", "nope"])
    assert info.value.code == 2
    assert "unknown part(s) nope; choose from facts, gpu-tests" in capsys.readouterr().err


def _fake_parts(seen: list[str]) -> tuple[ga.Part, ...]:
    def passing(ctx: ga.Context) -> ga.Outcome:
        seen.append("pass")
        assert (ctx.out / "report.json").exists() is False  # the first part runs before any report exists
        return ga.Outcome("pass", "all good", {"max_abs_diff": 0.0}, "out | with a pipe")

    def failing(ctx: ga.Context) -> ga.Outcome:
        seen.append("fail")
        # The report of the parts so far is already on disk when the next one runs.
        assert json.loads((ctx.out / "report.json").read_text())["parts"][0]["status"] == "pass"
        return ga.Outcome("fail", "peak 90 % of VRAM")

    def crashing(ctx: ga.Context) -> ga.Outcome:
        seen.append("error")
        raise RuntimeError("CUDA error: an illegal memory access")

    def skipped(ctx: ga.Context) -> ga.Outcome:
        seen.append("skip")
        return ga.Outcome("skip", "upstream not requested")

    return (
        ga.Part("one", "a passing part", 5, passing),
        ga.Part("two", "a failing part", 5, failing),
        ga.Part("three", "a crashing part", 5, crashing),
        ga.Part("four", "a skipped part", 5, skipped),
    )


def test_report_records_every_part_and_is_written_atomically(tmp_path: Path) -> None:
    seen: list[str] = []
    out = tmp_path / "gpu-acceptance"
    assert ga.main(["--out", str(out)], parts=_fake_parts(seen)) == 1
    assert seen == ["pass", "fail", "error", "skip"]  # a failure or crash does not stop the others
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "fail"
    assert [(p["name"], p["status"]) for p in report["parts"]] == [
        ("one", "pass"), ("two", "fail"), ("three", "error"), ("four", "skip"),
    ]  # fmt: skip
    crash = report["parts"][2]
    assert crash["summary"] == "RuntimeError: CUDA error: an illegal memory access"
    assert "Traceback" in crash["output"] and "crashing" in crash["output"]
    assert report["tolerances"]["resume_atol"] == ga.RESUME_ATOL and "seconds" in report
    md = (out / "report.md").read_text()
    assert md.startswith("# GPU acceptance: FAIL")
    assert "| one | pass |" in md and "| three | error |" in md and "out | with a pipe" in md
    assert '"max_abs_diff": 0.0' in md and "## two: fail" in md
    leftovers = [p.name for p in out.iterdir() if p.name not in ("report.json", "report.md", "work")]
    assert leftovers == []


def test_passing_and_skipped_parts_exit_0(tmp_path: Path) -> None:
    seen: list[str] = []
    parts = _fake_parts(seen)
    assert ga.main(["--out", str(tmp_path), "--only", "one", "four"], parts=parts) == 0
    assert json.loads((tmp_path / "report.json").read_text())["status"] == "pass"
    with pytest.raises(ValueError, match="status 'maybe'"):
        ga.Outcome("maybe", "")


def test_run_command_kills_the_whole_process_group_on_timeout(tmp_path: Path) -> None:
    ctx = ga.Context(out=tmp_path, work=tmp_path, python=sys.executable, env={"PATH": "/usr/bin:/bin"})
    start = time.monotonic()
    code, output = ga.run_command(
        ["bash", "-c", "echo started; sleep 30 & wait"], ctx, timeout_s=1.0, log_name="t.log"
    )
    assert code is None and time.monotonic() - start < 10
    assert output.startswith("$ bash -c") and "started" in output


def test_bench_output_parsing() -> None:
    output = "\n".join(
        [
            "config=paper device=cuda threads=16 batch=192 seq=916 hidden=512 H=3 L=4 layers=2 dtype=bfloat16",
            "ours/eager              412.3 ms/step   2.43 steps/s (first step 3.1 s) mfu=21.5%",
            "upstream/eager          530.0 ms/step   1.89 steps/s (first step 3.4 s) mfu=16.7%",
            "ours/compiled           301.9 ms/step   3.31 steps/s (first step 48.2 s) mfu=29.4%",
            "speedup eager: 1.29x vs upstream",
        ]
    )
    parsed = ga.parse_bench(output)
    assert parsed["variants"]["ours/compiled"] == {"ms_per_step": 301.9, "steps_per_s": 3.31, "mfu": 0.294}
    assert parsed["variants"]["upstream/eager"]["mfu"] == pytest.approx(0.167)
    assert parsed["speedup_vs_upstream"] == {"eager": 1.29}
    no_peak = ga.parse_bench("ours/eager   10.0 ms/step 100.00 steps/s (first step 0.1 s)")
    assert no_peak["variants"]["ours/eager"]["mfu"] is None


def test_junit_counts(tmp_path: Path) -> None:
    xml = tmp_path / "j.xml"
    xml.write_text(
        '<testsuites><testsuite name="pytest" tests="9" failures="1" errors="0" skipped="2"/></testsuites>'
    )
    assert ga.junit_counts(xml) == {"tests": 9, "failures": 1, "errors": 0, "skipped": 2}
    assert ga.junit_counts(tmp_path / "missing.xml") == {}


def _ctx(tmp_path: Path, **env: str) -> ga.Context:
    return ga.Context(
        out=tmp_path, work=tmp_path, python=sys.executable, env={"PATH": "/usr/bin:/bin", **env}
    )


def test_probe_part_reads_the_probe_record(tmp_path: Path, monkeypatch) -> None:
    """The record as trm.launch.probe writes it; the part compares it with the table (GPU-free)."""

    def fake_run(cmd, ctx, *, timeout_s, log_name, env=None):
        assert (
            cmd[-2:] == ["select-config", "--probe"]
            and env["TASK"] == "arc2-smoke"
            and env["NUM_GPUS"] == "1"
        )
        launch = Path(env["WORKSPACE"]) / "checkpoints" / "gpu-acceptance-probe" / "launch"
        launch.mkdir(parents=True)
        attempt = {"micro_batch_size": 192, "returncode": 0, "out_of_memory": False,
                   "peak_mib": {"0": 41234}, "vram_mib": 81559, "step_seconds": 1.21, "steps_timed": 2}  # fmt: skip
        record = {"tier": "h100-80g", "table_micro_batch_size": 192, "chosen_micro_batch_size": 192,
                  "attempts": [attempt], "drift": []}  # fmt: skip
        (launch / "probe.json").write_text(json.dumps(record))
        return 0, "micro-batch 192 fits"

    monkeypatch.setattr(ga, "run_command", fake_run)
    outcome = ga.probe(_ctx(tmp_path))
    assert outcome.status == "pass", outcome
    assert outcome.data["peak_fraction_of_vram"] == round(41234 / 81559, 3)
    assert outcome.data["tier_min_vram_gib"] == 75
    assert outcome.summary == "tier h100-80g micro-batch 192 → 192; peak 41234 MiB of 81559 MiB (51%)"


def test_bench_part_requires_the_upstream_comparison_when_asked(tmp_path: Path, monkeypatch) -> None:
    line = "ours/compiled           301.9 ms/step   3.31 steps/s (first step 48.2 s) mfu=29.4%"
    monkeypatch.setattr(ga, "run_command", lambda *a, **k: (0, line))
    outcome = ga.bench(_ctx(tmp_path))
    assert outcome.status == "pass" and "301.9 ms/step, MFU 29.4%" in outcome.summary
    assert "upstream not compared" in outcome.summary
    failed = ga.bench(_ctx(tmp_path, TRM_UPSTREAM="/opt/upstream"))
    assert failed.status == "fail" and "no comparison came out" in failed.summary


def test_gpu_tests_part_fails_on_skips(tmp_path: Path, monkeypatch) -> None:
    def fake_run(cmd, ctx, *, timeout_s, log_name, env=None):
        assert env["TRM_REQUIRE_GPU"] == "1" and "-m" in cmd and "gpu" in cmd
        junit = next(c.split("=", 1)[1] for c in cmd if c.startswith("--junitxml="))
        Path(junit).write_text('<testsuite tests="11" failures="0" errors="0" skipped="1"/>')
        return 0, "10 passed, 1 skipped"

    monkeypatch.setattr(ga, "run_command", fake_run)
    outcome = ga.gpu_tests(_ctx(tmp_path))
    assert outcome.status == "fail" and outcome.data["skipped"] == 1
