"""The check's driver and report on CPU with fake parts: every part recorded, the budget, no GPU, the
status and its reason."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tools.gpu.check import cli, core, driver, resume
from tools.gpu.check.report import render_markdown


def _fake_parts(seen: list[str]) -> tuple[core.Part, ...]:
    def passing(ctx: core.Context) -> core.Outcome:
        seen.append("pass")
        assert (ctx.out / "report.json").exists() is False  # the first part runs before any report exists
        return core.Outcome("pass", "all good", {"max_abs_diff": 0.0}, "out | with a pipe")

    def failing(ctx: core.Context) -> core.Outcome:
        seen.append("fail")
        # The report of the parts so far is already on disk when the next one runs.
        assert json.loads((ctx.out / "report.json").read_text())["parts"][0]["status"] == "pass"
        return core.Outcome("fail", "peak 90 % of VRAM")

    def crashing(ctx: core.Context) -> core.Outcome:
        seen.append("error")
        raise RuntimeError("CUDA error: an illegal memory access")

    def skipped(ctx: core.Context) -> core.Outcome:
        seen.append("skip")
        return core.Outcome("skip", "upstream not requested", skipped=core.NOT_WANTED)

    def planned(s: int) -> dict[str, int]:
        return {"quick": s, "full": s}

    return (
        core.Part("one", "a passing part", planned(1), 5, passing, needs_cuda=False),
        core.Part("two", "a failing part", planned(1), 5, failing, needs_cuda=False),
        core.Part("three", "a crashing part", planned(1), 5, crashing, needs_cuda=False),
        core.Part("four", "a skipped part", planned(1), 5, skipped, needs_cuda=False),
    )


def test_report_records_every_part_and_is_written_atomically(tmp_path: Path) -> None:
    seen: list[str] = []
    out = tmp_path / "gpu-acceptance"
    assert cli.main(["--out", str(out)], parts=_fake_parts(seen)) == 1
    assert seen == ["pass", "fail", "error", "skip"]  # a failure or crash does not stop the others
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "fail"
    assert [(p["name"], p["status"]) for p in report["parts"]] == [
        ("one", "pass"), ("two", "fail"), ("three", "error"), ("four", "skip"),
    ]  # fmt: skip
    crash = report["parts"][2]
    assert crash["summary"] == "RuntimeError: CUDA error: an illegal memory access"
    assert "Traceback" in crash["output"] and "crashing" in crash["output"]
    assert report["tolerances"]["resume_atol"] == resume.RESUME_ATOL and "seconds" in report
    md = (out / "report.md").read_text()
    assert md.startswith("# GPU acceptance: FAIL")
    assert "| one | pass |" in md and "| three | error |" in md and "out | with a pipe" in md
    assert '"max_abs_diff": 0.0' in md and "## two: fail" in md
    leftovers = [p.name for p in out.iterdir() if p.name not in ("report.json", "report.md", "work")]
    assert leftovers == []


def test_passing_and_skipped_parts_exit_0(tmp_path: Path) -> None:
    seen: list[str] = []
    parts = _fake_parts(seen)
    assert cli.main(["--out", str(tmp_path), "--only", "one", "four"], parts=parts) == 0
    assert json.loads((tmp_path / "report.json").read_text())["status"] == "pass"
    with pytest.raises(ValueError, match="status 'maybe'"):
        core.Outcome("maybe", "")


def _timed_parts(ran: list[str]) -> tuple[core.Part, ...]:
    def make(name: str) -> core.Part:
        def run(ctx: core.Context) -> core.Outcome:
            ran.append(name)
            time.sleep(0.3)
            return core.Outcome("pass", f"{name} ran")

        return run

    return (
        core.Part("cpu-a", "runs on CPU", {"quick": 1, "full": 1}, 5, make("cpu-a"), needs_cuda=False),
        core.Part("cuda-b", "needs CUDA", {"quick": 1, "full": 1}, 5, make("cuda-b")),
        core.Part("cpu-big", "planned longer than the budget", {"quick": 50, "full": 50}, 60, make("cpu-big"),
                needs_cuda=False),
        core.Part("cpu-c", "fits what is left", {"quick": 1, "full": 1}, 5, make("cpu-c"), needs_cuda=False),
    )  # fmt: skip


def test_without_a_gpu_cuda_parts_skip_and_parts_that_do_not_fit_are_skipped_for_time(tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "cuda_available", lambda: False)
    ran: list[str] = []
    code = cli.main(["--out", str(tmp_path), "--budget-s", "10"], parts=_timed_parts(ran))
    assert code == 3  # incomplete: nothing failed, parts were skipped
    assert ran == ["cpu-a", "cpu-c"]
    report = json.loads((tmp_path / "report.json").read_text())
    parts = {p["name"]: p for p in report["parts"]}
    assert parts["cuda-b"]["status"] == "skip" and parts["cuda-b"]["skipped"] == core.NO_GPU
    assert parts["cuda-b"]["summary"] == "skipped: no GPU (torch sees no CUDA device)"
    assert parts["cpu-big"]["skipped"] == core.NO_TIME
    assert parts["cpu-big"]["summary"].startswith("skipped for time: planned 50 s on an H100, ")
    assert report["status"] == "incomplete" and report["budget_s"] == 10
    assert report["planned_h100_s"] == 53 and report["plan_fits_budget"] is False
    md = (tmp_path / "report.md").read_text()
    assert md.startswith("# GPU acceptance: INCOMPLETE") and "| cpu-big | skip | 50 |" in md
    assert "planned on one H100 53 s, required parts 53 s (does NOT fit)" in md


def test_with_a_gpu_every_part_that_fits_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "cuda_available", lambda: True)
    ran: list[str] = []
    assert cli.main(["--out", str(tmp_path), "--only", "cpu-a", "cuda-b"], parts=_timed_parts(ran)) == 0
    assert ran == ["cpu-a", "cuda-b"]
    with pytest.raises(SystemExit) as info:
        cli.main(["--budget-s", "0", "--dry-run"])
    assert info.value.code == 2


def test_an_optional_part_skipped_for_time_leaves_the_verdict_alone() -> None:
    base = {"status": "pass", "skipped": None}
    optional = {"status": "skip", "skipped": core.NO_TIME, "required": False}
    assert driver.overall([base, optional]) == "pass"
    assert driver.overall([base, {**optional, "required": True}]) == "incomplete"
    assert driver.overall([base, {**optional, "skipped": core.NO_GPU}]) == "incomplete"


def test_a_required_part_skipped_for_time_is_named_in_the_status() -> None:
    parts = [
        {"name": "facts", "status": "pass", "required": True},
        {"name": "gpu-tests", "status": "skip", "skipped": core.NO_TIME, "required": True},
        {"name": "eval", "status": "skip", "skipped": core.NO_TIME, "required": False},
    ]
    assert driver.overall(parts) == "incomplete"
    reason = driver.status_reason(parts)
    assert reason == "required part(s) skipped for time: gpu-tests; optional part(s) skipped for time: eval"
    report = {"status": "incomplete", "status_reason": reason, "started_unix": 0, "host": "h", "profile": "quick",
              "budget_s": 540, "planned_h100_s": 1, "planned_required_h100_s": 1, "plan_fits_budget": True,
              "parts": []}  # fmt: skip
    title = render_markdown(report).splitlines()[0]
    assert title == f"# GPU acceptance: INCOMPLETE ({reason})"
