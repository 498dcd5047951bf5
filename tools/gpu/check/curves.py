"""The optional `curves` part: our trainer's and upstream's learning curves on the same GPU (issue 42's GPU
variant of the curve harness), compared as on CPU, the JSON and PNG in the report folder.

It runs `python -m tools.bench.curves --setup sudoku --device cuda` with the kit's upstream checkout (or
TRM_UPSTREAM): CURVES_STEPS steps per run, seed pairs (ours, upstream) while the harness's time budget
allows, at most CURVES_MAX_SEEDS; the budget is CURVES_TRAIN_S, cut to what is left of the check's budget
less CURVES_MARGIN_S. Its planned time (what the check's budget tests before starting it) is the least that
gives a verdict: the data and two seed pairs. The harness rewrites its JSON after every seed from the
second, so a part cut off at its limit still reports the comparison so far.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tools.gpu.check.core import Context, Outcome, run_command, tail
from tools.gpu.check.extension import upstream_part_env

CURVES_SETUP = "sudoku"
CURVES_STEPS = 1000  # per run: ~8 epochs of the 4,096 Sudoku rows at batch 32
CURVES_MAX_SEEDS = 8
CURVES_TRAIN_S = 300  # the curve harness's budget: about 5 minutes of training, both trainers together
CURVES_MARGIN_S = 30  # kept back from what is left for the last comparison, the plot and the report
CURVES_LIMIT_S = 420  # the data, the harness's budget, and a seed pair that runs over it
# Planned: the data (~15 s) and two seed pairs of ~40 s per run (~8 s to start, 1000 eager steps of a tiny
# model at ~30 ms); an estimate, never measured on a GPU.
CURVES_PLANNED_S = 180


def harness_budget(ctx: Context) -> int:
    """Seconds the harness may spend: CURVES_TRAIN_S, or what is left of the check's budget less the margin."""
    return max(1, int(min(CURVES_TRAIN_S, ctx.seconds_left() - CURVES_MARGIN_S)))


def curves_command(ctx: Context, out: Path, budget_s: int) -> list[str]:
    return [ctx.python, "-m", "tools.bench.curves", "--setup", CURVES_SETUP, "--device", "cuda",
            "--steps", str(CURVES_STEPS), "--seeds", str(CURVES_MAX_SEEDS), "--time-budget-s", str(budget_s),
            "--out", str(out)]  # fmt: skip


def curves(ctx: Context) -> Outcome:
    """Both trainers on this GPU for CURVES_STEPS steps per seed; pass when the curves are indistinguishable."""
    found = upstream_part_env(ctx)
    if isinstance(found, Outcome):
        return found
    upstream, env = found
    out = ctx.out / "curves"
    budget = harness_budget(ctx)
    limit = ctx.limit(CURVES_LIMIT_S)
    started = time.time()
    code, output = run_command(
        curves_command(ctx, out, budget), ctx, timeout_s=limit, log_name="curves.log",
        env=env,
    )  # fmt: skip
    stem = out / f"{CURVES_SETUP}-cuda"
    result = read_result(stem.with_suffix(".json"), started)
    if result is None:
        if code is None:
            return Outcome(
                "error", f"timed out after {limit:.0f} s before two seeds were compared", output=tail(output)
            )
        return Outcome("fail", f"tools.bench.curves exited {code} without its JSON", output=tail(output))
    data = summary_data(result, stem)
    data.update(upstream_checkout=upstream, harness_budget_s=budget, exit_code=code)
    cut = (
        f"; cut off at the {limit:.0f} s limit, the comparison after {data['seeds']} seeds"
        if code is None
        else ""
    )
    failed = f"; tools.bench.curves exited {code}" if code not in (0, None) else ""
    finals = ", ".join(
        f"{m.removeprefix('train/')} {d['mean']:+.4f} ± {d['half']:.4f}"
        for m, d in data["final_difference"].items()
    )
    summary = (
        f"sudoku, ours vs upstream on {data['device']} (measured): {data['steps']} steps x {data['seeds']} seeds"
        f" (at most {data['seeds_planned']}, budget {budget} s), {data['wall_seconds']} s; {data['verdict']};"
        f" final ours - upstream: {finals}; {data['plot']}{cut}{failed}"
    )
    same = data["verdict"].startswith("indistinguishable")
    return Outcome("pass" if same and not failed else "fail", summary, data, tail(output))


def read_result(path: Path, since: float) -> dict[str, Any] | None:
    """The harness's JSON written since `since` (time.time()), or None: it wrote none in this run (a JSON of
    an earlier run into the same folder is not this run's result)."""
    try:
        if path.stat().st_mtime < since:
            return None
        result = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return result if isinstance(result, dict) and "verdict" in result else None


def summary_data(result: dict[str, Any], stem: Path) -> dict[str, Any]:
    """What the report keeps of the harness's JSON (not the runs' per-step curves: those stay in the JSON)."""
    plot = result.get("plot", "")
    return {
        "json": str(stem.with_suffix(".json")),
        "plot": f"plot {stem.with_suffix('.png')}" if plot.endswith(".png") else f"plot {plot}",
        "device": result.get("device", "cpu"),
        "steps": result["steps"],
        "seeds": result["seeds"],
        "seeds_planned": result.get("seeds_planned", result["seeds"]),
        "stopped_for_time": result.get("stopped_for_time", False),
        "wall_seconds": result["wall_seconds"],
        "verdict": result["verdict"],
        "final_difference": {m["metric"]: m["final_difference"] for m in result["metrics"]},
        "parted_at": {m["metric"]: m["parted_at"] for m in result["metrics"] if m["parted_at"] is not None},
        "measured": True,
    }
