"""GPU host acceptance: one command that checks a host with NVIDIA GPUs end to end and reports it.

    python -m trm.launch.gpu_acceptance [--dry-run] [--out build/gpu-acceptance] [--only PART ...]
    nox -s gpu_acceptance          make gpu-check

Parts, run in order, each recorded as pass / fail / error / skip with its output and timings:

  facts        versions (python, torch, CUDA, cuDNN, NCCL, triton, adam-atan2, git) and GPU facts (nvidia-smi,
               MIG slices, what CUDA reports)
  gpu-tests    every `gpu`-marked test, TRM_REQUIRE_GPU=1 (a skipped gpu test counts as a failure)
  optimizer    the compiled adam-atan2 extension against our AdamATan2 over 100 steps (fp32, bf16): max |diff|
  resume       a CUDA bf16 + compile=auto training run SIGTERMed after step 2, resumed with the extension
               optimizer, ends equal to an uninterrupted run (RESUME_RTOL / RESUME_ATOL; bitwise recorded)
  probe        `select-config --probe` of the paper config at the tier's micro-batch: peak memory against
               the GPU's memory and the hardware.toml tier
  bench        `python -m trm.bench.model --config paper`: ms/step and MFU, and against upstream when
               TRM_UPSTREAM names a checkout

The report (report.json + report.md) is written atomically to the output folder after every part, so an
interrupted run still leaves what it measured. Exit codes: 0 every part passed (or was skipped because not
requested, e.g. upstream without TRM_UPSTREAM), 1 some part failed or errored, 2 bad arguments.
`--dry-run` prints the plan and touches neither the GPU nor the output folder.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.metadata
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
import traceback
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from trm.io import atomic_write_json, atomic_write_text

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = Path("build/gpu-acceptance")
STATUSES = ("pass", "fail", "error", "skip")
OUTPUT_TAIL = 4000  # characters of each part's output kept in the report

# The resumed run equals the uninterrupted one within these (bf16 kernels need not be bit-identical across
# processes; the CPU test of the same flow is bitwise).
RESUME_RTOL, RESUME_ATOL = 2e-2, 2e-3
# Extension vs ours after 100 steps (adam-atan2 0.0.3's own test tolerances, as tests/optim/test_adam_atan2.py).
OPTIMIZER_ATOL = {"float32": 1e-6, "bfloat16": 5e-3}
OPTIMIZER_STEPS = 100

RESUME_OVERRIDES = (
    "arch=trm", "arch.hidden_size=64", "arch.num_heads=4", "arch.L_layers=1", "arch.H_cycles=1",
    "arch.L_cycles=1", "arch.halt_max_steps=2", "arch.puzzle_emb_ndim=16", "+arch.puzzle_emb_len=1",
    "arch.forward_dtype=auto", "compile=auto", "global_batch_size=2", "lr=1e-3", "lr_warmup_steps=2",
    "ema=True", "+log_interval=1", "epochs=4", "eval_interval=2",
)  # fmt: skip


@dataclasses.dataclass
class Outcome:
    """What one part found."""

    status: str
    summary: str
    data: dict[str, Any] = dataclasses.field(default_factory=dict)
    output: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {STATUSES}")


@dataclasses.dataclass
class Context:
    """Where parts write and what they run with."""

    out: Path
    work: Path
    python: str
    env: dict[str, str]


@dataclasses.dataclass(frozen=True)
class Part:
    """One check: its name, a one-line description for the plan, a time limit and the function."""

    name: str
    what: str
    budget_s: int
    run: Callable[[Context], Outcome]


# ---------------------------------------------------------------------------------------------- plumbing
def tail(text: str, limit: int = OUTPUT_TAIL) -> str:
    return text if len(text) <= limit else "…" + text[-limit:]


def run_command(
    cmd: Sequence[str], ctx: Context, *, timeout_s: float, log_name: str, env: dict[str, str] | None = None
) -> tuple[int | None, str]:
    """Run `cmd` in its own process group, output to work/<log_name>; (exit code or None on timeout, output)."""
    log = ctx.work / log_name
    with open(log, "w", encoding="utf-8") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        proc = subprocess.Popen(
            list(cmd),
            stdout=f,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=env or ctx.env,
            start_new_session=True,
        )
        try:
            code: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
    return code, log.read_text(encoding="utf-8", errors="replace")


def run_parts(
    parts: Sequence[Part], ctx: Context, on_update: Callable[[dict[str, Any]], None]
) -> dict[str, Any]:
    """Run every part (an exception is that part's `error`), calling `on_update(report)` after each."""
    report: dict[str, Any] = {
        "started_unix": time.time(),
        "host": platform.node(),
        "command": [sys.executable, "-m", "trm.launch.gpu_acceptance", *sys.argv[1:]],
        "tolerances": {
            "resume_rtol": RESUME_RTOL,
            "resume_atol": RESUME_ATOL,
            "optimizer_atol": OPTIMIZER_ATOL,
        },
        "parts": [],
    }
    for part in parts:
        print(f"gpu-acceptance: {part.name}: {part.what} (limit {part.budget_s} s)", flush=True)
        start = time.perf_counter()
        try:
            outcome = part.run(ctx)
        except Exception as exc:  # a part's crash is recorded, the others still run
            outcome = Outcome("error", f"{type(exc).__name__}: {exc}", output=tail(traceback.format_exc()))
        seconds = round(time.perf_counter() - start, 1)
        report["parts"].append(
            {"name": part.name, "what": part.what, "seconds": seconds, **dataclasses.asdict(outcome)}
        )
        report["status"] = overall(report["parts"])
        print(
            f"gpu-acceptance: {part.name}: {outcome.status.upper()} ({seconds} s) {outcome.summary}",
            flush=True,
        )
        on_update(report)
    report["status"] = overall(report["parts"])
    report["seconds"] = round(time.time() - report["started_unix"], 1)
    on_update(report)
    return report


def overall(parts: list[dict[str, Any]]) -> str:
    """pass when every part passed or was skipped; else fail."""
    return "pass" if all(p["status"] in ("pass", "skip") for p in parts) else "fail"


def render_markdown(report: dict[str, Any]) -> str:
    """The human half of the report."""
    lines = [
        f"# GPU acceptance: {report.get('status', 'running').upper()}",
        "",
        f"Host `{report['host']}`, {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(report['started_unix']))}"
        + (f", {report['seconds']} s" if "seconds" in report else " (in progress)"),
        "",
        "| part | status | seconds | summary |",
        "| --- | --- | --- | --- |",
    ]
    for p in report["parts"]:
        summary = p["summary"].replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {p['name']} | {p['status']} | {p['seconds']} | {summary} |")
    for p in report["parts"]:
        lines += ["", f"## {p['name']}: {p['status']}", "", p["what"], ""]
        if p["data"]:
            lines += ["```json", json.dumps(p["data"], indent=2, default=str), "```", ""]
        if p["output"]:
            lines += [
                "<details><summary>output (tail)</summary>",
                "",
                "```",
                p["output"],
                "```",
                "</details>",
            ]
    return "\n".join(lines) + "\n"


def write_report(report: dict[str, Any], out: Path) -> None:
    """report.json and report.md, each written atomically."""
    atomic_write_json(out / "report.json", report)
    atomic_write_text(out / "report.md", render_markdown(report))


# ------------------------------------------------------------------------------------------------ parts
def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def facts(ctx: Context) -> Outcome:
    import torch

    from trm.launch.nvidia_smi import query_driver_cuda, query_gpus
    from trm.training.checkpoint import git_sha

    data: dict[str, Any] = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "triton": _version("triton"),
        "adam_atan2": _version("adam-atan2") or _version("adam_atan2"),
        "trm_git_sha": git_sha(),
        "platform": platform.platform(),
    }
    problems = []
    try:
        driver, cuda = query_driver_cuda()
        data["driver"], data["driver_cuda"] = driver, cuda
        data["nvidia_smi"] = [g.to_dict() for g in query_gpus()]
    except Exception as exc:  # recorded; CUDA's own view below decides
        problems.append(f"nvidia-smi: {exc}")
    if not torch.cuda.is_available():
        return Outcome("fail", f"torch {torch.__version__} sees no CUDA GPU; " + "; ".join(problems), data)
    with contextlib.suppress(Exception):
        nccl = torch.cuda.nccl.version()
        data["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    data["cuda_devices"] = [
        {
            "index": i,
            "name": p.name,
            "total_memory_mib": p.total_memory // 2**20,
            "capability": f"{p.major}.{p.minor}",
            "multiprocessors": p.multi_processor_count,
        }
        for i, p in ((i, torch.cuda.get_device_properties(i)) for i in range(torch.cuda.device_count()))
    ]
    names = ", ".join(d["name"] for d in data["cuda_devices"])
    return Outcome(
        "pass", f"{len(data['cuda_devices'])} CUDA device(s): {names}; " + "; ".join(problems), data
    )


def gpu_tests(ctx: Context) -> Outcome:
    junit = ctx.work / "gpu-tests.xml"
    cmd = [ctx.python, "-m", "pytest", "-m", "gpu", "-q", "-rA", "-p", "no:cacheprovider",
           f"--junitxml={junit}", "tests"]  # fmt: skip
    code, output = run_command(
        cmd,
        ctx,
        timeout_s=GPU_TESTS_BUDGET_S,
        log_name="gpu-tests.log",
        env={**ctx.env, "TRM_REQUIRE_GPU": "1"},
    )
    if code is None:
        return Outcome("error", f"timed out after {GPU_TESTS_BUDGET_S} s", output=tail(output))
    counts = junit_counts(junit)
    summary = ", ".join(f"{v} {k}" for k, v in counts.items()) or "no junit report"
    ok = code == 0 and counts.get("tests", 0) > 0 and counts.get("skipped", 0) == 0
    return Outcome("pass" if ok else "fail", f"pytest exit {code}: {summary}", counts, tail(output))


def junit_counts(path: Path) -> dict[str, int]:
    """tests / failures / errors / skipped summed over a junit XML file's test suites."""
    if not path.is_file():
        return {}
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    return {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}


def optimizer(ctx: Context) -> Outcome:
    import torch

    from trm.optim import AdamATan2
    from trm.optim.backend import EXTENSION_INSTALL

    try:
        import adam_atan2
    except ImportError as err:
        return Outcome(
            "fail", f"the adam_atan2 extension does not import ({err}); install: {EXTENSION_INSTALL}"
        )
    gen = torch.Generator().manual_seed(0)
    p0 = torch.randn(256, 192, generator=gen, dtype=torch.float64) * 0.05
    grads = [torch.randn(256, 192, generator=gen, dtype=torch.float64) * 0.01 for _ in range(OPTIMIZER_STEPS)]
    data: dict[str, Any] = {"steps": OPTIMIZER_STEPS, "max_abs_diff": {}, "atol": OPTIMIZER_ATOL}
    for dtype_name in OPTIMIZER_ATOL:
        dtype = getattr(torch, dtype_name)
        finals = []
        for cls in (adam_atan2.AdamATan2, AdamATan2):
            param = torch.nn.Parameter(p0.to("cuda", dtype).clone())
            opt = cls([param], lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
            for g in grads:
                param.grad = g.to("cuda", dtype)
                opt.step()
            finals.append(param.detach().double().cpu())
        data["max_abs_diff"][dtype_name] = float((finals[0] - finals[1]).abs().max())
    bad = {k: v for k, v in data["max_abs_diff"].items() if v > OPTIMIZER_ATOL[k]}
    diffs = ", ".join(f"{k} {v:.3g} (≤ {OPTIMIZER_ATOL[k]:g})" for k, v in data["max_abs_diff"].items())
    return Outcome(
        "fail" if bad else "pass", f"max |ext − ours| after {OPTIMIZER_STEPS} steps: {diffs}", data
    )


def resume(ctx: Context) -> Outcome:
    import torch

    from trm import exit_codes
    from trm.training import checkpoint as ckpt

    work = ctx.work / "resume"
    dataset = work / "data"
    code, output = run_command(
        [ctx.python, "-m", "trm", "data", "build-arc", "--output-dir", str(dataset), "--subsets", "training",
         "evaluation", "--test-set-name", "evaluation", "--num-aug", "1", "--max-puzzles", "2", "--quiet"],
        ctx, timeout_s=120, log_name="resume-data.log",
    )  # fmt: skip
    if code != 0:
        return Outcome("error", f"building the tiny dataset failed (exit {code})", output=tail(output))

    def cmd(run_dir: Path) -> list[str]:
        return [ctx.python, "-m", "trm.train", *RESUME_OVERRIDES, f"data_paths=[{dataset}]",
                f"+checkpoint_path={run_dir}"]  # fmt: skip

    straight, split = work / "straight", work / "split"
    code, out_straight = run_command(
        cmd(straight), ctx, timeout_s=RUN_LIMIT_S, log_name="resume-straight.log"
    )
    if code != 0:
        return Outcome("fail", f"uninterrupted run exited {code}", output=tail(out_straight))
    code, out_stop = sigterm_after_step(cmd(split), split, ctx, step=2, log_name="resume-stopped.log")
    if code != exit_codes.SAVED_RETRY:
        return Outcome(
            "fail", f"SIGTERMed run exited {code}, expected {exit_codes.SAVED_RETRY}", output=tail(out_stop)
        )
    code, out_resumed = run_command(cmd(split), ctx, timeout_s=RUN_LIMIT_S, log_name="resume-resumed.log")
    if code != 0:
        return Outcome("fail", f"resumed run exited {code}", output=tail(out_resumed))
    data: dict[str, Any] = {
        "resumed": "resumed from" in out_resumed,
        "optimizer_backend_ext": "AdamATan2 backend: ext" in out_resumed,
        "rtol": RESUME_RTOL,
        "atol": RESUME_ATOL,
    }
    a = ckpt.load_torch(ckpt.find_complete(straight)[-1].path / ckpt.STATE)
    b = ckpt.load_torch(ckpt.find_complete(split)[-1].path / ckpt.STATE)
    data["progress_equal"] = a["progress"] == b["progress"]
    diffs = {k: float((a["model"][k].double() - b["model"][k].double()).abs().max()) for k in a["model"]}
    data["max_abs_diff"] = max(diffs.values(), default=0.0)
    data["bitwise"] = all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    close = all(
        torch.allclose(a["model"][k].double(), b["model"][k].double(), rtol=RESUME_RTOL, atol=RESUME_ATOL)
        for k in a["model"]
    )
    ok = close and data["progress_equal"] and data["resumed"] and data["optimizer_backend_ext"]
    why = [name for name, good in (("resumed", data["resumed"]), ("extension optimizer", data["optimizer_backend_ext"]),
                                   ("same progress", data["progress_equal"]), ("states within tolerance", close)) if not good]  # fmt: skip
    summary = (
        f"SIGTERM at step 2 → exit 75 → resume; max |diff| {data['max_abs_diff']:.3g}"
        f" (bitwise: {data['bitwise']})" + (f"; missing: {', '.join(why)}" if why else "")
    )
    return Outcome("pass" if ok else "fail", summary, data, tail(out_resumed))


def sigterm_after_step(
    cmd: list[str], run_dir: Path, ctx: Context, *, step: int, log_name: str, limit_s: float = 180
) -> tuple[int | None, str]:
    """Start `cmd`, SIGTERM it once `step` is in its metrics.jsonl, return (exit code, output)."""
    log = ctx.work / log_name
    with open(log, "w", encoding="utf-8") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env=ctx.env)
        deadline = time.time() + limit_s
        metrics = run_dir / "metrics.jsonl"
        while time.time() < deadline and proc.poll() is None:
            if metrics.exists() and any(
                json.loads(x).get("step", 0) >= step for x in metrics.read_text().splitlines() if x.strip()
            ):
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        try:
            code: int | None = proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = None
    return code, log.read_text(encoding="utf-8", errors="replace")


def probe(ctx: Context) -> Outcome:
    from trm.launch.hardware import load_table

    workspace = ctx.work / "probe-ws"
    env = {**ctx.env, "TASK": "arc2-smoke", "RUN_NAME": "gpu-acceptance-probe", "WORKSPACE": str(workspace),
           "NUM_GPUS": "1", "PROBE_STEPS": "4", "WANDB": "off"}  # fmt: skip
    code, output = run_command(
        [ctx.python, "-m", "trm", "select-config", "--probe"], ctx, timeout_s=PROBE_BUDGET_S,
        log_name="probe.log", env=env,
    )  # fmt: skip
    found = sorted(workspace.rglob("launch/probe.json"))
    if not found:
        return Outcome(
            "error" if code is None else "fail", f"no probe.json (exit {code})", output=tail(output)
        )
    record = json.loads(found[-1].read_text())
    last = record["attempts"][-1]
    peak = max((int(v) for v in last.get("peak_mib", {}).values()), default=None)
    vram = last.get("vram_mib")
    tier = next((t for t in load_table().tiers if t.name == record["tier"]), None)
    data = {
        "tier": record["tier"],
        "table_micro_batch_size": record["table_micro_batch_size"],
        "chosen_micro_batch_size": record["chosen_micro_batch_size"],
        "peak_mib": peak,
        "vram_mib": vram,
        "peak_fraction_of_vram": round(peak / vram, 3) if peak and vram else None,
        "tier_min_vram_gib": tier.min_vram_gib if tier else None,
        "step_seconds": last.get("step_seconds"),
        "drift": record.get("drift", []),
    }
    ok = (
        code == 0
        and record["chosen_micro_batch_size"] == record["table_micro_batch_size"]
        and peak is not None
    )
    summary = (
        f"tier {record['tier']} micro-batch {record['table_micro_batch_size']} → "
        f"{record['chosen_micro_batch_size']}; peak {peak} MiB of {vram} MiB"
        + (f" ({data['peak_fraction_of_vram']:.0%})" if data["peak_fraction_of_vram"] else "")
        + (f"; drift: {'; '.join(data['drift'])}" if data["drift"] else "")
    )
    return Outcome("pass" if ok else "fail", summary, data, tail(output))


_BENCH_LINE = re.compile(r"^(?P<label>\S+/(?:eager|compiled))\s+(?P<ms>[\d.]+) ms/step\s+(?P<sps>[\d.]+) steps/s"
                         r".*?(?: mfu=(?P<mfu>[\d.]+)%)?$")  # fmt: skip
_SPEEDUP = re.compile(r"^speedup (?P<what>.+?): (?P<ratio>[\d.]+)x vs upstream")


def parse_bench(output: str) -> dict[str, Any]:
    """ms/step, steps/s and MFU per variant, and the speedups against upstream, from trm.bench.model."""
    variants: dict[str, dict[str, float | None]] = {}
    speedups: dict[str, float] = {}
    for line in output.splitlines():
        if m := _BENCH_LINE.match(line.strip()):
            mfu = m.group("mfu")
            variants[m.group("label")] = {
                "ms_per_step": float(m.group("ms")),
                "steps_per_s": float(m.group("sps")),
                "mfu": float(mfu) / 100 if mfu else None,
            }
        elif m := _SPEEDUP.match(line.strip()):
            speedups[m.group("what")] = float(m.group("ratio"))
    return {"variants": variants, "speedup_vs_upstream": speedups}


def bench(ctx: Context) -> Outcome:
    cmd = [ctx.python, "-m", "trm.bench.model", "--config", "paper", "--steps", "20", "--no-attention-split"]
    upstream = ctx.env.get("TRM_UPSTREAM")
    code, output = run_command(cmd, ctx, timeout_s=BENCH_BUDGET_S, log_name="bench.log")
    if code is None:
        return Outcome("error", f"timed out after {BENCH_BUDGET_S} s", output=tail(output))
    data = parse_bench(output)
    data["upstream"] = upstream or None
    ours = data["variants"].get("ours/compiled") or data["variants"].get("ours/eager")
    if code != 0 or ours is None:
        return Outcome("fail", f"trm.bench.model exited {code}", data, tail(output))
    mfu = (
        f", MFU {ours['mfu']:.1%}" if ours["mfu"] is not None else ", MFU unknown (GPU not in the peak table)"
    )
    vs = "; ".join(f"{k} {v:.2f}x" for k, v in data["speedup_vs_upstream"].items())
    summary = f"paper config: {ours['ms_per_step']:.1f} ms/step{mfu}" + (
        f"; vs upstream: {vs}" if vs else "; upstream not compared (set TRM_UPSTREAM to a checkout)"
    )
    if upstream and not data["speedup_vs_upstream"]:
        return Outcome(
            "fail", summary + "; TRM_UPSTREAM was set but no comparison came out", data, tail(output)
        )
    return Outcome("pass", summary, data, tail(output))


GPU_TESTS_BUDGET_S = 300
RUN_LIMIT_S = 180  # one tiny training run of the resume part (compilation included)
PROBE_BUDGET_S = 360  # includes building the arc2-smoke dataset on first use
BENCH_BUDGET_S = 180

PARTS: tuple[Part, ...] = (
    Part("facts", "versions and GPU facts (nvidia-smi, MIG, CUDA devices)", 60, facts),
    Part("gpu-tests", "pytest -m gpu tests with TRM_REQUIRE_GPU=1 (a skip is a failure)", GPU_TESTS_BUDGET_S, gpu_tests),
    Part("optimizer", f"adam-atan2 extension vs our AdamATan2, {OPTIMIZER_STEPS} steps, fp32 and bf16", 60, optimizer),
    Part("resume", "CUDA bf16 + compile=auto run: SIGTERM, resume with the extension, equal to uninterrupted", 120 + 4 * RUN_LIMIT_S, resume),
    Part("probe", "select-config --probe (arc2-smoke, paper config): peak memory at the tier's micro-batch", PROBE_BUDGET_S, probe),
    Part("bench", "trm.bench.model --config paper: ms/step, MFU, vs upstream with TRM_UPSTREAM", BENCH_BUDGET_S, bench),
)  # fmt: skip


# -------------------------------------------------------------------------------------------------- CLI
def plan_text(parts: Sequence[Part], out: Path, env: dict[str, str]) -> str:
    lines = [
        f"gpu acceptance plan: {len(parts)} part(s); report: {out / 'report.json'} and {out / 'report.md'}"
    ]
    lines += [f"  {p.name:10s} ≤{p.budget_s:4d} s  {p.what}" for p in parts]
    upstream = env.get("TRM_UPSTREAM")
    lines.append(f"  upstream: {upstream if upstream else 'not compared (TRM_UPSTREAM unset)'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None, parts: Sequence[Part] = PARTS) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trm.launch.gpu_acceptance", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--dry-run", action="store_true", help="print the plan; run nothing")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"report folder (default {DEFAULT_OUT})"
    )
    parser.add_argument("--only", nargs="+", metavar="PART", help="run only these parts")
    args = parser.parse_args(argv)
    args.out = args.out.resolve()  # parts run their commands from the repository root
    names = [p.name for p in parts]
    unknown = sorted(set(args.only or []) - set(names))
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(names)}")
    chosen = [p for p in parts if not args.only or p.name in args.only]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "WANDB_MODE": "disabled"}
    print(plan_text(chosen, args.out, env), flush=True)
    if args.dry_run:
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.out / "work"
    work.mkdir(exist_ok=True)
    ctx = Context(out=args.out, work=work, python=sys.executable, env=env)
    report = run_parts(chosen, ctx, lambda r: write_report(r, args.out))
    print(f"gpu-acceptance: {report['status'].upper()}; report: {args.out / 'report.md'}", flush=True)
    return 0 if report["status"] == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
