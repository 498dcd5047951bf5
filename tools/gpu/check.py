"""GPU host acceptance: one command that checks a host with NVIDIA GPUs end to end, within a time budget.

    python -m tools.gpu.check --call 1|2 [--budget-s 540] [--out DIR] [--kit DIR] [--extension-dir DIR]
    python -m tools.gpu.check [--budget-s 540] [--profile quick|full] [--require-extension]
                                        [--dry-run] [--out build/gpu-acceptance] [--only PART ...]
    make gpu-run-1 / make gpu-run-2       make gpu-check ARGS="..."       nox -s gpu_acceptance -- ...

It runs with the Python it is started with and that Python's own torch (2.10–2.13 accepted, never
installed or replaced) from a checkout of this repository: a dev venv, or a host Python with the GPU kit
(`make gpu-kit`, installed `--no-index`), or our GPU image with the checkout and kit mounted
(docs/gpu-host-checks.md). A short GPU loan is two calls (CALLS): call 1 proves (the gpu test set, the
extension against ours, training on the extension) while the extension builds; call 2, right after it,
measures (the probe, our trainer against upstream's, the SDPA backends, a profiler split). Without --call
every part runs in one go, the proof first. Parts, each recorded as pass / fail / error / skip with its
numbers, its output's tail, its planned and measured time:

  facts            versions (python, the host's torch and its CUDA, cuDNN, NCCL, triton, adam-atan2, git) and
                   GPU facts (nvidia-smi, MIG slices, what CUDA reports)
  kit              pip install --no-index of the GPU kit (skipped without one)
  imports          what the check and a training run import (trm.train, hydra, omegaconf, pytest, …)
  extension-build  checks nvcc (present, of torch's CUDA major), then builds adam-atan2 from the kit's sdist
                   for the visible GPUs' SM, detached, in --extension-dir (when it does not import already);
                   call 1 leaves an unfinished build running, call 2 picks it up (tools.gpu.extension)
  collect          the test suite collects on this host (no error, no module skipped as a whole)
  gpu-tests        the `gpu`-marked tests, TRM_REQUIRE_GPU=1 (a skipped gpu test counts as a failure); the
                   quick profile leaves out the test the `resume` part repeats
  optimizer        the extension against our AdamATan2 over 100 steps (fp32, bf16) and the extension's own
                   gpu tests
  resume           a CUDA bf16 + compile=auto run SIGTERMed after step 2, resumed, equal to an uninterrupted
                   run (RESUME_RTOL / RESUME_ATOL; bitwise recorded); records the AdamATan2 backend that ran
  probe            `select-config --probe` of the paper config: peak memory and seconds per optimizer step
  step-ab          `python -m tools.bench.train --setup paper` against upstream's trainer (the kit's checkout
                   or TRM_UPSTREAM): ours, upstream, ours, each timing >= STEP_AB_MIN_STEPS steps
  sdpa             `python -m tools.bench.sdpa`: cuDNN / flash / efficient / math attention at head dim 64,
                   sequence 916
  profile          `python -m tools.bench.step_profile`: a compiled paper step's time in matmul, attention,
                   elementwise, other and idle
  bench            (optional) `python -m tools.bench.model --config paper`: ms/step, MFU, compile time
  checkpoint       (optional) `python -m tools.bench.checkpoint --device cuda`: the loop blocked by an
                   asynchronous save (pinned buffers) vs a synchronous one, same sha256s
  eval             (optional) `python -m tools.bench.eval --config paper`: evaluation rows/s

The extension: once this run started its build (or with --require-extension, which --call implies) the
parts that train or run the gpu tests wait for it, put it on PYTHONPATH and set TRM_REQUIRE_ADAM_EXT=1,
which every child inherits: the trainer then refuses the torch fallback (trm.optim.backend), so a run
cannot pass on the torch backend; a build that failed fails those parts without running them.

Budget: a part starts only when its planned H100 time fits in what is left of `--budget-s`, and runs at
most that long; otherwise it is "skipped for time", which the report's status_reason (and the title of
report.md) names; a required part skipped for time makes the status "incomplete", never "pass" (optional
parts leave the verdict alone). Without a CUDA device the CUDA parts are "skipped: no GPU" and the others
still run.

The report (report.json + report.md) is written atomically to the output folder after every part, so an
interrupted run still leaves what it measured. Exit codes: 0 every part passed (or was not wanted here),
1 some part failed or errored, 2 bad arguments, 3 nothing failed but parts were skipped (no GPU, or out
of time). `--dry-run` prints the plan and touches neither the GPU nor the output folder.
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
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tools import checkout_env
from tools.gpu.extension import ExtensionBuild, prerequisite_problem
from trm.io import atomic_write_json, atomic_write_text
from trm.optim.backend import REQUIRE_EXTENSION_ENV

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = Path("build/gpu-acceptance")
# Where the check finds the GPU kit (tools.gpu.kit writes it): the adam-atan2 sdist, an upstream checkout.
DEFAULT_KIT = Path("build/gpu-kit")
ADAM_SDIST = "adam_atan2-0.0.3.tar.gz"
UPSTREAM_DIR = "upstream"
DEFAULT_BUDGET_S = 540  # a 10-minute call, with a minute for starting and copying the report back
PROFILES = ("quick", "full")
STATUSES = ("pass", "fail", "error", "skip")
# Why a part was skipped: no CUDA device, not enough budget left, or not wanted on this host.
NO_GPU, NO_TIME, NOT_WANTED = "no-gpu", "time", "not-wanted"
OUTPUT_TAIL = 4000  # characters of each part's output kept in the report
TORCH_SUPPORTED = ((2, 10), (2, 13))  # the host torch versions the check (and training) accept, inclusive

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
# The gpu test that runs the same SIGTERM/resume flow as the `resume` part: the quick profile leaves it out.
RESUME_TWIN_TEST = "test_cuda_run_is_bf16_compiled_evaluates_and_resumes_to_the_same_end"
PROBE_STEPS = {"quick": 5, "full": 10}  # optimizer steps; the first probe.WARMUP_STEPS are not timed
BENCH_STEPS = {"quick": ("5", "1"), "full": ("20", "3")}  # (timed, warm-up) steps per variant
# Separate first-compile timings from a fresh cache (one per model) in the full profile; the quick profile
# reads the compile time off the compiled variants' first step, which runs first on a fresh host (the bench
# part comes before every other part that compiles the paper config).
BENCH_COMPILE_REPEATS = {"quick": "0", "full": "1"}
# pytest-xdist workers for the gpu tests (each module in one worker, --dist loadfile): the tests are mostly
# compilation, which is CPU work; one worker where the host has fewer than 8 cores.
GPU_TEST_WORKERS = 4
_BACKEND_LINE = re.compile(r"AdamATan2 backend: (\w+)")


@dataclasses.dataclass
class Outcome:
    """What one part found; `skipped` says why a skip happened (NO_GPU, NO_TIME or NOT_WANTED)."""

    status: str
    summary: str
    data: dict[str, Any] = dataclasses.field(default_factory=dict)
    output: str = ""
    skipped: str | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {STATUSES}")


@dataclasses.dataclass
class Context:
    """Where parts write, what they run with, and how long they may take."""

    out: Path
    work: Path
    python: str
    env: dict[str, str]
    profile: str = "quick"
    deadline: float = float("inf")  # time.monotonic() at which the budget ends
    require_extension: bool = False
    adam_sdist: Path | None = None
    extension: ExtensionBuild | None = None
    kit: Path = ROOT / DEFAULT_KIT
    # Where the extension is built; two calls share it (call 1 starts the build, call 2 picks it up).
    extension_dir: Path | None = None
    # Leave an unfinished build running when the check ends (call 1: call 2 reuses it).
    keep_extension_build: bool = False

    def __post_init__(self) -> None:
        if self.extension_dir is None:
            self.extension_dir = self.work / "extension"

    def seconds_left(self) -> float:
        return self.deadline - time.monotonic()

    def limit(self, part_limit_s: float) -> float:
        """A command's time limit: the part's own, cut to what is left of the budget."""
        return max(1.0, min(part_limit_s, self.seconds_left()))


@dataclasses.dataclass(frozen=True)
class Part:
    """One check: its name, a one-line description, its planned seconds on one H100 per profile, a hard
    limit, whether it needs a CUDA device, the function, and whether the check's verdict needs it (the plan
    must fit the budget with the required parts; the others run when time is left)."""

    name: str
    what: str
    planned_s: dict[str, int]
    limit_s: int
    run: Callable[[Context], Outcome]
    needs_cuda: bool = True
    required: bool = True


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


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


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


def render_markdown(report: dict[str, Any]) -> str:
    """The human half of the report."""
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(report["started_unix"]))
    lines = [
        f"# GPU acceptance: {report.get('status', 'running').upper()}"
        + (f" ({report['status_reason']})" if report.get("status_reason") else ""),
        "",
        f"Host `{report['host']}`, {when}"
        + (f", {report['seconds']} s" if "seconds" in report else " (in progress)")
        + f"; profile {report['profile']}, budget {report['budget_s']:g} s, planned on one H100"
        f" {report['planned_h100_s']} s, required parts {report['planned_required_h100_s']} s"
        f" ({'fits' if report['plan_fits_budget'] else 'does NOT fit'})",
        "",
        "| part | status | planned s (H100) | seconds | summary |",
        "| --- | --- | --- | --- | --- |",
    ]
    for p in report["parts"]:
        summary = p["summary"].replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {p['name']} | {p['status']} | {p['planned_s']} | {p['seconds']} | {summary} |")
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


def torch_supported(version: str) -> bool:
    """Whether a torch version string (e.g. "2.11.0+cu130") is within TORCH_SUPPORTED."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return bool(match) and TORCH_SUPPORTED[0] <= (int(match[1]), int(match[2])) <= TORCH_SUPPORTED[1]


def facts(ctx: Context) -> Outcome:
    import torch

    from trm.launch.host.nvidia_smi import query_driver_cuda, query_gpus
    from trm.training.checkpoint import git_sha

    low, high = (".".join(map(str, v)) for v in TORCH_SUPPORTED)
    data: dict[str, Any] = {
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "torch": torch.__version__,
        "torch_location": str(Path(torch.__file__).parent),
        "torch_supported": f"{low}–{high}",
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "triton": _version("triton"),
        "adam_atan2": _version("adam-atan2") or _version("adam_atan2"),
        "trm_git_sha": git_sha(),
        "platform": platform.platform(),
        "cuda_available": torch.cuda.is_available(),
    }
    problems = []
    try:
        driver, cuda = query_driver_cuda()
        data["driver"], data["driver_cuda"] = driver, cuda
        data["nvidia_smi"] = [g.to_dict() for g in query_gpus()]
    except Exception as exc:  # recorded; CUDA's own view below decides
        problems.append(f"nvidia-smi: {exc}")
    if torch.cuda.is_available():
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
    devices = data.get("cuda_devices", [])
    where = (
        f"{len(devices)} CUDA device(s): {', '.join(d['name'] for d in devices)}"
        if devices
        else "no CUDA device"
    )
    summary = f"torch {torch.__version__} (this Python's own, used as it is); {where}"
    summary += "".join(f"; {p}" for p in problems)
    if not torch_supported(torch.__version__):
        return Outcome("fail", f"{summary}; torch outside the supported {low}–{high}", data)
    return Outcome("pass", summary, data)


# What the check and a training run import, beyond torch (the GPU kit provides what the host lacks).
REQUIRED_IMPORTS = (
    "numpy",
    "hydra",
    "omegaconf",
    "yaml",
    "tqdm",
    "pytest",
    "trm.train",
    "trm.eval",
    "tools.bench.model",
)


def imports(ctx: Context) -> Outcome:
    probe = (
        "import importlib, json, sys\n"
        "missing = {}\n"
        f"for name in {list(REQUIRED_IMPORTS)!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as err:\n"
        "        missing[name] = f'{type(err).__name__}: {err}'\n"
        "print(json.dumps(missing))\n"
    )
    code, output = run_command(
        [ctx.python, "-c", probe], ctx, timeout_s=ctx.limit(120), log_name="imports.log"
    )
    lines = output.strip().splitlines()
    missing = json.loads(lines[-1]) if code == 0 and lines else {"(probe)": f"exit {code}"}
    if missing:
        names = ", ".join(missing)
        return Outcome(
            "fail",
            f"cannot import {names}: install the GPU kit (`make gpu-kit`, then pip install --no-index "
            "--find-links build/gpu-kit -r build/gpu-kit/requirements.txt)",
            {"missing": missing},
            tail(output),
        )
    return Outcome("pass", f"{len(REQUIRED_IMPORTS)} modules import: {', '.join(REQUIRED_IMPORTS)}")


def extension_imports(python: str, env: dict[str, str]) -> bool:
    code = subprocess.run([python, "-c", "import adam_atan2, adam_atan2_backend"], env=env, cwd=ROOT,
                          capture_output=True).returncode  # fmt: skip
    return code == 0


def extension_build(ctx: Context) -> Outcome:
    """Start the build in the background, or pick up the one an earlier call left in ctx.extension_dir."""
    if extension_imports(ctx.python, ctx.env):
        return Outcome("skip", "adam_atan2 already imports here: nothing to build", skipped=NOT_WANTED)
    assert ctx.extension_dir is not None
    earlier = ExtensionBuild.find(ctx.extension_dir)
    if earlier is not None:
        state = earlier.state()
        if state == "running" or (
            state == "built" and extension_imports(ctx.python, site_env(ctx.env, earlier.site))
        ):
            ctx.extension = earlier
            return Outcome(
                "pass",
                f"picked up the build an earlier call started {earlier.seconds():.0f} s ago ({state}, pid "
                f"{earlier.record['pid']}); log {earlier.log}",
                {"picked_up": True, "state": state, "command": earlier.cmd},
            )
    sdist = ctx.adam_sdist
    if sdist is None or not sdist.is_file():
        why = f"no adam-atan2 sdist at {sdist} (make gpu-kit puts it there)"
        return Outcome(
            "fail" if ctx.require_extension else "skip",
            why,
            skipped=None if ctx.require_extension else NOT_WANTED,
        )
    import torch

    from trm.images.buildtools import visible_gpu_archs

    problem = prerequisite_problem(ctx.env, torch.version.cuda, visible_gpu_archs())
    if problem is not None:
        return Outcome(
            "fail" if ctx.require_extension else "skip",
            f"cannot build the extension: {problem}",
            skipped=None if ctx.require_extension else NOT_WANTED,
        )
    jobs = max(1, (os.cpu_count() or 2) // 2)  # collect and the first gpu tests use the other half
    site = ctx.extension_dir / "site"
    cmd = [ctx.python, "-m", "trm.images.buildtools", "install-adam-atan2", "--sdist", str(sdist),
           "--target", str(site), "--jobs", str(jobs)]  # fmt: skip
    ctx.extension = ExtensionBuild.start(ctx.extension_dir, cmd, ctx.env, ROOT)
    return Outcome(
        "pass",
        f"started in the background with {jobs} job(s) (pid {ctx.extension.record['pid']}); log {ctx.extension.log}",
        {"command": cmd, "picked_up": False},
    )


def site_env(env: dict[str, str], site: Path) -> dict[str, str]:
    """`env` with `site` first on PYTHONPATH."""
    path = [str(site), env.get("PYTHONPATH", "")]
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in path if p)}


def with_extension(ctx: Context) -> dict[str, str]:
    """The environment of later commands: the built extension (if any) on PYTHONPATH."""
    if ctx.extension is None or not ctx.extension.site.is_dir():
        return ctx.env
    return site_env(ctx.env, ctx.extension.site)


def extension_required(ctx: Context) -> bool:
    """Whether training and the gpu tests must use the extension: asked for, or built (started) in this run."""
    return ctx.require_extension or ctx.extension is not None


def extension_env(ctx: Context, wait_s: float) -> tuple[dict[str, str], str | None]:
    """(environment, problem) for the parts that train or run the gpu tests. When the extension is required,
    this waits up to `wait_s` for the build, puts it on PYTHONPATH and sets TRM_REQUIRE_ADAM_EXT=1, which
    every child inherits (the trainer then refuses the torch fallback); problem says why it cannot."""
    if not extension_required(ctx):
        return ctx.env, None
    if extension_imports(ctx.python, ctx.env):
        return {**ctx.env, REQUIRE_EXTENSION_ENV: "1"}, None
    if ctx.extension is None:
        return ctx.env, "the extension is required but no build was started (see extension-build)"
    built, note = ctx.extension.wait(wait_s)
    env = {**with_extension(ctx), REQUIRE_EXTENSION_ENV: "1"}
    if not built:
        return env, f"the adam_atan2 extension this run builds is not ready: {note}"
    if not extension_imports(ctx.python, env):
        return env, f"the adam_atan2 extension was built but does not import ({note})"
    return env, None


def pytest_command(ctx: Context, *args: str, workers: int = 1) -> list[str]:
    """pytest with only the plugins the suite uses: a host Python's own plugins (pytest-benchmark, seen on
    an H100 host, errors out beside xdist under our warnings-as-errors) are not loaded; see PYTEST_ENV."""
    cmd = [ctx.python, "-m", "pytest", "-p", "no:cacheprovider", *args]
    if workers > 1:
        cmd += ["-p", "xdist.plugin", "-n", str(workers), "--dist", "loadfile"]
    return [*cmd, "tests"]


# The environment of every pytest the check starts (with pytest_command).
PYTEST_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def collect(ctx: Context) -> Outcome:
    env = {k: v for k, v in ctx.env.items() if k != "TRM_REQUIRE_GPU"}  # collecting needs no GPU
    env.update(PYTEST_ENV)
    cmd = pytest_command(ctx, "--collect-only", "-q", "-rs", "-m", "gpu")
    code, output = run_command(cmd, ctx, timeout_s=ctx.limit(180), log_name="collect.log", env=env)
    gpu_tests = sum(
        1 for line in output.splitlines() if "::" in line and not line.startswith(("SKIPPED", "ERROR"))
    )
    skipped = [line for line in output.splitlines() if line.startswith("SKIPPED")]
    data = {"gpu_tests": gpu_tests, "module_skips": skipped}
    if code is None:
        return Outcome("error", "collection timed out", data, tail(output))
    if code != 0 or skipped or gpu_tests == 0:
        why = f"pytest exit {code}" + (f"; {len(skipped)} module(s) skipped as a whole" if skipped else "")
        return Outcome("fail", f"the test suite does not collect cleanly here ({why})", data, tail(output))
    return Outcome("pass", f"the suite collects; {gpu_tests} gpu test(s)", data)


def gpu_tests(ctx: Context) -> Outcome:
    junit = ctx.work / "gpu-tests.xml"
    select = "gpu and not adam_ext"  # the extension's own tests run in `optimizer`, once it is built
    args = ["-m", select, "-q", "-rA", f"--junitxml={junit}"]
    if ctx.profile == "quick":
        args += ["-k", f"not {RESUME_TWIN_TEST}"]
    workers = GPU_TEST_WORKERS if (os.cpu_count() or 1) >= 8 else 1
    cmd = pytest_command(ctx, *args, workers=workers)
    env, problem = extension_env(ctx, ctx.limit(EXTENSION_WAIT_S))
    if problem is not None:
        return Outcome("fail", f"not run: {problem}", {"extension_required": True})
    limit = ctx.limit(GPU_TESTS_LIMIT_S)
    code, output = run_command(
        cmd,
        ctx,
        timeout_s=limit,
        log_name="gpu-tests.log",
        env={**env, **PYTEST_ENV, "TRM_REQUIRE_GPU": "1"},
    )
    if code is None:
        return Outcome("error", f"timed out after {limit:.0f} s", output=tail(output))
    counts: dict[str, Any] = junit_counts(junit)
    required = env.get(REQUIRE_EXTENSION_ENV) == "1"
    summary = ", ".join(f"{v} {k}" for k, v in counts.items()) or "no junit report"
    summary += "; AdamATan2 on CUDA: the extension, required" if required else "; extension not required"
    counts["extension_required"] = required
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
    from trm.optim.backend import EXTENSION_INSTALL

    env = ctx.env
    build_note = "adam_atan2 imported before the check"
    if not extension_imports(ctx.python, env):
        built, build_note = (
            (False, "no build was started")
            if ctx.extension is None
            else ctx.extension.wait(ctx.limit(OPTIMIZER_LIMIT_S) - 30)
        )
        env = with_extension(ctx)
        if not (built and extension_imports(ctx.python, env)):
            why = f"the adam_atan2 extension is not available ({build_note}); install: {EXTENSION_INSTALL}"
            if ctx.require_extension:
                return Outcome("fail", why)
            return Outcome("skip", why + "; training uses the torch backend (--require-extension to insist)",
                           skipped=NOT_WANTED)  # fmt: skip
    code, output = run_command(
        [ctx.python, "-m", "tools.gpu.check", "--compare-optimizer"],
        ctx, timeout_s=ctx.limit(60), log_name="optimizer.log", env=env,
    )  # fmt: skip
    lines = output.strip().splitlines()
    if code != 0 or not lines:
        return Outcome("fail", f"the comparison exited {code}", output=tail(output))
    data = json.loads(lines[-1])
    data["build"] = build_note
    junit = ctx.work / "adam-ext-tests.xml"
    code, test_output = run_command(
        pytest_command(ctx, "-m", "gpu and adam_ext", "-q", f"--junitxml={junit}"),
        ctx, timeout_s=ctx.limit(120), log_name="adam-ext-tests.log", env={**env, **PYTEST_ENV, "TRM_REQUIRE_GPU": "1"},
    )  # fmt: skip
    data["extension_tests"] = junit_counts(junit)
    bad = {k: v for k, v in data["max_abs_diff"].items() if v > OPTIMIZER_ATOL[k]}
    diffs = ", ".join(f"{k} {v:.3g} (≤ {OPTIMIZER_ATOL[k]:g})" for k, v in data["max_abs_diff"].items())
    summary = f"max |ext − ours| after {OPTIMIZER_STEPS} steps: {diffs}; extension tests: pytest exit {code}"
    return Outcome("fail" if bad or code != 0 else "pass", summary, data, tail(test_output))


def compare_optimizer() -> dict[str, Any]:
    """The extension against our AdamATan2 on CUDA over OPTIMIZER_STEPS steps, per dtype (max |diff|)."""
    import adam_atan2
    import torch

    from trm.optim import AdamATan2

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
    return data


def optimizer_backend(log_text: str) -> str | None:
    """The AdamATan2 backend a training log names ("ext" or "torch"), None when it names none."""
    found = _BACKEND_LINE.findall(log_text)
    return found[-1] if found else None


def resume(ctx: Context) -> Outcome:
    import torch

    from trm import exit_codes
    from trm.training import checkpoint as ckpt

    work = ctx.work / "resume"
    dataset = work / "data"
    env, problem = extension_env(ctx, ctx.limit(EXTENSION_WAIT_S))
    if problem is not None:
        return Outcome("fail", f"not run: {problem}", {"extension_required": True})
    code, output = run_command(
        [ctx.python, "-m", "trm", "data", "build-arc", "--output-dir", str(dataset), "--subsets", "training",
         "evaluation", "--test-set-name", "evaluation", "--num-aug", "1", "--max-puzzles", "2", "--quiet"],
        ctx, timeout_s=ctx.limit(120), log_name="resume-data.log", env=env,
    )  # fmt: skip
    if code != 0:
        return Outcome("error", f"building the tiny dataset failed (exit {code})", output=tail(output))

    def cmd(run_dir: Path) -> list[str]:
        return [ctx.python, "-m", "trm.train", *RESUME_OVERRIDES, f"data_paths=[{dataset}]",
                f"+checkpoint_path={run_dir}"]  # fmt: skip

    straight, split = work / "straight", work / "split"
    code, out_straight = run_command(
        cmd(straight), ctx, timeout_s=ctx.limit(RUN_LIMIT_S), log_name="resume-straight.log", env=env
    )
    if code != 0:
        return Outcome("fail", f"uninterrupted run exited {code}", output=tail(out_straight))
    code, out_stop = sigterm_after_step(
        cmd(split), split, ctx, step=2, log_name="resume-stopped.log", limit_s=ctx.limit(RUN_LIMIT_S), env=env
    )
    if code != exit_codes.SAVED_RETRY:
        return Outcome(
            "fail", f"SIGTERMed run exited {code}, expected {exit_codes.SAVED_RETRY}", output=tail(out_stop)
        )
    code, out_resumed = run_command(
        cmd(split), ctx, timeout_s=ctx.limit(RUN_LIMIT_S), log_name="resume-resumed.log", env=env
    )
    if code != 0:
        return Outcome("fail", f"resumed run exited {code}", output=tail(out_resumed))
    backend = optimizer_backend(out_resumed)
    data: dict[str, Any] = {
        "resumed": "resumed from" in out_resumed,
        "optimizer_backend": backend,
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
    required = env.get(REQUIRE_EXTENSION_ENV) == "1"
    data["extension_required"] = required
    backend_ok = backend == "ext" if required else backend in ("ext", "torch")
    checks = (("resumed", data["resumed"]), ("the extension optimizer" if required else
              "a logged optimizer backend", backend_ok), ("same progress", data["progress_equal"]),
              ("states within tolerance", close))  # fmt: skip
    why = [name for name, good in checks if not good]
    summary = (
        f"SIGTERM at step 2 → exit 75 → resume; max |diff| {data['max_abs_diff']:.3g}"
        f" (bitwise: {data['bitwise']}); AdamATan2 backend: {backend}"
        + (f"; missing: {', '.join(why)}" if why else "")
    )
    return Outcome("fail" if why else "pass", summary, data, tail(out_resumed))


def sigterm_after_step(
    cmd: list[str], run_dir: Path, ctx: Context, *, step: int, log_name: str, limit_s: float = 180,
    env: dict[str, str] | None = None,
) -> tuple[int | None, str]:  # fmt: skip
    """Start `cmd`, SIGTERM it once `step` is in its metrics.jsonl, return (exit code, output)."""
    log = ctx.work / log_name
    with open(log, "w", encoding="utf-8") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env=env or ctx.env)
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
    from trm.launch.host.hardware import load_table

    workspace = ctx.work / "probe-ws"
    steps = PROBE_STEPS[ctx.profile]
    base, problem = extension_env(ctx, ctx.limit(EXTENSION_WAIT_S))
    if problem is not None:
        return Outcome("fail", f"not run: {problem}", {"extension_required": True})
    env = {**base, "TASK": "arc2-smoke", "RUN_NAME": "gpu-acceptance-probe",
           "WORKSPACE": str(workspace), "NUM_GPUS": "1", "PROBE_STEPS": str(steps), "WANDB": "off"}  # fmt: skip
    code, output = run_command(
        [ctx.python, "-m", "trm", "select-config", "--probe"], ctx, timeout_s=ctx.limit(PROBE_LIMIT_S),
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
        "probe_steps": steps,
        "step_seconds": last.get("step_seconds"),
        "steps_timed": last.get("steps_timed"),
        "drift": record.get("drift", []),
    }
    timed = data["step_seconds"] is not None
    ok = (
        code == 0
        and record["chosen_micro_batch_size"] == record["table_micro_batch_size"]
        and peak is not None
        and timed
    )
    summary = (
        f"tier {record['tier']} micro-batch {record['table_micro_batch_size']} → "
        f"{record['chosen_micro_batch_size']}; peak {peak} MiB of {vram} MiB"
        + (f" ({data['peak_fraction_of_vram']:.0%})" if data["peak_fraction_of_vram"] else "")
        + (
            f"; {data['step_seconds']} s/step over {data['steps_timed']} step(s)"
            if timed
            else "; no step timed"
        )
        + (f"; drift: {'; '.join(data['drift'])}" if data["drift"] else "")
    )
    return Outcome("pass" if ok else "fail", summary, data, tail(output))


_BENCH_LINE = re.compile(r"^(?P<label>\S+/(?:eager|compiled))\s+(?P<ms>[\d.]+) ms/step\s+(?P<sps>[\d.]+) steps/s"
                         r"(?: \((?:first step|compile) (?P<first>[\d.]+) s\))?.*?(?: mfu=(?P<mfu>[\d.]+)%)?$")  # fmt: skip
_SPEEDUP = re.compile(r"^speedup (?P<what>.+?): (?P<ratio>[\d.]+)x vs upstream")


def parse_bench(output: str) -> dict[str, Any]:
    """ms/step, steps/s and MFU per variant, and the speedups against upstream, from tools.bench.model."""
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
            if m.group("first"):  # compiled variants: the compile (and one step)
                variants[m.group("label")]["first_step_s"] = float(m.group("first"))
        elif m := _SPEEDUP.match(line.strip()):
            speedups[m.group("what")] = float(m.group("ratio"))
    return {"variants": variants, "speedup_vs_upstream": speedups}


def upstream_checkout(env: dict[str, str], kit: Path = ROOT / DEFAULT_KIT) -> str | None:
    """TRM_UPSTREAM, else the GPU kit's upstream checkout when it has one."""
    if env.get("TRM_UPSTREAM"):
        return env["TRM_UPSTREAM"]
    kit_upstream = kit / UPSTREAM_DIR
    return str(kit_upstream) if kit_upstream.is_dir() else None


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


def kit_install(ctx: Context) -> Outcome:
    """pip install the GPU kit offline into this Python (adds what it lacks, keeps what it has)."""
    requirements = ctx.kit / "requirements.txt"
    if not requirements.is_file():
        return Outcome("skip", f"no kit at {ctx.kit} (no requirements.txt): this Python's own packages are used",
                       skipped=NOT_WANTED)  # fmt: skip
    cmd = [
        ctx.python,
        "-m",
        "pip",
        "install",
        "--no-index",
        "--find-links",
        str(ctx.kit),
        "-r",
        str(requirements),
    ]
    limit = ctx.limit(KIT_LIMIT_S)
    code, output = run_command(cmd, ctx, timeout_s=limit, log_name="kit.log")
    if code is None:
        return Outcome("error", f"pip timed out after {limit:.0f} s", output=tail(output))
    if code != 0:
        return Outcome("fail", f"pip install --no-index from {ctx.kit} exited {code}", output=tail(output))
    return Outcome("pass", f"the kit installed offline from {ctx.kit}", {"command": cmd}, tail(output))


_TRAIN_OURS = re.compile(
    r"trm-stack: +(?P<sps>[\d.]+) steps/s \((?P<s>[\d.]+) s/step median of (?P<n>\d+)(?:, MFU (?P<mfu>[\d.]+)%)?"
)
_TRAIN_THEIRS = re.compile(
    r"upstream: +(?P<sps>[\d.]+) steps/s \((?P<s>[\d.]+) s/step(?: median of (?P<n>\d+))?(?:, MFU (?P<mfu>[\d.]+)%)?"
)
_TRAIN_FAILED = re.compile(r"upstream: +could not run: (?P<why>.*)")
_TRAIN_RATIO = re.compile(r"ratio: +(?P<ratio>[\d.]+)x")


def parse_step_ab(output: str) -> dict[str, Any]:
    """ours / upstream s per step, timed steps and MFU, and the ratio, from tools.bench.train's table."""
    data: dict[str, Any] = {}
    for line in output.splitlines():
        for key, pattern in (("ours", _TRAIN_OURS), ("upstream", _TRAIN_THEIRS)):
            if m := pattern.search(line):
                data[key] = {"s_per_step": float(m["s"]), "steps_per_s": float(m["sps"]),
                             "timed_steps": int(m["n"]) if m["n"] else None,
                             "mfu": float(m["mfu"]) / 100 if m["mfu"] else None}  # fmt: skip
        if m := _TRAIN_FAILED.search(line):
            data["upstream_failed"] = m["why"].strip()
        elif m := _TRAIN_RATIO.search(line):
            data["ratio_vs_upstream"] = float(m["ratio"])
    return data


def step_ab(ctx: Context) -> Outcome:
    """Our trainer against upstream's at the paper setup, interleaved (ours, upstream, ours), each timing at
    least STEP_AB_MIN_STEPS steps after the warm-up, both on the extension optimizer when it is required."""
    upstream = upstream_checkout(ctx.env, ctx.kit)
    if upstream is None:
        return Outcome(
            "fail", "no upstream checkout: build the kit with `make gpu-kit UPSTREAM=DIR` or set TRM_UPSTREAM"
        )
    env, problem = extension_env(ctx, ctx.limit(EXTENSION_WAIT_S))
    if problem is not None:
        return Outcome("fail", f"not run: {problem}", {"extension_required": True})
    cmd = [ctx.python, "-m", "tools.bench.train", "--setup", "paper", "--steps", str(STEP_AB_STEPS),
           "--keep", str(ctx.work / "step-ab")]  # fmt: skip
    limit = ctx.limit(STEP_AB_LIMIT_S)
    code, output = run_command(
        cmd, ctx, timeout_s=limit, log_name="step-ab.log", env={**env, "TRM_UPSTREAM": upstream}
    )
    if code is None:
        return Outcome("error", f"timed out after {limit:.0f} s", output=tail(output))
    data = parse_step_ab(output)
    data.update(upstream_checkout=upstream, steps_per_run=STEP_AB_STEPS, measured=True)
    ours, theirs = data.get("ours"), data.get("upstream")
    if code != 0 or ours is None:
        return Outcome("fail", f"tools.bench.train exited {code}", data, tail(output))
    if theirs is None or "ratio_vs_upstream" not in data:
        return Outcome("fail", f"ours {ours['s_per_step']:.3f} s/step; upstream did not run: "
                       f"{data.get('upstream_failed', 'no line')}", data, tail(output))  # fmt: skip
    short = [name for name, r, need in (("ours", ours, 2 * STEP_AB_MIN_STEPS), ("upstream", theirs, STEP_AB_MIN_STEPS))
             if r["timed_steps"] is not None and r["timed_steps"] < need]  # fmt: skip
    summary = (
        f"paper setup, interleaved ours/upstream/ours: ours {ours['s_per_step']:.3f} s/step ({ours['timed_steps']} steps),"
        f" upstream {theirs['s_per_step']:.3f} s/step ({theirs['timed_steps']} steps): {data['ratio_vs_upstream']:.2f}x"
        + (f"; too few timed steps: {', '.join(short)}" if short else "")
    )
    return Outcome("fail" if short else "pass", summary, data, tail(output))


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


GPU_TESTS_LIMIT_S = 600
OPTIMIZER_LIMIT_S = 300  # includes waiting for the background extension build
RUN_LIMIT_S = 180  # one tiny training run of the resume part (compilation included)
PROBE_LIMIT_S = 360  # includes building the arc2-smoke dataset on first use
BENCH_LIMIT_S = 300
CHECKPOINT_LIMIT_S = 180  # builds a 2.4 GB puzzle table and writes three ~5 GB checkpoints
EVAL_LIMIT_S = 240
EVAL_REPEATS = {"quick": "2", "full": "3"}
KIT_LIMIT_S = 180
EXTENSION_WAIT_S = 180  # the longest a part waits for the background build (65-89 s on the first H100)
STEP_AB_LIMIT_S = 420
# Steps per trainer run of the step A/B: tools.bench.train times the steps after its 5 warm-up steps, so
# each run times STEP_AB_MIN_STEPS (ours runs twice, before and after upstream).
STEP_AB_MIN_STEPS = 20
STEP_AB_STEPS = STEP_AB_MIN_STEPS + 6
SDPA_LIMIT_S = 120
PROFILE_LIMIT_S = 240

# Planned seconds on one H100 per profile, from the first H100 run (docs/gpu-runs/2026-11-26-h100: facts 0.3 s,
# imports 14, collect 23, bench 124 with both models' compiles, probe 76 before its evaluation (removed since),
# optimizer 32 once the extension is built (the build: 65-89 s in the background), resume 90, checkpoint 48,
# eval 88). Estimates, not measured yet: kit (pip --no-index, ~10 s there), gpu-tests (never started there;
# 150 s plus up to ~45 s waiting for the build it requires), step-ab (3 trainer runs of ~50 s compile + 26
# steps, plus data), sdpa, profile (one compile of the paper step, 50 s there, plus 5 steps). An H200 is
# planned as an H100: the plan errs long.
PARTS: tuple[Part, ...] = (
    Part("facts", "versions and GPU facts (nvidia-smi, MIG, CUDA devices)", {"quick": 5, "full": 5}, 60, facts, needs_cuda=False),
    Part("kit", "pip install --no-index the GPU kit (what this Python lacks)", {"quick": 20, "full": 20}, KIT_LIMIT_S, kit_install, needs_cuda=False),
    Part("imports", "what the check and training import (the GPU kit on a bare host)", {"quick": 15, "full": 15}, 120, imports, needs_cuda=False),
    Part("extension-build", "adam-atan2 from the kit's sdist for this GPU's SM, in the background (nvcc checked first)", {"quick": 2, "full": 2}, 30, extension_build),
    Part("collect", "the test suite collects here (no error, no module skipped whole)", {"quick": 25, "full": 25}, 180, collect, needs_cuda=False),
    Part("gpu-tests", "pytest -m gpu tests with TRM_REQUIRE_GPU=1 (a skip is a failure), on the extension when built", {"quick": 195, "full": 445}, GPU_TESTS_LIMIT_S + EXTENSION_WAIT_S, gpu_tests),
    Part("optimizer", f"adam-atan2 extension vs our AdamATan2, {OPTIMIZER_STEPS} steps, fp32 and bf16", {"quick": 35, "full": 60}, OPTIMIZER_LIMIT_S, optimizer),
    Part("resume", "CUDA bf16 + compile=auto run on the extension: SIGTERM, resume, equal to uninterrupted", {"quick": 90, "full": 120}, 120 + 3 * RUN_LIMIT_S, resume),
    Part("probe", "select-config --probe (arc2-smoke, paper config) on the extension: peak memory, s/step", {"quick": 80, "full": 120}, PROBE_LIMIT_S, probe),
    Part("step-ab", f"tools.bench.train --setup paper: our trainer vs upstream's, interleaved, >= {STEP_AB_MIN_STEPS} timed steps each", {"quick": 230, "full": 230}, STEP_AB_LIMIT_S, step_ab),
    Part("sdpa", "tools.bench.sdpa: attention backends (cuDNN, flash, efficient, math) at head dim 64, seq 916", {"quick": 20, "full": 30}, SDPA_LIMIT_S, sdpa),
    Part("profile", "tools.bench.step_profile: a compiled paper step under torch.profiler (matmul, attention, elementwise, idle)", {"quick": 75, "full": 90}, PROFILE_LIMIT_S, step_profile),
    Part("bench", "tools.bench.model --config paper: ms/step, MFU, vs upstream", {"quick": 125, "full": 240}, BENCH_LIMIT_S, bench, required=False),
    Part("checkpoint", "tools.bench.checkpoint --device cuda: loop blocked by an async save vs a synchronous one", {"quick": 50, "full": 60}, CHECKPOINT_LIMIT_S, checkpoint_save, required=False),
    Part("eval", "tools.bench.eval --config paper: evaluation rows/s eager and compiled", {"quick": 90, "full": 120}, EVAL_LIMIT_S, evaluation, required=False),
)  # fmt: skip

# The two calls of one short GPU loan (docs/gpu-host-checks.md): call 1 proves (the gpu tests, the extension,
# training on it) while the extension builds; call 2, at once while the machine is warm, measures. Each
# call's required parts fit DEFAULT_BUDGET_S on the plan above; the optional ones run when time is left.
CALLS: dict[int, tuple[str, ...]] = {
    1: ("facts", "kit", "imports", "extension-build", "collect", "gpu-tests", "optimizer", "resume"),
    2: ("facts", "extension-build", "probe", "step-ab", "sdpa", "profile", "checkpoint", "eval"),
}


# -------------------------------------------------------------------------------------------------- CLI
def plan_text(
    parts: Sequence[Part], out: Path, env: dict[str, str], profile: str, budget_s: float, kit: Path
) -> str:
    total, required = planned_total(parts, profile), planned_total(parts, profile, required_only=True)
    fits = "fits" if required <= budget_s else "does NOT fit: later parts will be skipped"
    lines = [
        f"gpu acceptance plan: {len(parts)} part(s), profile {profile}, budget {budget_s:g} s, planned on one "
        f"H100 {total} s, required parts {required} s ({fits}); report: {out / 'report.json'} and "
        f"{out / 'report.md'}"
    ]
    lines += [
        f"  {p.name:15s} ~{p.planned_s[profile]:4d} s (≤{p.limit_s:4d} s)  {p.what}"
        + ("" if p.required else "  [optional: runs when time is left]")
        for p in parts
    ]
    upstream = upstream_checkout(env, kit)
    lines.append(
        f"  upstream: {upstream if upstream else 'not compared (TRM_UPSTREAM unset, no kit checkout)'}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None, parts: Sequence[Part] = PARTS) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.gpu.check", description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="print the plan; run nothing")
    parser.add_argument(
        "--out", type=Path, default=None,
        help=f"report folder (default {DEFAULT_OUT}, with --call N {DEFAULT_OUT}/call-N)",
    )  # fmt: skip
    parser.add_argument("--call", type=int, choices=sorted(CALLS), default=None,
                        help="one of the two prepared calls of a short GPU loan (1: the gpu tests, the extension, "
                             "training on it; 2: the probe, the step A/B, SDPA, the profile); implies "
                             "--require-extension")  # fmt: skip
    parser.add_argument("--extension-dir", type=Path, default=None,
                        help="where the extension is built, shared by the calls (default: OUT/../extension with "
                             "--call, else OUT/extension)")  # fmt: skip
    parser.add_argument("--only", nargs="+", metavar="PART", help="run only these parts")
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                        help=f"total seconds (default {DEFAULT_BUDGET_S}: a 10-minute call)")  # fmt: skip
    parser.add_argument("--profile", choices=PROFILES, default="quick",
                        help="quick (default: fits the default budget on one H100) or full")  # fmt: skip
    parser.add_argument("--require-extension", action="store_true",
                        help="fail when the adam-atan2 extension is not built/used (default: record it)")  # fmt: skip
    parser.add_argument(
        "--kit",
        type=Path,
        default=ROOT / DEFAULT_KIT,
        help=f"the GPU kit folder: its adam-atan2 sdist and upstream checkout (default {DEFAULT_KIT})",
    )
    parser.add_argument("--adam-sdist", type=Path, default=None,
                        help=f"the adam-atan2 sdist to build (default: KIT/{ADAM_SDIST})")  # fmt: skip
    parser.add_argument("--compare-optimizer", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.compare_optimizer:  # the optimizer part's child process, with the built extension importable
        print(json.dumps(compare_optimizer()), flush=True)
        return 0
    if args.budget_s <= 0:
        parser.error(f"--budget-s {args.budget_s:g}: give a positive number of seconds")
    out = args.out or (DEFAULT_OUT / f"call-{args.call}" if args.call else DEFAULT_OUT)
    args.out = out.resolve()  # parts run their commands from the repository root
    extension_dir = (
        args.extension_dir or (args.out.parent if args.call else args.out) / "extension"
    ).resolve()
    names = [p.name for p in parts]
    unknown = sorted(set(args.only or []) - set(names))
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(names)}")
    by_name = {p.name: p for p in parts}
    if args.call:
        missing = [n for n in CALLS[args.call] if n not in by_name]
        if missing:
            parser.error(f"--call {args.call}: part(s) {', '.join(missing)} are not defined")
        chosen = [by_name[n] for n in CALLS[args.call] if not args.only or n in args.only]
    else:
        chosen = [p for p in parts if not args.only or p.name in args.only]
    env = checkout_env({**os.environ, "PYTHONUNBUFFERED": "1", "WANDB_MODE": "disabled"})
    args.kit = args.kit.resolve()
    args.adam_sdist = args.adam_sdist or args.kit / ADAM_SDIST
    print(plan_text(chosen, args.out, env, args.profile, args.budget_s, args.kit), flush=True)
    if args.call:
        left = "left running for call 2 if unfinished" if args.call == 1 else "picked up from call 1"
        print(
            f"  call {args.call}: the extension is required; its build in {extension_dir} ({left})",
            flush=True,
        )
    if args.dry_run:
        return 0
    start = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.out / "work"
    work.mkdir(exist_ok=True)
    ctx = Context(
        out=args.out, work=work, python=sys.executable, env=env, profile=args.profile,
        deadline=start + args.budget_s, require_extension=args.require_extension or args.call is not None,
        adam_sdist=args.adam_sdist, kit=args.kit, extension_dir=extension_dir, keep_extension_build=args.call == 1,
    )  # fmt: skip
    report = run_parts(
        chosen, ctx, lambda r: write_report(r, args.out), budget_s=args.budget_s, cuda=cuda_available(),
        call=args.call,
    )  # fmt: skip
    counts = Counter(p["status"] for p in report["parts"])
    print(
        f"gpu-acceptance: {report['status'].upper()} ({', '.join(f'{v} {k}' for k, v in counts.items())});"
        f" report: {args.out / 'report.md'}",
        flush=True,
    )
    return EXIT_CODES[report["status"]]


if __name__ == "__main__":
    sys.exit(main())
