"""The optional bench parts: `bench` (the paper-config model step against upstream's), `compile-modes` (our
step compiled in another torch.compile mode against the default one), `checkpoint` (an asynchronous save
against a synchronous one) and `eval` (evaluation rows/s)."""

from __future__ import annotations

import json
import re
from typing import Any

from tools.gpu.check.core import Context, Outcome, run_command, tail, upstream_checkout

BENCH_STEPS = {"quick": ("5", "1"), "full": ("20", "3")}  # (timed, warm-up) steps per variant
# Separate first-compile timings from a fresh cache (one per model) in the full profile; the quick profile
# reads the compile time off the compiled variants' first step, which runs first on a fresh host (the bench
# part comes before every other part that compiles the paper config).
BENCH_COMPILE_REPEATS = {"quick": "0", "full": "1"}
BENCH_LIMIT_S = 300
CHECKPOINT_LIMIT_S = 180  # builds a 2.4 GB puzzle table and writes three ~5 GB checkpoints
EVAL_LIMIT_S = 240
EVAL_REPEATS = {"quick": "2", "full": "3"}


_BENCH_LINE = re.compile(r"^(?P<label>\S+/(?:eager|compiled|[a-z-]+))\s+(?P<ms>[\d.]+) ms/step\s+(?P<sps>[\d.]+) steps/s"
                         r"(?: \((?:first step|compile) (?P<first>[\d.]+) s\))?.*?(?: mfu=(?P<mfu>[\d.]+)%)?$")  # fmt: skip
_SPEEDUP = re.compile(r"^speedup (?P<what>.+?): (?P<ratio>[\d.]+)x vs upstream")
_MODE_RATIO = re.compile(r"^compile mode (?P<mode>\S+): (?P<ratio>[\d.]+)x vs the default mode")
# The lever the part measures (docs/training.md, "torch.compile's mode"): autotuned matmuls with fused
# epilogues, no CUDA graphs (the carry's buffers stay the step's own).
COMPILE_MODE = "max-autotune-no-cudagraphs"
COMPILE_MODES_LIMIT_S = 420  # eager, default-compiled and autotuned variants of the paper step


def parse_bench(output: str) -> dict[str, Any]:
    """ms/step, steps/s and MFU per variant, and the speedups against upstream and of other compile modes
    against the default one, from tools.bench.model."""
    variants: dict[str, dict[str, float | None]] = {}
    speedups: dict[str, float] = {}
    modes: dict[str, float] = {}
    for line in output.splitlines():
        if m := _BENCH_LINE.match(line.strip()):
            mfu = m.group("mfu")
            variants[m.group("label")] = {
                "ms_per_step": float(m.group("ms")),
                "steps_per_s": float(m.group("sps")),
                "mfu": float(mfu) / 100 if mfu else None,
            }
            if m.group("first"):  # compiled variants: the compile (and one step)
                variants[m.group("label")]["first_step_s"] = float(m.group("first"))
        elif m := _SPEEDUP.match(line.strip()):
            speedups[m.group("what")] = float(m.group("ratio"))
        elif m := _MODE_RATIO.match(line.strip()):
            modes[m.group("mode")] = float(m.group("ratio"))
    return {"variants": variants, "speedup_vs_upstream": speedups, "speedup_vs_default_mode": modes}


def bench(ctx: Context) -> Outcome:
    steps, warmup = BENCH_STEPS[ctx.profile]
    cmd = [ctx.python, "-m", "tools.bench.model", "--config", "paper", "--steps", steps, "--warmup", warmup,
           "--compile-repeats", BENCH_COMPILE_REPEATS[ctx.profile], "--no-attention-split"]  # fmt: skip
    upstream = upstream_checkout(ctx.env, ctx.kit)
    env = {**ctx.env, "TRM_UPSTREAM": upstream} if upstream else ctx.env
    limit = ctx.limit(BENCH_LIMIT_S)
    code, output = run_command(cmd, ctx, timeout_s=limit, log_name="bench.log", env=env)
    if code is None:
        return Outcome("error", f"timed out after {limit:.0f} s", output=tail(output))
    data = parse_bench(output)
    data["upstream"] = upstream
    data["steps"], data["warmup"] = int(steps), int(warmup)
    ours = data["variants"].get("ours/compiled") or data["variants"].get("ours/eager")
    if code != 0 or ours is None:
        return Outcome("fail", f"tools.bench.model exited {code}", data, tail(output))
    mfu = (
        f", MFU {ours['mfu']:.1%}" if ours["mfu"] is not None else ", MFU unknown (GPU not in the peak table)"
    )
    vs = "; ".join(f"{k} {v:.2f}x" for k, v in data["speedup_vs_upstream"].items())
    compiled = data["variants"].get("ours/compiled", {})
    first = f", compile {compiled['first_step_s']:.0f} s" if "first_step_s" in compiled else ""
    summary = f"paper config: {ours['ms_per_step']:.1f} ms/step{mfu}{first}" + (
        f"; vs upstream: {vs}" if vs else "; upstream not compared (set TRM_UPSTREAM to a checkout)"
    )
    if upstream and not data["speedup_vs_upstream"]:
        return Outcome(
            "fail",
            summary + "; an upstream checkout was given but no comparison came out",
            data,
            tail(output),
        )
    return Outcome("pass", summary, data, tail(output))


def compile_modes(ctx: Context) -> Outcome:
    """Our paper step compiled in COMPILE_MODE against the default mode, in one interleaved run."""
    cmd = [ctx.python, "-m", "tools.bench.model", "--config", "paper", "--steps", "10", "--warmup", "2",
           "--compile-repeats", "0", "--no-attention-split", "--compile-mode", COMPILE_MODE]  # fmt: skip
    limit = ctx.limit(COMPILE_MODES_LIMIT_S)
    code, output = run_command(cmd, ctx, timeout_s=limit, log_name="compile-modes.log")
    if code is None:
        return Outcome("error", f"timed out after {limit:.0f} s", output=tail(output))
    data = parse_bench(output)
    ratio = data["speedup_vs_default_mode"].get(COMPILE_MODE)
    tuned, plain = data["variants"].get(f"ours/{COMPILE_MODE}"), data["variants"].get("ours/compiled")
    if code != 0 or ratio is None or tuned is None or plain is None:
        return Outcome(
            "fail", f"tools.bench.model exited {code} without the mode's ratio", data, tail(output)
        )
    summary = (
        f"paper step, {COMPILE_MODE} {tuned['ms_per_step']:.1f} ms/step against default "
        f"{plain['ms_per_step']:.1f}: {ratio:.2f}x (first step {tuned.get('first_step_s', 0):.0f} s "
        f"against {plain.get('first_step_s', 0):.0f} s)"
    )
    return Outcome("pass", summary, data, tail(output))


def checkpoint_save(ctx: Context) -> Outcome:
    """One asynchronous save of the paper-size state from the GPU (pinned buffers) against a synchronous one."""
    cmd = [ctx.python, "-m", "tools.bench.checkpoint", "--device", "cuda", "--json",
           "--dir", str(ctx.work / "checkpoint-bench")]  # fmt: skip
    limit = ctx.limit(CHECKPOINT_LIMIT_S)
    code, output = run_command(cmd, ctx, timeout_s=limit, log_name="checkpoint.log")
    if code is None:
        return Outcome("error", f"timed out after {limit:.0f} s", output=tail(output))
    start = output.find("\n{")
    try:
        data = json.loads(output[start:]) if start >= 0 else None
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        return Outcome("fail", f"tools.bench.checkpoint exited {code} without its JSON", output=tail(output))
    data.pop("files", None)
    summary = (
        f"{data['checkpoint_mb']:,.0f} MB from {data['device']}: synchronous {data['sync_save_s']:.2f} s;"
        f" asynchronous blocks the loop {data['async_blocked_s']:.3f} s ({data['blocked_share']:.1%},"
        f" target ≤ {data['target_share']:.0%}), written after {data['async_total_s']:.2f} s; first async"
        f" save {data['async_first_blocked_s']:.2f} s (allocates pinned buffers); same sha256s: {data['identical']}"
    )
    ok = code == 0 and data["identical"] and data["device"].startswith("cuda")
    return Outcome("pass" if ok else "fail", summary, data, tail(output))


_EVAL_RATE = re.compile(r"^(?P<name>eager|compiled)\s+(?P<rate>[\d.]+) rows/s")
_EVAL_COMPILE = re.compile(r"^compiled: first pass \(compiles\) (?P<s>[\d.]+) s")
_EVAL_SAME = re.compile(r"^predictions identical in (?P<pct>[\d.]+)% of rows")


def parse_eval(output: str) -> dict[str, Any]:
    """rows/s eager and compiled, the compiling pass's seconds and the share of identical predictions."""
    data: dict[str, Any] = {"rows_per_s": {}}
    for line in output.splitlines():
        line = line.strip()
        if m := _EVAL_RATE.match(line):
            data["rows_per_s"][m.group("name")] = float(m.group("rate"))
        elif m := _EVAL_COMPILE.match(line):
            data["first_compiled_pass_s"] = float(m.group("s"))
        elif m := _EVAL_SAME.match(line):
            data["identical_predictions"] = float(m.group("pct")) / 100
    return data


def evaluation(ctx: Context) -> Outcome:
    """An evaluation pass at paper size (every row to halting), eager and compiled: rows/s."""
    cmd = [ctx.python, "-m", "tools.bench.eval", "--config", "paper", "--device", "cuda",
           "--repeats", EVAL_REPEATS[ctx.profile]]  # fmt: skip
    limit = ctx.limit(EVAL_LIMIT_S)
    code, output = run_command(cmd, ctx, timeout_s=limit, log_name="eval.log")
    if code is None:
        return Outcome("error", f"timed out after {limit:.0f} s", output=tail(output))
    data = parse_eval(output)
    rates = data["rows_per_s"]
    if code != 0 or set(rates) != {"eager", "compiled"}:
        return Outcome("fail", f"tools.bench.eval exited {code}", data, tail(output))
    summary = (
        f"paper config: eager {rates['eager']:.1f} rows/s, compiled {rates['compiled']:.1f} rows/s"
        f" ({rates['compiled'] / rates['eager']:.2f}x); compiling pass {data.get('first_compiled_pass_s')} s"
    )
    return Outcome("pass", summary, data, tail(output))
