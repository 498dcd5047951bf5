"""The step parts: `step-ab` (our trainer against upstream's at the paper setup), `sdpa` (the attention
backends) and `profile` (a compiled step split by kernel kind) in call 2; `prefetch-ab` (our trainer with
batches built ahead against without) in call 3."""

from __future__ import annotations

import json
from typing import Any

from tools.gpu.check.core import Context, Outcome, run_command, tail
from tools.gpu.check.extension import part_env, upstream_part_env

STEP_AB_LIMIT_S = 420
# Steps per trainer run of the step A/B: tools.bench.train times the steps after its 5 warm-up steps, so
# each run times STEP_AB_MIN_STEPS (ours runs twice, before and after upstream).
STEP_AB_MIN_STEPS = 20
STEP_AB_STEPS = STEP_AB_MIN_STEPS + 6
SDPA_LIMIT_S = 120
PREFETCH_AB_LIMIT_S = 300
PREFETCH_SETTING = "loader_prefetch=2"
PROFILE_LIMIT_S = 240


def step_ab_figures(record: dict[str, Any]) -> dict[str, Any]:
    """ours / upstream s per step (median and min), timed steps and MFU, and the ratio, from the JSON object
    `tools.bench.train --json` prints."""

    def side(figures: dict[str, Any]) -> dict[str, Any]:
        return {"s_per_step": figures["median_s_per_step"], "min_s_per_step": figures["min_s_per_step"],
                "steps_per_s": figures["steps_per_s"], "timed_steps": figures["steps"], "mfu": figures["mfu"]}  # fmt: skip

    data: dict[str, Any] = {"ours": side(record["ours"])}
    theirs = record.get("upstream")
    if theirs is not None and "failed" in theirs:
        data["upstream_failed"] = theirs["failed"]
    elif theirs is not None:
        data["upstream"] = side(theirs)
        data["ratio_vs_upstream"] = record["ratio_vs_upstream"]
    return data


def step_ab(ctx: Context) -> Outcome:
    """Our trainer against upstream's at the paper setup, interleaved (ours, upstream, ours), each timing at
    least STEP_AB_MIN_STEPS steps after the warm-up, both on the extension optimizer when it is required."""
    found = upstream_part_env(ctx)
    if isinstance(found, Outcome):
        return found
    upstream, env = found
    cmd = [ctx.python, "-m", "tools.bench.train", "--setup", "paper", "--steps", str(STEP_AB_STEPS),
           "--keep", str(ctx.work / "step-ab"), "--json"]  # fmt: skip
    limit = ctx.limit(STEP_AB_LIMIT_S)
    code, output = run_command(cmd, ctx, timeout_s=limit, log_name="step-ab.log", env=env)
    if code is None:
        return Outcome("error", f"timed out after {limit:.0f} s", output=tail(output))
    record = _json_tail(output)
    data = step_ab_figures(record) if record is not None else {}
    data.update(upstream_checkout=upstream, steps_per_run=STEP_AB_STEPS, measured=True)
    ours, theirs = data.get("ours"), data.get("upstream")
    if code != 0 or ours is None:
        return Outcome("fail", f"tools.bench.train exited {code}", data, tail(output))
    if theirs is None or "ratio_vs_upstream" not in data:
        return Outcome("fail", f"ours {ours['s_per_step']:.3f} s/step; upstream did not run: "
                       f"{data.get('upstream_failed', 'no figures')}", data, tail(output))  # fmt: skip
    short = [name for name, r, need in (("ours", ours, 2 * STEP_AB_MIN_STEPS), ("upstream", theirs, STEP_AB_MIN_STEPS))
             if r["timed_steps"] is not None and r["timed_steps"] < need]  # fmt: skip
    summary = (
        f"paper setup, interleaved ours/upstream/ours: ours {ours['s_per_step']:.3f} s/step median, {ours['min_s_per_step']:.3f} min ({ours['timed_steps']} steps),"
        f" upstream {theirs['s_per_step']:.3f} median, {theirs['min_s_per_step']:.3f} min ({theirs['timed_steps']} steps): {data['ratio_vs_upstream']:.2f}x"
        + (f"; too few timed steps: {', '.join(short)}" if short else "")
    )
    return Outcome("fail" if short else "pass", summary, data, tail(output))


def prefetch_ab(ctx: Context) -> Outcome:
    """Our trainer at the paper setup without and with PREFETCH_SETTING (`tools.bench.train --set`), each
    timing at least STEP_AB_MIN_STEPS steps after the warm-up, on the extension optimizer when required."""
    env = part_env(ctx)
    if isinstance(env, Outcome):
        return env
    cmd = [ctx.python, "-m", "tools.bench.train", "--setup", "paper", "--steps", str(STEP_AB_STEPS),
           "--keep", str(ctx.work / "prefetch-ab"), "--set", PREFETCH_SETTING, "--json"]  # fmt: skip
    limit = ctx.limit(PREFETCH_AB_LIMIT_S)
    code, output = run_command(cmd, ctx, timeout_s=limit, log_name="prefetch-ab.log", env=env)
    if code is None:
        return Outcome("error", f"timed out after {limit:.0f} s", output=tail(output))
    record = _json_tail(output)
    if code != 0 or record is None or "variant" not in record:
        return Outcome(
            "fail", f"tools.bench.train exited {code} without the variant's figures", output=tail(output)
        )
    plain, ahead = record["ours"], record["variant"]
    data = {"setting": PREFETCH_SETTING, "ours": plain, "variant": ahead,
            "ratio_variant_vs_ours": record["ratio_variant_vs_ours"], "measured": True}  # fmt: skip
    summary = (
        f"paper setup, {PREFETCH_SETTING}: {ahead['median_s_per_step']:.4f} s/step median "
        f"({ahead['min_s_per_step']:.4f} min) against {plain['median_s_per_step']:.4f} "
        f"({plain['min_s_per_step']:.4f}) without: {data['ratio_variant_vs_ours']:.3f}x"
    )
    return Outcome("pass", summary, data, tail(output))


def _json_tail(output: str) -> dict[str, Any] | None:
    """The JSON object a bench printed as its last line (`--json`)."""
    lines = output.strip().splitlines()
    try:
        data = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def _bench_json(
    ctx: Context, module: str, args: list[str], limit_s: float, log_name: str
) -> tuple[dict, str] | Outcome:
    """Run `tools.bench.<module> ARGS --json` within the part's limit: (its JSON, its output), or the
    part's Outcome when it timed out or ended without its JSON."""
    limit = ctx.limit(limit_s)
    code, output = run_command(
        [ctx.python, "-m", f"tools.bench.{module}", *args, "--json"], ctx, timeout_s=limit, log_name=log_name
    )
    if code is None:
        return Outcome("error", f"timed out after {limit:.0f} s", output=tail(output))
    data = _json_tail(output)
    if code != 0 or data is None:
        return Outcome("fail", f"tools.bench.{module} exited {code} without its JSON", output=tail(output))
    return data, output


def sdpa(ctx: Context) -> Outcome:
    """tools.bench.sdpa at the paper shape: cuDNN, flash, memory-efficient and math attention, forced one by one."""
    ran = _bench_json(ctx, "sdpa", ["--device", "cuda"], SDPA_LIMIT_S, "sdpa.log")
    if isinstance(ran, Outcome):
        return ran
    data, output = ran
    said = ", ".join(
        f"{k} {v['ms']:.2f} ms" if "ms" in v else f"{k} unsupported" for k, v in data["backends"].items()
    )
    return Outcome("pass" if data["fastest"] else "fail",
                   f"fwd+bwd at batch 192 x 8 heads x 916 x 64 (measured): {said}; fastest {data['fastest']}",
                   data, tail(output))  # fmt: skip


def step_profile(ctx: Context) -> Outcome:
    """tools.bench.step_profile: a compiled paper-config step under torch.profiler, split by kernel kind."""
    args = ["--config", "paper", "--device", "cuda", "--compile"]
    ran = _bench_json(ctx, "step_profile", args, PROFILE_LIMIT_S, "profile.log")
    if isinstance(ran, Outcome):
        return ran
    data, output = ran
    shares = ", ".join(f"{k} {v:.0%}" for k, v in data["share_of_wall"].items() if v is not None)
    return Outcome("pass", f"compiled paper step {data['wall_ms_per_step']:.1f} ms (measured): {shares}", data,
                   tail(output))  # fmt: skip
