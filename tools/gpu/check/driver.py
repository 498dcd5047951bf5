"""The check's driver: run the chosen parts in order within the budget (a part starts only when its
planned time fits what is left), record each outcome, and derive the report's status from them."""

from __future__ import annotations

import dataclasses
import platform
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from tools.gpu.check.core import NO_GPU, NO_TIME, Context, Outcome, Part, tail
from tools.gpu.check.optimizer import OPTIMIZER_ATOL
from tools.gpu.check.resume import RESUME_ATOL, RESUME_RTOL


def planned_total(parts: Sequence[Part], profile: str, *, required_only: bool = False) -> int:
    """Seconds the parts (the required ones: what the budget is sized against) are planned to take on one H100."""
    return sum(p.planned_s[profile] for p in parts if p.required or not required_only)


def run_parts(
    parts: Sequence[Part],
    ctx: Context,
    on_update: Callable[[dict[str, Any]], None],
    *,
    budget_s: float,
    cuda: bool,
    call: int | None = None,
) -> dict[str, Any]:
    """Run every part that fits (an exception is that part's `error`), calling `on_update(report)` after
    each; CUDA parts are skipped without `cuda`, parts whose planned time no longer fits are skipped."""
    report: dict[str, Any] = {
        "started_unix": time.time(),
        "host": platform.node(),
        "command": [sys.executable, "-m", "tools.gpu.check", *sys.argv[1:]],
        "profile": ctx.profile,
        "call": call,
        "budget_s": budget_s,
        "planned_h100_s": planned_total(parts, ctx.profile),
        "planned_required_h100_s": planned_total(parts, ctx.profile, required_only=True),
        "cuda": cuda,
        "require_extension": ctx.require_extension,
        "tolerances": {
            "resume_rtol": RESUME_RTOL,
            "resume_atol": RESUME_ATOL,
            "optimizer_atol": OPTIMIZER_ATOL,
        },
        "parts": [],
    }
    report["plan_fits_budget"] = report["planned_required_h100_s"] <= budget_s
    for part in parts:
        planned, left = part.planned_s[ctx.profile], ctx.seconds_left()
        print(
            f"gpu-acceptance: {part.name}: {part.what} (planned {planned} s, {left:.0f} s left)", flush=True
        )
        start = time.perf_counter()
        if part.needs_cuda and not cuda:
            outcome = Outcome("skip", "skipped: no GPU (torch sees no CUDA device)", skipped=NO_GPU)
        elif planned > left:
            outcome = Outcome(
                "skip",
                f"skipped for time: planned {planned} s on an H100, {max(left, 0):.0f} s of the budget left",
                skipped=NO_TIME,
            )
        else:
            try:
                outcome = part.run(ctx)
            except Exception as exc:  # a part's crash is recorded, the others still run
                outcome = Outcome(
                    "error", f"{type(exc).__name__}: {exc}", output=tail(traceback.format_exc())
                )
        seconds = round(time.perf_counter() - start, 1)
        report["parts"].append(
            {"name": part.name, "what": part.what, "planned_s": planned, "limit_s": part.limit_s,
             "required": part.required, "seconds": seconds, **dataclasses.asdict(outcome)}
        )  # fmt: skip
        report["status"] = overall(report["parts"])
        report["status_reason"] = status_reason(report["parts"])
        print(
            f"gpu-acceptance: {part.name}: {outcome.status.upper()} ({seconds} s) {outcome.summary}",
            flush=True,
        )
        on_update(report)
    if ctx.extension is not None:
        if ctx.keep_extension_build and ctx.extension.state() == "running":
            report["extension_build_left_running"] = {"pid": ctx.extension.record["pid"],
                                                      "folder": str(ctx.extension.folder)}  # fmt: skip
        else:
            ctx.extension.stop()
    report["status"] = overall(report["parts"])
    report["status_reason"] = status_reason(report["parts"])
    report["seconds"] = round(time.time() - report["started_unix"], 1)
    on_update(report)
    return report


def overall(parts: list[dict[str, Any]]) -> str:
    """fail when a part failed or errored; incomplete when a part was skipped for lack of GPU, or a required
    part for lack of time; else pass."""
    if any(p["status"] in ("fail", "error") for p in parts):
        return "fail"
    if any(
        p["status"] == "skip"
        and (p.get("skipped") == NO_GPU or (p.get("skipped") == NO_TIME and p.get("required", True)))
        for p in parts
    ):
        return "incomplete"
    return "pass"


def status_reason(parts: list[dict[str, Any]]) -> str:
    """What made the status what it is, in one line: the parts that failed, those skipped for time (required
    or not), those skipped for want of a GPU."""

    def names(pred: Callable[[dict[str, Any]], bool]) -> str:
        return ", ".join(p["name"] for p in parts if pred(p))

    said = []
    for label, pred in (
        ("failed", lambda p: p["status"] in ("fail", "error")),
        (
            "required part(s) skipped for time",
            lambda p: p.get("skipped") == NO_TIME and p.get("required", True),
        ),
        (
            "optional part(s) skipped for time",
            lambda p: p.get("skipped") == NO_TIME and not p.get("required", True),
        ),
        ("skipped: no GPU", lambda p: p.get("skipped") == NO_GPU),
    ):
        if found := names(pred):
            said.append(f"{label}: {found}")
    return "; ".join(said) or "every part passed or was not wanted here"


EXIT_CODES = {"pass": 0, "fail": 1, "incomplete": 3}
