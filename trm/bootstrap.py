"""Host bootstrap: our locked environment in a venv on a bare GPU host or inside a stock CUDA container.

For hosts that cannot run our image (a Vast.ai instance is itself a container, often a stock PyTorch
devel image, with no `docker`). It does by hand-free steps what docker/Dockerfile does, with the same
hash-locked requirements (docker/requirements/) and the same build code (trm.images.buildtools):

1. detect the GPUs (nvidia-smi) and their SMs; the driver picks the lock (trm.images.families, the
   [families] of docker/images.toml: R580+ the CUDA 13.0 lock, R525-R575 the CUDA 12.8 one);
2. create the venv; install pip/setuptools/wheel, then the runtime lock (`--require-hashes`);
3. GPU, families that ship the extension: the CUDA toolchain from the build lock, then adam-atan2
   compiled for this host's SMs only (setup.py patched to honour TORCH_CUDA_ARCH_LIST, SASS checked with
   cuobjdump); the CUDA 12.8 family has no PyPI nvcc and uses trm's AdamATan2 (torch backend);
4. trm-stack from this checkout (editable, no dependencies);
5. verify in the venv: torch/trm (and the adam-atan2 backend) import, the backend's SASS is exactly
   this host's SMs, Triton's C build works, one optimizer step on the GPU matches our torch backend;
6. write a stamp; a second run with the same locks and GPUs only verifies.

Standard library only at import (it runs with a plain CPython 3.11 before anything is installed):
`bash scripts/bootstrap_host.sh [--dry-run] [--cpu] [--venv DIR]`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from trm.errors import TRMError
from trm.images.families import Family, catalog_families, family_for_driver
from trm.images.venvtools import subset_lock
from trm.io import atomic_write_json, atomic_write_text
from trm.launch.host.nvidia_smi import NvidiaSmiMissing, Runner, parse_plain_header, query_gpus, system_runner
from trm.safe_remove import remove_own_temp

REPO = Path(__file__).resolve().parents[1]
STAMP = ".trm-bootstrap.json"
STAMP_VERSION = 1
PYTHON_VERSION = (3, 11)  # the locks are resolved for CPython 3.11 (docker/README.md)
ADAM_ATAN2 = "adam-atan2"


@dataclass(frozen=True)
class Target:
    """What to build: the lock, the CUDA it needs, the GPUs' architectures, the AdamATan2 backend."""

    lock: str
    cuda: str
    archs: str  # TORCH_CUDA_ARCH_LIST, e.g. "9.0" or "8.0;9.0"; "" for CPU
    gpus: list[str] = field(default_factory=list)
    optimizer_backend: str = "ext"  # "ext": adam-atan2 is compiled for `archs`; "torch": trm's AdamATan2
    torch: str = ""
    driver: str = ""

    @property
    def builds_extension(self) -> bool:
        return bool(self.archs) and self.optimizer_backend == "ext"

    @property
    def sm_list(self) -> str:
        """The SMs as preflight reads them (TRM_ADAM_ATAN2_SM_LIST), e.g. "90"."""
        return " ".join(a.replace(".", "") for a in self.archs.split(";") if a)


def detect(cpu: bool, runner: Runner | None = None, families: tuple[Family, ...] = ()) -> Target:
    """The build target of this host: the driver picks the family (lock, CUDA, optimizer backend), the
    GPUs the architectures; TRMError with the fix when the GPUs or the driver rule it out."""
    if cpu:
        return Target("cpu", "", "")
    runner = runner or system_runner()
    families = families or catalog_families()
    try:
        # The banner first: a driver older than every family (R470 does not even know the compute_cap
        # query field) gets the family error with its fix, not a failed GPU query.
        code, banner = runner(())
        driver, _driver_cuda = parse_plain_header(banner) if code == 0 else (None, None)
        if driver:
            family_for_driver(driver, families)
        gpus = query_gpus(runner)
    except NvidiaSmiMissing as err:
        raise TRMError(f"{err}. For a CPU-only venv (tests, data, smoke) pass --cpu.") from err
    if not gpus:
        raise TRMError("nvidia-smi lists no GPU; for a CPU-only venv pass --cpu")
    driver = driver or gpus[0].driver_version
    family = family_for_driver(driver, families)
    sms = sorted({g.sm for g in gpus})
    archs = ";".join(f"{sm // 10}.{sm % 10}" for sm in sms)
    gpu_names = [f"{g.name} (sm_{g.sm})" for g in gpus]
    return Target(family.name, family.cuda, archs, gpu_names, family.optimizer_backend, family.torch, driver)


def lock_paths(root: Path, lock: str) -> tuple[Path, Path]:
    runtime, build = (
        root / f"docker/requirements/runtime-{lock}.txt",
        root / f"docker/requirements/build-{lock}.txt",
    )
    for path in (runtime, build):
        if not path.is_file():
            raise TRMError(f"{path} is missing: run from a complete trm-stack checkout (git status)")
    return runtime, build


def locked_version(build_lock_text: str, name: str) -> str:
    entry = subset_lock(build_lock_text, [name]).split("\\", 1)[0].strip()
    _, _, version = entry.partition("==")
    if not version:
        raise TRMError(f"the build lock pins no {name}: re-run `make lock`")
    return version


def wanted_stamp(root: Path, target: Target, python: Sequence[int]) -> dict[str, object]:
    runtime, build = lock_paths(root, target.lock)
    digest = hashlib.sha256(runtime.read_bytes() + b"\0" + build.read_bytes()).hexdigest()
    return {
        "stamp_version": STAMP_VERSION,
        "lock": target.lock,
        "locks_sha256": digest,
        "archs": target.archs,
        "python": ".".join(str(p) for p in python[:2]),
    }


@dataclass(frozen=True)
class Step:
    name: str
    what: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


def plan_steps(root: Path, venv: Path, target: Target, jobs: int, base_python: str) -> list[Step]:
    """The install steps (everything but the verification), each one command."""
    runtime, build = lock_paths(root, target.lock)
    work = venv / ".trm-bootstrap"
    py = str(venv / "bin" / "python")
    pip = [py, "-m", "pip", "install", "--require-hashes", "--no-deps"]
    steps = [
        Step("venv", f"create {venv} with {base_python}", [base_python, "-m", "venv", str(venv)]),
        Step(
            "build tools",
            "pip, setuptools, wheel at the locked versions",
            [*pip, "-r", str(work / "bootstrap.txt")],
        ),
        Step(
            "runtime",
            f"the hash-locked runtime ({runtime.name}: torch and every dependency, nothing resolved here)",
            [*pip, "--no-build-isolation", "-r", str(runtime)],
        ),
    ]
    if target.builds_extension:
        version = locked_version(build.read_text(), ADAM_ATAN2)
        sdist_dir = work / "sdist"
        steps += [
            Step(
                "cuda toolchain",
                "nvcc, CUDA headers and cuobjdump from the build lock's nvidia-* wheels (inside the venv)",
                [*pip, "-r", str(work / "toolchain.txt")],
            ),
            Step(
                "adam-atan2 source",
                f"the {ADAM_ATAN2} {version} sdist (its sha256 is checked against {build.name})",
                # hash-checked like every other pin; metadata is prepared with the venv's torch (no isolation)
                [py, "-m", "pip", "download", "--require-hashes", "--no-deps", "--no-build-isolation",
                 "--no-binary", ADAM_ATAN2, "-d", str(sdist_dir), "-r", str(work / "adam-atan2.txt")],
            ),
            Step(
                "adam-atan2 build",
                f"compile for TORCH_CUDA_ARCH_LIST={target.archs} only, check the SASS, install",
                [py, "-m", "trm.images.buildtools", "build-adam-atan2", "--sdist",
                 str(sdist_dir / f"adam_atan2-{version}.tar.gz"), "--lock", str(build), "--archs", target.archs,
                 "--out", str(work / "wheels"), "--version", version, "--venv", str(venv), "--jobs", str(jobs)],
                {"PYTHONPATH": str(root)},
            ),
        ]  # fmt: skip
    steps.append(
        Step(
            "trm-stack",
            f"this checkout ({root}), editable, no dependencies",
            [py, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-e", str(root)],
        )
    )
    return steps


def verify_command(venv: Path, target: Target) -> list[str]:
    cmd = [str(venv / "bin" / "python"), "-m", "trm.bootstrap", "verify"]
    if target.builds_extension:
        return [*cmd, "--archs", target.archs]
    return cmd + (["--cuda", target.cuda] if target.cuda else [])


def launch_env(venv: Path, target: Target) -> dict[str, str]:
    """What the launcher needs to know of this venv: its interpreter and, on a GPU host, the facts an image
    would carry as labels (CUDA, optimizer backend, the extension's SM list)."""
    env = {"PYTHON": str(venv / "bin" / "python")}
    if target.archs:
        if target.builds_extension:
            env["TRM_ADAM_ATAN2_SM_LIST"] = target.sm_list
        env |= {"TRM_IMAGE_CUDA": target.cuda, "TRM_IMAGE_OPTIMIZER_BACKEND": target.optimizer_backend}
    return env


def next_command(venv: Path, target: Target) -> str:
    assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in launch_env(venv, target).items())
    if not target.archs:
        return f"{assigns} TASK=debug-tiny NUM_GPUS=0 bash scripts/train_prod.sh"
    return (
        f"{assigns} TASK=arc2-smoke "
        "RUN_NAME=smoke-$(date +%Y%m%d-%H%M) bash scripts/train_prod.sh   # runbook 02, then 03"
    )


def read_stamp(venv: Path) -> dict[str, object] | None:
    try:
        return json.loads((venv / STAMP).read_text())
    except (OSError, ValueError):
        return None


def bootstrap(
    *,
    venv: Path,
    target: Target,
    dry_run: bool = False,
    jobs: int = 4,
    root: Path = REPO,
    base_python: str = sys.executable,
    python_version: Sequence[int] = tuple(sys.version_info[:2]),
    run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
    out: Callable[[str], None] = print,
) -> int:
    """Build (or only verify) the venv for `target`; prints each step and the next command."""
    if tuple(python_version[:2]) != PYTHON_VERSION:
        raise TRMError(
            f"this is Python {'.'.join(map(str, python_version[:2]))}; the locks in docker/requirements/ are for "
            "CPython 3.11: run with python3.11 (PYTHON=python3.11 bash scripts/bootstrap_host.sh; Debian/Ubuntu: "
            "apt-get install python3.11 python3.11-venv python3.11-dev)"
        )
    venv = venv.absolute()
    wanted = wanted_stamp(root, target, python_version)
    current = read_stamp(venv)
    fresh = current == wanted
    where = ", ".join(target.gpus) or "CPU only"
    out(
        f"bootstrap: {where}"
        + (f"; driver {target.driver}" if target.driver else "")
        + f"; lock {target.lock}"
        + (f" (CUDA {target.cuda}, torch {target.torch})" if target.cuda else "")
        + (f", adam-atan2 for {target.archs}" if target.builds_extension else "")
        + (
            ", optimizer backend torch (trm AdamATan2; no adam-atan2 extension)"
            if not target.builds_extension
            else ""
        )
    )
    steps = [] if fresh else plan_steps(root, venv, target, jobs, base_python)
    if fresh:
        out(f"bootstrap: {venv} is up to date ({venv / STAMP}); verifying only")
    elif current is not None:
        changed = sorted(k for k in wanted if current.get(k) != wanted[k])
        out(f"bootstrap: {venv} was built for other inputs ({', '.join(changed)}); rebuilding it")
    verify = verify_command(venv, target)
    for i, step in enumerate(steps, 1):
        env = "".join(f"{k}={shlex.quote(v)} " for k, v in step.env.items())
        out(f"step {i}: {step.name}: {step.what}\n  $ {env}{shlex.join(step.argv)}")
    out(f"step {len(steps) + 1}: verify\n  $ {shlex.join(verify)}")
    if dry_run:
        out("dry run: nothing was changed")
        out(f"next: {next_command(venv, target)}")
        return 0
    if not fresh:
        remove_own_temp(venv / STAMP)
        _, build = lock_paths(root, target.lock)
        work = venv / ".trm-bootstrap"
        for i, step in enumerate(steps, 1):
            if step.name == "build tools":
                work.mkdir(parents=True, exist_ok=True)
                atomic_write_text(
                    work / "bootstrap.txt", subset_lock(build.read_text(), ["pip", "setuptools", "wheel"])
                )
                if target.builds_extension:
                    atomic_write_text(
                        work / "toolchain.txt", subset_lock(build.read_text(), [ADAM_ATAN2], exclude=True)
                    )
                    atomic_write_text(work / "adam-atan2.txt", subset_lock(build.read_text(), [ADAM_ATAN2]))
            if step.name == "venv" and (venv / "bin" / "python").exists():
                out(f"step {i}: {venv} exists; reusing it")
                continue
            code = run(step.argv, env={**os.environ, **step.env}, check=False).returncode
            if code != 0:
                raise TRMError(f"bootstrap step {i} ({step.name}) failed with exit {code}: see its output above; "
                               "fix it and rerun (finished steps are repeated quickly)")  # fmt: skip
    code = run(verify, env={**os.environ, "PYTHONPATH": str(root)}, check=False).returncode
    if code != 0:
        raise TRMError(f"the venv {venv} failed its verification (exit {code}, above); rerun with a clean venv: "
                       f"rm -rf {venv} && bash scripts/bootstrap_host.sh")  # fmt: skip
    if not fresh:
        atomic_write_json(venv / STAMP, wanted)
    out(f"bootstrap: {venv} is ready")
    out(f"next: {next_command(venv, target)}")
    return 0


# ---- inside the new venv ------------------------------------------------------------------------------
def verify_venv(archs: str, cuda: str = "") -> list[str]:
    """Checks run by the venv's own interpreter; returns what was verified, raises TRMError otherwise.

    `archs`: the adam-atan2 extension was built for them; else `cuda`: a GPU venv whose optimizer is trm's
    AdamATan2 (torch backend) with torch built for that CUDA; neither: a CPU venv."""
    import torch

    import trm  # noqa: F401

    notes = [f"torch {torch.__version__} (CUDA {torch.version.cuda or 'none'}), trm imports"]
    if not archs:
        from trm.optim.backend import build_adam_atan2

        device = "cpu"
        if cuda:
            if torch.version.cuda != cuda or not torch.cuda.is_available():
                raise TRMError(
                    f"torch in the venv is built for CUDA {torch.version.cuda or 'none'} (want {cuda}) or does not "
                    "see a GPU (driver? NVIDIA_VISIBLE_DEVICES?)"
                )
            device = "cuda"
        p = torch.nn.Parameter(torch.ones(4, device=device))
        opt = build_adam_atan2([p], lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, backend="torch")
        p.grad = torch.ones(4, device=device)
        opt.step()
        return [*notes, f"one AdamATan2 step (torch backend) on the {device.upper()}"]
    import adam_atan2_backend

    from trm.images.buildtools import arch_flags_to_sm, check_cc, find_cuda_home, parse_cuobjdump_elf
    from trm.optim.backend import build_adam_atan2

    if not torch.version.cuda or not torch.cuda.is_available():
        raise TRMError("torch in the venv does not see a GPU (CUDA build? driver? NVIDIA_VISIBLE_DEVICES?)")
    cuobjdump = find_cuda_home(Path(sys.prefix)) / "bin" / "cuobjdump"
    listing = subprocess.run(
        [str(cuobjdump), "--list-elf", adam_atan2_backend.__file__], capture_output=True, text=True
    )
    found, expected = parse_cuobjdump_elf(listing.stdout), arch_flags_to_sm(archs)
    if found != expected:
        raise TRMError(
            f"{adam_atan2_backend.__file__} has SASS for {sorted(found)}, expected {sorted(expected)}"
        )
    notes.append(f"adam_atan2_backend imports, SASS {sorted(found)}")
    notes.append(check_cc())
    results = []
    for backend in ("ext", "torch"):
        torch.manual_seed(0)
        p = torch.nn.Parameter(torch.randn(1024, device="cuda"))
        opt = build_adam_atan2([p], lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, backend=backend)
        p.grad = torch.randn(1024, device="cuda")
        opt.step()
        torch.cuda.synchronize()
        results.append(p.detach().cpu())
    if not torch.allclose(results[0], results[1], rtol=1e-5, atol=1e-6):
        raise TRMError("the adam-atan2 extension's step differs from the reference step on this GPU")
    notes.append(f"one optimizer step on {torch.cuda.get_device_name(0)}: extension == reference")
    return notes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bootstrap_host.sh", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd")
    verify = sub.add_parser("verify", help="(inside the venv) the checks of step 5")
    verify.add_argument("--archs", default="")
    verify.add_argument("--cuda", default="", help="GPU venv without the extension: torch's expected CUDA")
    parser.add_argument(
        "--venv",
        type=Path,
        default=None,
        help="venv to build (default: .venv-<lock> in the checkout: .venv-cu130, .venv-cu128 or .venv-cpu)",
    )
    parser.add_argument("--cpu", action="store_true", help="a CPU venv (no GPU, no adam-atan2 build)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and change nothing")
    parser.add_argument(
        "--print-env",
        action="store_true",
        help="print `export` lines for this host's venv (PYTHON, the CUDA and optimizer backend it has) and "
        'change nothing: eval "$(bash scripts/bootstrap_host.sh --print-env)"',
    )
    parser.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1), help="parallel nvcc jobs")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "verify":
            for note in verify_venv(args.archs, args.cuda):
                print(f"verified: {note}")
            return 0
        target = detect(args.cpu)
        venv = args.venv or REPO / f".venv-{target.lock}"
        if args.print_env:
            for key, value in launch_env(venv, target).items():
                print(f"export {key}={shlex.quote(value)}")
            return 0
        return bootstrap(venv=venv, target=target, dry_run=args.dry_run, jobs=args.jobs)
    except TRMError as err:
        print(f"bootstrap: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
