"""The GPU kit: one folder with what a bare GPU host needs to run the GPU check offline, and a rehearsal of
that host on a CPU machine.

    python -m tools.gpu.kit build [--out build/gpu-kit] [--python-version 3.12] [--upstream DIR]
    python -m tools.gpu.kit simulate --python PY --torch SPEC [--kit build/gpu-kit] [--budget-s 540]
    make gpu-kit                      make gpu-check-sim

The host it is for has a Python with its own CUDA build of torch (2.10–2.13) and no package index. The kit
holds wheels (pure Python or CPython `--python-version`, manylinux x86_64, never torch) for the project's
runtime dependencies and the check's test runner, the adam-atan2 sdist (hash-checked against the image's
build lock) that `trm.images.buildtools install-adam-atan2` builds there, optionally an upstream
TinyRecursiveModels checkout for side-by-side numbers, a requirements.txt and a README. It installs with

    python3 -m pip install --no-index --find-links build/gpu-kit -r build/gpu-kit/requirements.txt

which installs the pinned versions (never torch), and leaves the host's own version of what `--host-has`
names (requirements.txt names those without a version). The kit and the
checkout together stay under KIT_LIMIT_MIB, the size a copy to a short-loan host may have.

`simulate` rehearses such a host here: a fresh venv of `--python` with `--torch` (a CPU build), the kit
installed `--no-index`, no docker SDK; then the calls of a GPU loan (`make gpu-check ARGS="--call 1 …"`,
then `--call 2` and `--call 3`) with that venv's Python. It passes when, in each call, every CUDA part reports "skipped: no
GPU", every other part passes, and the call's plan fits the budget (exit 0; 1 otherwise, with what differed).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from tools.gpu.check.core import ADAM_SDIST, DEFAULT_KIT, NO_GPU, UPSTREAM_DIR
from tools.gpu.check.plan import CALLS, PARTS
from trm.errors import TRMError
from trm.images.venvtools import normalize
from trm.io import atomic_write_json, atomic_write_text
from trm.safe_remove import clear_killed_marker, remove_own_temp, remove_owned, write_marker

KIT_KIND = (
    "gpu-kit"  # kinds in the creation markers (trm.safe_remove) of a kit and of a simulation's work folder
)
SIMULATION_KIND = "gpu-kit-simulation"

ROOT = Path(__file__).resolve().parents[2]
KIT_LIMIT_MIB = 64  # the kit plus the checkout's tracked files
# The manylinux tags a current x86_64 Linux (glibc >= 2.28) runs; pip's --platform takes each literally.
PLATFORMS = tuple(f"manylinux{tag}_x86_64" for tag in ("_2_28", "_2_27", "_2_24", "2014", "2010", "1"))
RUNTIME_LOCK = Path("docker/requirements/runtime-cpu.txt")  # the image's versions, used as constraints
BUILD_LOCK = Path("docker/requirements/build-cu130.txt")  # pins adam-atan2's sdist by hash
# What the check needs beyond the runtime dependencies (pins from the dev extra).
CHECK_DEPS = ("pytest", "pytest-xdist", "PyYAML")
# Runtime dependencies published as an sdist only: built into a (pure-Python) wheel for the kit.
SDIST_ONLY = ("antlr4-python3-runtime",)
# Upstream's model imports (the `upstream` extra) minus its dataset builders' numba (with llvmlite > 40 MB).
UPSTREAM_LEAVE_OUT = ("numba",)
# What upstream's trainer (pretrain.py, run by tools.bench.upstream_trainer for the step A/B) imports beyond
# that extra: coolname names its runs (pure Python, pinned here: no extra of ours needs it). Its wandb is
# stood in for by tools.bench.upstream_trainer when it does not import (a 20 MB wheel the kit leaves out).
UPSTREAM_TRAINER = ("coolname==5.0.0",)
# Runtime dependencies the kit leaves out: torch is the host's own; matplotlib (with Pillow and its other
# dependencies) only plots `trm report` figures, which no part of the GPU check draws.
KIT_LEAVE_OUT = ("torch", "matplotlib")
# What the kit leaves out of the upstream checkout: nothing the bench or the parity tests import (its
# Kaggle notebooks and data, 11 MB, and the README's images would push the kit past what a loan carries).
UPSTREAM_SKIP_FILES = (".git", "__pycache__", "*.pyc", "assets", "kaggle", "*.png", "*.jpg", "*.gif", "*.pdf")
_PIN = re.compile(r"^([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==([^\s;\\]+)")


def _name(requirement: str) -> str:
    match = _PIN.match(requirement.strip())
    if not match:
        raise TRMError(f"pyproject.toml: {requirement!r} is not pinned with ==; pin it exactly")
    return match.group(1)


def kit_requirements(pyproject: dict[str, Any], *, upstream: bool) -> list[str]:
    """The pinned requirements the kit is downloaded for: runtime dependencies except KIT_LEAVE_OUT, the
    check's test runner, and with `upstream` upstream's model and trainer imports."""
    project = pyproject["project"]
    wanted = [r for r in project["dependencies"] if _name(r).lower() not in KIT_LEAVE_OUT]
    dev = {_name(r).lower(): r for r in project["optional-dependencies"]["dev"] if "==" in r}
    missing = [n for n in CHECK_DEPS if n.lower() not in dev]
    if missing:
        raise TRMError(f"pyproject.toml: the dev extra has no pin for {', '.join(missing)}")
    wanted += [dev[n.lower()] for n in CHECK_DEPS]
    if upstream:
        wanted += [
            r for r in project["optional-dependencies"]["upstream"] if _name(r) not in UPSTREAM_LEAVE_OUT
        ]
        wanted += list(UPSTREAM_TRAINER)
    return wanted


def requirements_text(wanted: list[str], host_has: set[str]) -> str:
    """The kit's requirements.txt: every requirement pinned (`name==version`), except those the host's
    Python has already (their wheels are left out): named without a version, so pip keeps the host's."""
    lines = [
        _name(r) if normalize(_name(r)) in host_has else r.split(";")[0].strip()
        for r in sorted(wanted, key=lambda r: normalize(_name(r)))
    ]
    return "\n".join(dict.fromkeys(lines)) + "\n"


def lock_pins(text: str, leave_out: tuple[str, ...] = ("torch",)) -> list[str]:
    """`name==version` of every package a hash-locked requirements file pins (without local versions)."""
    pins = []
    for line in text.splitlines():
        match = _PIN.match(line)
        if match and match.group(1).lower() not in leave_out:
            pins.append(f"{match.group(1)}=={match.group(2).split('+')[0]}")
    return pins


def _run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise TRMError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}")


def tree_bytes(root: Path = ROOT) -> int:
    """Bytes of the checkout's tracked files (what travels besides the kit)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=False)
    if listed.returncode != 0:
        return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and ".git" not in p.parts)
    names = [n for n in listed.stdout.decode().split("\0") if n]
    return sum((root / n).stat().st_size for n in names if (root / n).is_file())


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def wheel_dist_name(filename: str) -> str:
    """The normalized distribution name of a wheel file (`Pydantic_Core-2.1-….whl` → `pydantic-core`)."""
    return normalize(filename.split("-", 1)[0])


def build_kit(
    out: Path,
    *,
    python_version: str | tuple[str, ...],
    upstream: Path | None = None,
    pip: list[str] | None = None,
    host_has: tuple[str, ...] = (),
) -> dict:
    """Write the kit into `out` (replacing a previous kit there); returns its manifest. `host_has` names
    packages the host's Python already has: their wheels are left out (pip keeps the host's). Several
    `python_version`s give one kit for hosts whose Python differs: each version's compiled wheels, and the
    pure-Python wheels (most of the kit) once for all."""
    from trm.images.buildtools import lock_hashes, sha256_of

    pip = pip or [sys.executable, "-m", "pip"]
    versions = (python_version,) if isinstance(python_version, str) else tuple(python_version)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    wanted = kit_requirements(pyproject, upstream=upstream is not None)
    clear_killed_marker(out)  # a build killed while it marked its new kit folder
    remove_owned(out, kind=KIT_KIND)  # refuses a folder that is not an earlier kit
    out.mkdir(parents=True)
    write_marker(out, tool="tools.gpu.kit build", kind=KIT_KIND, scratch=True)
    work = out / ".work"
    work.mkdir()
    constraints = work / "constraints.txt"
    constraints.write_text("\n".join(lock_pins((ROOT / RUNTIME_LOCK).read_text())) + "\n")
    for name in SDIST_ONLY:  # pure Python: the wheel built here serves every Python version
        pin = next((p for p in lock_pins((ROOT / RUNTIME_LOCK).read_text()) if _name(p) == name), name)
        _run([*pip, "wheel", "-q", "--no-deps", "-w", str(out), pin], f"building a wheel of {pin}")
    for version in versions:
        _run(
            [*pip, "download", "-q", "--only-binary=:all:", "--python-version", version,
             *(f"--platform={p}" for p in PLATFORMS), "--find-links", str(out), "-c", str(constraints), "-d", str(out),
             *wanted],
            f"downloading the kit's wheels for Python {version}",
        )  # fmt: skip
    _run([*pip, "download", "-q", "--no-binary=:all:", "--no-deps", "-d", str(work), "adam-atan2==0.0.3"],
         "downloading the adam-atan2 sdist")  # fmt: skip
    sdist = work / ADAM_SDIST
    if sha256_of(sdist) not in lock_hashes((ROOT / BUILD_LOCK).read_text(), "adam-atan2"):
        raise TRMError(f"{ADAM_SDIST}: sha256 is not the one {BUILD_LOCK} pins; refusing it")
    shutil.move(sdist, out / ADAM_SDIST)
    remove_own_temp(work)
    left_out = {normalize(n) for n in host_has}
    for wheel in out.glob("*.whl"):
        if wheel_dist_name(wheel.name) in left_out:
            remove_own_temp(wheel)
    if upstream is not None:
        shutil.copytree(upstream, out / UPSTREAM_DIR, ignore=shutil.ignore_patterns(*UPSTREAM_SKIP_FILES))
    atomic_write_text(out / "requirements.txt", requirements_text(wanted, left_out))
    files = {
        p.name: {"bytes": p.stat().st_size, "sha256": sha256_of(p)}
        for p in sorted(out.glob("*.*"))
        if p.is_file()
    }
    manifest = {
        "python_version": " ".join(versions),
        "platforms": list(PLATFORMS),
        "requirements": wanted,
        "files": files,
        "upstream": str(upstream) if upstream else None,
        "host_has": sorted(left_out),
        "kit_bytes": folder_bytes(out),
        "checkout_bytes": tree_bytes(),
        "limit_mib": KIT_LIMIT_MIB,
    }
    atomic_write_text(out / "README.md", kit_readme(manifest))
    manifest["kit_bytes"] = folder_bytes(out) + 4096  # with the manifest itself
    atomic_write_json(out / "manifest.json", manifest)
    total = (manifest["kit_bytes"] + manifest["checkout_bytes"]) / 2**20
    if total > KIT_LIMIT_MIB:
        raise TRMError(
            f"the kit ({manifest['kit_bytes'] / 2**20:.1f} MiB) and the checkout "
            f"({manifest['checkout_bytes'] / 2**20:.1f} MiB) make {total:.1f} MiB, over {KIT_LIMIT_MIB} MiB: "
            "leave out the upstream checkout, name packages the host already has (--host-has), or move large "
            "files out of the tree"
        )
    return manifest


def kit_readme(manifest: dict[str, Any]) -> str:
    return f"""# GPU kit (written by `make gpu-kit`; do not edit)

For a GPU host whose Python {manifest["python_version"]} has its own CUDA build of torch (2.10–2.13) and no
package index. From the checkout this folder sits in:

    python3 -m pip install --no-index --find-links {DEFAULT_KIT} -r {DEFAULT_KIT}/requirements.txt
    make gpu-run-1                  # call 1: python3 -m tools.gpu.check --call 1
    make gpu-run-2                  # call 2, at once: python3 -m tools.gpu.check --call 2
    make gpu-run-3                  # call 3 when time is left: the learning curves against upstream

pip installs the pinned versions (never torch) and keeps the host's own version of the packages named
without one (`--host-has`). The check builds
adam-atan2 from `{ADAM_SDIST}` for the GPU's SM in the background (by hand:
`python -m trm.images.buildtools install-adam-atan2 --sdist {DEFAULT_KIT}/{ADAM_SDIST}`).
{"An upstream checkout is in `" + UPSTREAM_DIR + "/`: the bench part compares against it." if manifest["upstream"] else ""}
{"Left out, the host must have them already: " + ", ".join(manifest["host_has"]) + "." if manifest["host_has"] else ""}
Contents and sha256: manifest.json.
"""


# ------------------------------------------------------------------------------------------- simulation
def check_simulated_report(report: dict[str, Any], cuda_parts: set[str]) -> list[str]:
    """What differs from a clean run on a host without a GPU (empty when the rehearsal passed)."""
    problems = []
    if not report.get("plan_fits_budget"):
        problems.append(
            f"the plan ({report.get('planned_h100_s')} s on an H100) exceeds the budget {report.get('budget_s')}"
        )
    if report.get("status") != "incomplete":
        problems.append(
            f"overall status {report.get('status')!r}, expected 'incomplete' (CUDA parts skipped)"
        )
    for part in report.get("parts", []):
        if part["name"] in cuda_parts:
            if part["status"] != "skip" or part.get("skipped") != NO_GPU:
                problems.append(
                    f"{part['name']}: {part['status']} ({part['summary']}), expected 'skipped: no GPU'"
                )
        elif part["status"] != "pass":
            problems.append(f"{part['name']}: {part['status']} ({part['summary']}), expected pass")
    return problems


def simulate(kit: Path, python: str, torch_spec: str, workdir: Path, budget_s: float) -> dict[str, Any]:
    """A bare GPU host without its GPU: venv + the host's torch + the kit `--no-index`, then the check."""
    if not (kit / "requirements.txt").is_file():
        raise TRMError(f"{kit} has no requirements.txt: build the kit first (make gpu-kit)")
    clear_killed_marker(workdir)  # a simulation killed while it marked its new folder
    remove_owned(workdir, kind=SIMULATION_KIND)  # refuses a folder that is not an earlier simulation's
    workdir.mkdir(parents=True)
    write_marker(workdir, tool="tools.gpu.kit simulate", kind=SIMULATION_KIND, scratch=True)
    venv = workdir / "venv"
    py = str(venv / "bin" / "python")
    timings: dict[str, float] = {}

    def step(name: str, cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        start = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
        timings[name] = round(time.monotonic() - start, 1)
        print(f"gpu-kit simulate: {name}: exit {proc.returncode} ({timings[name]} s)", flush=True)
        return proc

    for name, cmd in (
        ("venv", [python, "-m", "venv", str(venv)]),
        ("host torch", [py, "-m", "pip", "install", "-q", *shlex.split(torch_spec)]),
        ("kit --no-index", [py, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(kit),
                            "-r", str(kit / "requirements.txt")]),
    ):  # fmt: skip
        proc = step(name, cmd)
        if proc.returncode != 0:
            raise TRMError(f"simulate: {name} failed: {proc.stderr[-3000:]}")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}  # the venv alone
    facts = subprocess.run(
        [py, "-c", "import importlib.util as u, json, sys, torch; print(json.dumps({'python': sys.version.split()[0],"
         " 'torch': torch.__version__, 'docker': u.find_spec('docker') is not None}))"],
        capture_output=True, text=True, check=True, cwd=workdir, env=env,  # not the checkout's docker/ folder
    )  # fmt: skip
    host = json.loads(facts.stdout)
    if host["docker"]:
        raise TRMError("simulate: the docker SDK is importable in the rehearsal venv; it must not be")
    cuda_parts = {p.name for p in PARTS if p.needs_cuda}
    result: dict[str, Any] = {"host": host, "timings_s": timings, "calls": {}, "problems": []}
    for call in sorted(CALLS):  # the two calls of a GPU loan, in order, as docs/gpu-host-checks.md runs them
        out = workdir / "report" / f"call-{call}"
        proc = step(
            f"make gpu-check (call {call})",
            ["make", "-C", str(ROOT), "gpu-check", f"GPU_PYTHON={py}",
             f"ARGS=--call {call} --budget-s {budget_s:g} --out {out} --kit {kit}"],
            env=env,
        )  # fmt: skip
        report_file = out / "report.json"
        if not report_file.is_file():
            result["problems"].append(f"call {call}: no report.json ({proc.stderr.strip()[-500:]})")
            continue
        report = json.loads(report_file.read_text())
        result["problems"] += [f"call {call}: {p}" for p in check_simulated_report(report, cuda_parts)]
        if "Error 3" not in proc.stderr:  # make exits 2 when its recipe fails; it names the check's code
            result["problems"].append(
                f"call {call}: the check did not exit 3 (incomplete: no GPU): {proc.stderr.strip()[-500:]}"
            )
        result["calls"][call] = {
            "check_seconds": report.get("seconds"),
            "planned_required_h100_s": report.get("planned_required_h100_s"),
            "budget_s": report.get("budget_s"),
            "parts": {
                p["name"]: f"{p['status']} ({p['seconds']} s): {p['summary']}" for p in report["parts"]
            },
            "report": str(out / "report.md"),
        }
    atomic_write_json(workdir / "simulation.json", result)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.gpu.kit", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="write the kit (needs the package index)")
    b.add_argument("--out", type=Path, default=ROOT / DEFAULT_KIT)
    b.add_argument("--python-version", nargs="+", default=["3.12"],
                   help="the GPU host's Python; several (3.11 3.12 3.13) when it is not known (default 3.12)")  # fmt: skip
    b.add_argument(
        "--upstream", type=Path, default=None, help="an upstream TinyRecursiveModels checkout to include"
    )
    b.add_argument("--host-has", nargs="*", default=[], metavar="NAME",
                   help="packages the GPU host's Python already has (e.g. numpy matplotlib): their wheels are "
                        "left out of the kit")  # fmt: skip
    s = sub.add_parser(
        "simulate", help="rehearse a bare GPU host here (no GPU): venv + torch + kit, then the check"
    )
    s.add_argument("--kit", type=Path, default=ROOT / DEFAULT_KIT)
    s.add_argument(
        "--python", required=True, help="interpreter of the rehearsal venv (the kit's Python version)"
    )
    s.add_argument("--torch", required=True,
                   help="the 'host' torch, a CPU build: a wheel file, or pip arguments such as "
                        "'torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu'")  # fmt: skip
    s.add_argument("--workdir", type=Path, default=ROOT / "build" / "gpu-kit-sim")
    s.add_argument("--budget-s", type=float, default=540)
    args = parser.parse_args(argv)
    try:
        if args.cmd == "build":
            if args.upstream is not None and not (args.upstream / "pretrain.py").is_file():
                raise TRMError(
                    f"--upstream {args.upstream}: not a TinyRecursiveModels checkout (no pretrain.py)"
                )
            m = build_kit(
                args.out,
                python_version=tuple(args.python_version),
                upstream=args.upstream,
                host_has=tuple(args.host_has),
            )
            print(
                f"gpu kit: {args.out} ({len(m['files'])} files, {m['kit_bytes'] / 2**20:.1f} MiB; with the checkout "
                f"{(m['kit_bytes'] + m['checkout_bytes']) / 2**20:.1f} MiB of {KIT_LIMIT_MIB} MiB)"
            )
        else:
            result = simulate(args.kit, args.python, args.torch, args.workdir, args.budget_s)
            print(json.dumps(result, indent=2))
            if result["problems"]:
                print("gpu-kit simulate: FAILED:\n  " + "\n  ".join(result["problems"]), file=sys.stderr)
                return 1
            print(
                "gpu-kit simulate: PASSED; reports "
                + ", ".join(c["report"] for c in result["calls"].values())
            )
    except TRMError as err:
        print(f"gpu-kit: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
