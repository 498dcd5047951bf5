"""The learning-curve part on CPU: where the plan puts it (never in call 1's budget), when the budget skips
it, the harness command it sizes, and its verdict read from the JSON the harness writes."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from types import SimpleNamespace

from tests.tools.gpu.check.helpers import fake_ctx
from tools.bench import curve_output
from tools.bench import curves as harness
from tools.gpu.check import cli, core, curves, driver, plan


def synthetic_runs(seeds: int, steps: int, offset: float) -> list[harness.Curves]:
    """Per-seed curves whose value at each step is offset + a small seed-dependent wobble."""
    return [
        {m: {s: offset + 0.01 * ((seed * 7 + s) % 5) for s in range(1, steps + 1)} for m in harness.METRICS}
        for seed in range(seeds)
    ]


def write_harness_json(out: Path, offset_b: float, monkeypatch) -> Path:
    """The JSON tools.bench.curves writes on a GPU host without matplotlib, from its own writer."""
    steps, seeds = 40, 3
    a, b = synthetic_runs(seeds, steps, 1.0), synthetic_runs(seeds, steps, 1.0 + offset_b)
    comparisons = harness.compare(a, b, steps, 4)

    def no_matplotlib(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'matplotlib'")

    monkeypatch.setattr(curve_output, "plot", no_matplotlib)
    result = {"setup": "sudoku", "labels": ["trm-stack", "upstream"], "device": "cuda", "steps": steps,
              "seeds": seeds, "seeds_planned": 8, "stopped_for_time": True, "wall_seconds": 288,
              "verdict": harness.curve_stats.overall_verdict(comparisons),
              "metrics": [c.as_dict() for c in comparisons], "runs": {"trm-stack": a, "upstream": b}}  # fmt: skip
    harness.write_outputs(out / "curves" / "sudoku-cuda", result, comparisons)
    return out / "curves" / "sudoku-cuda.json"


def test_the_curves_are_optional_never_in_call_1_and_after_call_2s_required_parts() -> None:
    by_name = {p.name: p for p in plan.PARTS}
    part = by_name["curves"]
    assert not part.required and part.needs_cuda and part.planned_s["quick"] <= part.limit_s
    assert "curves" not in plan.CALLS[1]
    two = plan.CALLS[2]
    required = [n for n in two if by_name[n].required]
    assert two.index("curves") > max(two.index(n) for n in required)
    three = plan.CALLS[3]
    assert "extension-build" in three and three[three.index("curves") + 1 :] == (
        "compile-modes",
        "prefetch-ab",
    )
    assert not by_name["compile-modes"].required  # after the curves, only when time is left
    assert not by_name["prefetch-ab"].required
    # The curves' own call leaves them their planned time and the harness its full budget after the rest.
    rest = driver.planned_total([by_name[n] for n in three[: three.index("curves")]], "quick")
    assert rest + part.planned_s["quick"] <= core.DEFAULT_BUDGET_S
    assert core.DEFAULT_BUDGET_S - rest - curves.CURVES_MARGIN_S >= curves.CURVES_TRAIN_S


def test_call_2_runs_the_curves_only_when_its_budget_has_their_planned_time_left(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(cli, "cuda_available", lambda: True)
    ran: list[str] = []

    def fake(name: str):
        def run(ctx: core.Context) -> core.Outcome:
            ran.append(name)
            return core.Outcome("pass", f"{name} ok")

        return run

    parts = tuple(dataclasses.replace(p, run=fake(p.name)) for p in plan.PARTS)
    short = str(curves.CURVES_PLANNED_S - 30)  # every fake part is instant: the budget is what is left
    args = [
        "--call",
        "2",
        "--only",
        "curves",
        "checkpoint",
        "--budget-s",
        short,
        "--out",
        str(tmp_path / "short"),
    ]
    assert cli.main(args, parts=parts) == 0
    report = json.loads((tmp_path / "short" / "report.json").read_text())
    skipped = {p["name"]: p for p in report["parts"]}["curves"]
    assert skipped["skipped"] == core.NO_TIME and ran == ["checkpoint"]
    assert (
        report["status"] == "pass" and report["status_reason"] == "optional part(s) skipped for time: curves"
    )
    ran.clear()
    assert cli.main(["--call", "2", "--only", "curves", "--out", str(tmp_path / "long")], parts=parts) == 0
    assert ran == ["curves"]
    # On the plan, call 2's measurements leave the curves less than their planned time: they run in call 2
    # only when those measurements ran short of it, and never push call 2's required parts out.
    by_name = {p.name: p for p in plan.PARTS}
    required = driver.planned_total([by_name[n] for n in plan.CALLS[2]], "quick", required_only=True)
    assert required + curves.CURVES_PLANNED_S > core.DEFAULT_BUDGET_S >= required


def test_the_harness_gets_the_time_left_less_a_margin_at_most_five_minutes(tmp_path) -> None:
    ctx = fake_ctx(tmp_path)
    assert curves.harness_budget(ctx) == curves.CURVES_TRAIN_S  # no deadline
    ctx.deadline = time.monotonic() + 200
    assert curves.harness_budget(ctx) in (200 - curves.CURVES_MARGIN_S - 1, 200 - curves.CURVES_MARGIN_S)


def test_the_part_runs_the_harness_on_cuda_and_passes_on_indistinguishable_curves(
    tmp_path, monkeypatch
) -> None:
    calls = []

    def fake_run(cmd, ctx, *, timeout_s, log_name, env=None):
        calls.append((cmd, env))
        write_harness_json(ctx.out, 0.0, monkeypatch)
        return 0, "verdict: indistinguishable at equal steps"

    monkeypatch.setattr(curves, "run_command", fake_run)
    assert curves.curves(fake_ctx(tmp_path)).status == "fail"  # no upstream checkout: nothing to compare with
    assert calls == []
    outcome = curves.curves(fake_ctx(tmp_path, TRM_UPSTREAM="/opt/upstream"))
    assert outcome.status == "pass", outcome
    cmd, env = calls[-1]
    assert cmd[2:4] == ["tools.bench.curves", "--setup"] and cmd[cmd.index("--device") + 1] == "cuda"
    assert cmd[cmd.index("--time-budget-s") + 1] == str(curves.CURVES_TRAIN_S)
    assert cmd[cmd.index("--out") + 1] == str(tmp_path / "curves") and env["TRM_UPSTREAM"] == "/opt/upstream"
    assert outcome.data["seeds"] == 3 and outcome.data["verdict"] == "indistinguishable at equal steps"
    assert set(outcome.data["final_difference"]) == set(harness.METRICS) and "runs" not in outcome.data
    assert (
        "not drawn (No module named 'matplotlib'): python -m tools.bench.curves --replot sudoku-cuda.json"
        in (outcome.summary)
    )


def test_parted_curves_fail_and_a_cut_off_harness_reports_what_it_compared(tmp_path, monkeypatch) -> None:
    ctx = fake_ctx(tmp_path, TRM_UPSTREAM="/opt/upstream")

    def harness(offset: float, code: int | None):
        def fake_run(cmd, ctx, *, timeout_s, log_name, env=None):
            write_harness_json(tmp_path, offset, monkeypatch)
            return code, "seed 2: both runs done"

        return fake_run

    monkeypatch.setattr(curves, "run_command", harness(0.5, 0))
    parted = curves.curves(ctx)
    assert parted.status == "fail" and "part at step 4" in parted.summary, parted
    monkeypatch.setattr(curves, "run_command", harness(0.0, None))  # killed at the limit after seed 3's JSON
    cut = curves.curves(ctx)
    assert cut.status == "pass" and "cut off at the" in cut.summary and cut.data["exit_code"] is None, cut
    # Killed before two seeds were compared: the JSON an earlier run left in the folder is not this run's.
    monkeypatch.setattr(curves, "run_command", lambda *a, **k: (None, "seed 0: both runs done"))
    monkeypatch.setattr(curves, "time", SimpleNamespace(time=lambda: 4e9))  # starts after that JSON
    lost = curves.curves(ctx)
    assert lost.status == "error" and "before two seeds were compared" in lost.summary
