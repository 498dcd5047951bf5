"""GPU host acceptance: one command that checks a host with NVIDIA GPUs end to end, within a time budget.

    python -m tools.gpu.check [--budget-s 540] [--profile quick|full] [--require-extension]
                                        [--dry-run] [--out build/gpu-acceptance] [--only PART ...]
    make gpu-check ARGS="..."            nox -s gpu_acceptance -- ...

It runs with the Python it is started with and that Python's own torch (2.10–2.13 accepted, never
installed or replaced) from a checkout of this repository: a dev venv, or a host Python with the GPU kit
(`make gpu-kit`, installed `--no-index`), or our GPU image with the checkout and kit mounted
(docs/gpu-host-checks.md). Parts, ordered by the evidence they give per second of an H100, each recorded as
pass / fail / error / skip with its numbers, its output's tail, its planned and measured time:

  facts            versions (python, the host's torch and its CUDA, cuDNN, NCCL, triton, adam-atan2, git) and
                   GPU facts (nvidia-smi, MIG slices, what CUDA reports)
  imports          what the check and a training run import (trm.train, hydra, omegaconf, pytest, …)
  extension-build  starts building adam-atan2 from the kit's sdist for the visible GPUs' SM, in the
                   background while the parts below run (when it does not import already)
  collect          the test suite collects on this host (no error, no module skipped as a whole)
  bench            `python -m tools.bench.model --config paper`: ms/step, MFU and compile time (and upstream's
                   with TRM_UPSTREAM, or the kit's upstream checkout); first of the parts that compile it
  probe            `select-config --probe` of the paper config: peak memory and seconds per optimizer step
                   (no evaluation)
  optimizer        waits for the extension build; the extension against our AdamATan2 over 100 steps (fp32,
                   bf16) and the extension's own gpu tests
  resume           a CUDA bf16 + compile=auto run SIGTERMed after step 2, resumed, equal to an uninterrupted
                   run (RESUME_RTOL / RESUME_ATOL; bitwise recorded); records the AdamATan2 backend that ran
  gpu-tests        the `gpu`-marked tests, TRM_REQUIRE_GPU=1 (a skipped gpu test counts as a failure); the
                   quick profile leaves out the test the `resume` part repeats
  checkpoint       `python -m tools.bench.checkpoint --device cuda`: the paper-size state saved from the GPU,
                   how long the loop is blocked asynchronously (pinned buffers) vs synchronously, same sha256s
  eval             `python -m tools.bench.eval --config paper`: an evaluation pass at paper size (every row
                   to halting), rows/s eager and compiled, the compiling pass's seconds

Budget: a part starts only when its planned H100 time fits in what is left of `--budget-s`, and runs at
most that long; otherwise it is "skipped for time" (for the optional parts, checkpoint and eval, that
leaves the verdict alone: the required parts' plan is what must fit the budget). Without a CUDA device the CUDA parts are "skipped: no
GPU" and the others still run. The extension is required only with `--require-extension` (hosts and
image variants without it train with the torch backend).

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
from trm.io import atomic_write_json, atomic_write_text

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
) -> dict[str, Any]:
    """Run every part that fits (an exception is that part's `error`), calling `on_update(report)` after
    each; CUDA parts are skipped without `cuda`, parts whose planned time no longer fits are skipped."""
    report: dict[str, Any] = {
        "started_unix": time.time(),
        "host": platform.node(),
        "command": [sys.executable, "-m", "tools.gpu.check", *sys.argv[1:]],
        "profile": ctx.profile,
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
        print(
            f"gpu-acceptance: {part.name}: {outcome.status.upper()} ({seconds} s) {outcome.summary}",
            flush=True,
        )
        on_update(report)
    if ctx.extension is not None:
        ctx.extension.stop()
    report["status"] = overall(report["parts"])
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


EXIT_CODES = {"pass": 0, "fail": 1, "incomplete": 3}


def render_markdown(report: dict[str, Any]) -> str:
    """The human half of the report."""
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(report["started_unix"]))
    lines = [
        f"# GPU acceptance: {report.get('status', 'running').upper()}",
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


class ExtensionBuild:
    """adam-atan2 built from the kit's sdist in the background (trm.images.buildtools install-adam-atan2)
    into work/adam-atan2-site, which later parts put on PYTHONPATH."""

    def __init__(self, ctx: Context, sdist: Path, jobs: int) -> None:
        self.site = ctx.work / "adam-atan2-site"
        self.log = ctx.work / "extension-build.log"
        self.cmd = [ctx.python, "-m", "trm.images.buildtools", "install-adam-atan2", "--sdist", str(sdist),
                    "--target", str(self.site), "--jobs", str(jobs)]  # fmt: skip
        self.started = time.monotonic()
        with open(self.log, "w", encoding="utf-8") as f:
            f.write("$ " + " ".join(self.cmd) + "\n")
            f.flush()
            self.proc = subprocess.Popen(
                self.cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env=ctx.env, start_new_session=True
            )

    def wait(self, timeout_s: float) -> tuple[bool, str]:
        """(built, what happened), waiting at most `timeout_s` for the build."""
        try:
            code = self.proc.wait(timeout=max(timeout_s, 0.1))
        except subprocess.TimeoutExpired:
            return False, f"still building after {time.monotonic() - self.started:.0f} s"
        text = self.log.read_text(encoding="utf-8", errors="replace")
        if code != 0:
            return False, f"build failed (exit {code}): {tail(text, 600)}"
        return True, f"built in {time.monotonic() - self.started:.0f} s: {text.strip().splitlines()[-1]}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def extension_imports(python: str, env: dict[str, str]) -> bool:
    code = subprocess.run([python, "-c", "import adam_atan2, adam_atan2_backend"], env=env, cwd=ROOT,
                          capture_output=True).returncode  # fmt: skip
    return code == 0


def extension_build(ctx: Context) -> Outcome:
    if extension_imports(ctx.python, ctx.env):
        return Outcome("skip", "adam_atan2 already imports here: nothing to build", skipped=NOT_WANTED)
    sdist = ctx.adam_sdist
    if sdist is None or not sdist.is_file():
        why = f"no adam-atan2 sdist at {sdist} (make gpu-kit puts it there)"
        return Outcome(
            "fail" if ctx.require_extension else "skip",
            why,
            skipped=None if ctx.require_extension else NOT_WANTED,
        )
    jobs = max(1, (os.cpu_count() or 2) // 2)  # the gpu tests compile on the other half of the cores
    ctx.extension = ExtensionBuild(ctx, sdist, jobs)
    return Outcome("pass", f"started in the background with {jobs} job(s); log {ctx.extension.log}",
                   {"command": ctx.extension.cmd})  # fmt: skip


def with_extension(ctx: Context) -> dict[str, str]:
    """The environment of later commands: the built extension (if any) on PYTHONPATH."""
    if ctx.extension is None or not ctx.extension.site.is_dir():
        return ctx.env
    path = [str(ctx.extension.site), ctx.env.get("PYTHONPATH", "")]
    return {**ctx.env, "PYTHONPATH": os.pathsep.join(p for p in path if p)}


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
    limit = ctx.limit(GPU_TESTS_LIMIT_S)
    code, output = run_command(
        cmd,
        ctx,
        timeout_s=limit,
        log_name="gpu-tests.log",
        env={**ctx.env, **PYTEST_ENV, "TRM_REQUIRE_GPU": "1"},
    )
    if code is None:
        return Outcome("error", f"timed out after {limit:.0f} s", output=tail(output))
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
    env = with_extension(ctx)
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
        "extension_required": ctx.require_extension,
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
    backend_ok = backend == "ext" if ctx.require_extension else backend in ("ext", "torch")
    checks = (("resumed", data["resumed"]), ("the extension optimizer" if ctx.require_extension else
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
    env = {**with_extension(ctx), "TASK": "arc2-smoke", "RUN_NAME": "gpu-acceptance-probe",
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


GPU_TESTS_LIMIT_S = 600
OPTIMIZER_LIMIT_S = 300  # includes waiting for the background extension build
RUN_LIMIT_S = 180  # one tiny training run of the resume part (compilation included)
PROBE_LIMIT_S = 360  # includes building the arc2-smoke dataset on first use
BENCH_LIMIT_S = 300
CHECKPOINT_LIMIT_S = 180  # builds a 2.4 GB puzzle table and writes three ~5 GB checkpoints
EVAL_LIMIT_S = 240
EVAL_REPEATS = {"quick": "2", "full": "3"}

# Planned seconds on one H100 per profile, from the first H100 run (docs/gpu-runs/2026-11-26-h100: facts 0.3 s,
# imports 14, collect 23, bench 124 with both models' compiles, probe 76 before its evaluation (removed since),
# optimizer 32 once the extension is built (the build: 65-89 s in the background), resume 90, checkpoint 48,
# eval 88); gpu-tests is still an estimate (it did not start there). The required parts of the quick profile
# fit DEFAULT_BUDGET_S.
PARTS: tuple[Part, ...] = (
    Part("facts", "versions and GPU facts (nvidia-smi, MIG, CUDA devices)", {"quick": 5, "full": 5}, 60, facts, needs_cuda=False),
    Part("imports", "what the check and training import (the GPU kit on a bare host)", {"quick": 15, "full": 15}, 120, imports, needs_cuda=False),
    Part("extension-build", "adam-atan2 from the kit's sdist for this GPU's SM, in the background", {"quick": 2, "full": 2}, 30, extension_build),
    Part("collect", "the test suite collects here (no error, no module skipped whole)", {"quick": 25, "full": 25}, 180, collect, needs_cuda=False),
    Part("bench", "tools.bench.model --config paper: ms/step, MFU, vs upstream", {"quick": 125, "full": 240}, BENCH_LIMIT_S, bench),
    Part("probe", "select-config --probe (arc2-smoke, paper config): peak memory, s/step", {"quick": 80, "full": 120}, PROBE_LIMIT_S, probe),
    Part("optimizer", f"adam-atan2 extension vs our AdamATan2, {OPTIMIZER_STEPS} steps, fp32 and bf16", {"quick": 35, "full": 60}, OPTIMIZER_LIMIT_S, optimizer),
    Part("resume", "CUDA bf16 + compile=auto run: SIGTERM, resume, equal to uninterrupted; the optimizer backend", {"quick": 90, "full": 120}, 120 + 3 * RUN_LIMIT_S, resume),
    Part("gpu-tests", "pytest -m gpu tests with TRM_REQUIRE_GPU=1 (a skip is a failure)", {"quick": 150, "full": 400}, GPU_TESTS_LIMIT_S, gpu_tests),
    Part("checkpoint", "tools.bench.checkpoint --device cuda: loop blocked by an async save vs a synchronous one", {"quick": 50, "full": 60}, CHECKPOINT_LIMIT_S, checkpoint_save, required=False),
    Part("eval", "tools.bench.eval --config paper: evaluation rows/s eager and compiled", {"quick": 90, "full": 120}, EVAL_LIMIT_S, evaluation, required=False),
)  # fmt: skip


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
        "--out", type=Path, default=DEFAULT_OUT, help=f"report folder (default {DEFAULT_OUT})"
    )
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
    args.out = args.out.resolve()  # parts run their commands from the repository root
    names = [p.name for p in parts]
    unknown = sorted(set(args.only or []) - set(names))
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(names)}")
    chosen = [p for p in parts if not args.only or p.name in args.only]
    env = checkout_env({**os.environ, "PYTHONUNBUFFERED": "1", "WANDB_MODE": "disabled"})
    args.kit = args.kit.resolve()
    args.adam_sdist = args.adam_sdist or args.kit / ADAM_SDIST
    print(plan_text(chosen, args.out, env, args.profile, args.budget_s, args.kit), flush=True)
    if args.dry_run:
        return 0
    start = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.out / "work"
    work.mkdir(exist_ok=True)
    ctx = Context(
        out=args.out, work=work, python=sys.executable, env=env, profile=args.profile,
        deadline=start + args.budget_s, require_extension=args.require_extension, adam_sdist=args.adam_sdist,
        kit=args.kit,
    )  # fmt: skip
    report = run_parts(
        chosen, ctx, lambda r: write_report(r, args.out), budget_s=args.budget_s, cuda=cuda_available()
    )
    counts = Counter(p["status"] for p in report["parts"])
    print(
        f"gpu-acceptance: {report['status'].upper()} ({', '.join(f'{v} {k}' for k, v in counts.items())});"
        f" report: {args.out / 'report.md'}",
        flush=True,
    )
    return EXIT_CODES[report["status"]]


if __name__ == "__main__":
    sys.exit(main())
