"""nox sessions for trm-stack. They reuse the project venv (`make venv`): run them as `make test` or
`.venv/bin/nox -s <session>`, so torch is never reinstalled."""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path

import nox

nox.options.default_venv_backend = "none"
nox.options.sessions = ["lint", "tests"]

ROOT = Path(__file__).parent
PYTHON = sys.executable

# The folders that hold each opt-in marker's tests: its session collects only these, not the whole suite
# (collecting all of tests/ costs ~18 s of CPU per process). tests/test_marker_folders.py fails when a test
# with one of these markers is written anywhere else.
MARKER_FOLDERS = {
    "launch": ("tests/e2e", "tests/launch"),
    "kaggle": ("tests/kaggle",),
    "kube": ("tests/tools/jobs",),
    "runbooks": ("tests/tools/runbooks",),
}


def marker_folders(*markers: str) -> list[str]:
    """The folders holding the tests of `markers` (each once, in table order)."""
    return list(dict.fromkeys(folder for m in markers for folder in MARKER_FOLDERS[m]))


def shell_scripts() -> list[str]:
    return sorted(str(p) for p in ROOT.glob("scripts/*.sh")) + sorted(str(p) for p in ROOT.glob(".ci/*"))


@nox.session
def lint(session: nox.Session) -> None:
    """Static checks: ruff, the type check's ratchet (mypy), the secret scan, shellcheck, actionlint."""
    bin_dir = Path(PYTHON).parent
    session.run(PYTHON, "-m", "ruff", "check", "trm", "tools", "tests", "noxfile.py")
    session.run(PYTHON, "-m", "ruff", "format", "--check", "trm", "tools", "tests", "noxfile.py")
    session.run(PYTHON, "-m", "tools.typecheck")
    session.run(PYTHON, "-m", "tools.secrets")  # the whole repository, untracked files too (tools/secrets)
    session.run(str(bin_dir / "shellcheck"), *shell_scripts(), external=True)
    # actionlint also shellchecks each `run:` script with the shellcheck it finds on PATH (the venv's).
    workflows = sorted(str(p) for p in Path(".github/workflows").glob("*.yml"))
    path = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    session.run(str(bin_dir / "actionlint"), *workflows, external=True, env={"PATH": path})


@nox.session
def tests(session: nox.Session) -> None:
    """CPU test suite with pytest-xdist (`-- ARGS` are passed to pytest)."""
    session.run(PYTHON, "-m", "pytest", "-n", "auto", *session.posargs)


@nox.session(default=False)
def tests_e2e(session: nox.Session) -> None:
    """The end-to-end and multi-process CPU tests (marker e2e) that the default `tests` session leaves out."""
    # the Kaggle and launcher ones (marker kaggle or launch too) run once, in the kaggle and launch sessions
    select = "e2e and not slow and not kaggle and not launch"
    session.run(PYTHON, "-m", "pytest", "-n", "auto", "-m", select, *session.posargs)


# The core of the CPU suite, run again under the oldest torch the code supports: the CUDA 12.8 images'
# (docker/images.toml [families.cu128].torch), in its own venv.
TORCH_OLDEST_VENV = ROOT / "build" / "venv-torch-oldest"
# From the launcher, the one test of a torch API: the torchrun command must parse with the oldest torch's
# torchrun too (the rest of test_plan.py is the launcher's own logic).
CORE_SUITE = (
    "tests/model",
    "tests/optim",
    "tests/training",
    "tests/evaluation",
    "tests/data",
    "tests/launch/plan/test_plan.py::test_torchrun_command_parses_with_this_torchs_torchrun",
)
# What those tests import besides torch: the project's pins (pyproject) of these packages and extras.
CORE_TEST_PINS = ("pytest", "pytest-xdist", "pytest-benchmark", "pyyaml")
CORE_TEST_EXTRAS = ("wandb", "tensorboard")


def oldest_torch() -> str:
    families = tomllib.loads((ROOT / "docker" / "images.toml").read_text())["families"]
    return min((f["torch"] for f in families.values()), key=lambda v: tuple(map(int, v.split("."))))


def core_test_requirements() -> list[str]:
    """pyproject's runtime pins without torch (devtorch installs that), the test tools and extras."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    runtime = [r for r in project["dependencies"] if not r.lower().startswith("torch")]
    tools = [r for r in extras["dev"] if r.split("==")[0].lower() in CORE_TEST_PINS]
    return runtime + tools + [r for name in CORE_TEST_EXTRAS for r in extras[name]]


@nox.session(default=False)
def tests_oldest_torch(session: nox.Session) -> None:
    """Core CPU suite (model, optim, training lifecycle, data, evaluation) under the CUDA 12.8 images' torch."""
    torch = oldest_torch()
    python = TORCH_OLDEST_VENV / "bin" / "python"
    if not python.exists():
        session.run(PYTHON, "-m", "venv", str(TORCH_OLDEST_VENV), external=True)
    # uv writes the packages' bytecode at install, as pip does (uv's default is not to): where
    # PYTHONDONTWRITEBYTECODE is set, every test process would otherwise compile torch's sources again at its
    # import (the step took 2.2x as long)
    env = {"PYTHONPATH": str(ROOT), "UV_COMPILE_BYTECODE": "1"}
    # the CPU build from PyTorch's index when it answers (CI), else the configured index's torch
    # uv (a dev dependency) unpacks the GB of a CUDA build's wheels in parallel: ~20 s where pip took minutes
    uv = str(Path(PYTHON).parent / "uv")
    session.run(str(python), "-m", "trm.devtorch", "--version", torch, "--uv", uv, env=env, external=True)
    install = [uv, "pip", "install", "--python", str(python), "-q"]
    session.run(*install, *core_test_requirements(), env=env, external=True)
    session.run(*install, "--no-deps", "-e", str(ROOT), env=env, external=True)
    session.run(
        str(python),
        "-c",
        f"import torch; assert torch.__version__.startswith('{torch}'), torch.__version__",
        external=True,
    )
    # Of the core's e2e-marked tests, those of the torch APIs that change between versions run here too: the
    # multi-process ones (gloo collectives, the flight recorder) and torch.compile's graphs. The others test
    # this project's logic, which the current torch's e2e step covers.
    select = [
        "-m",
        "not gpu and not docker and not slow and not download and (not e2e or dist or torch_compile)",
    ]
    session.run(
        str(python), "-m", "pytest", "-n", "auto", *select, *(session.posargs or CORE_SUITE), external=True
    )


@nox.session(default=False)
def gpu(session: nox.Session) -> None:
    """The gpu-marked tests; fails loudly when no CUDA GPU is visible."""
    session.env["TRM_REQUIRE_GPU"] = "1"
    session.run(PYTHON, "-m", "pytest", "-m", "gpu", *session.posargs)


@nox.session(default=False)
def gpu_acceptance(session: nox.Session) -> None:
    """One report on a GPU host (build/gpu-acceptance/) within a budget: facts, gpu tests, extension, resume,
    probe, bench (`-- --budget-s 540 --profile full` …)."""
    session.run(PYTHON, "-m", "tools.gpu.check", *session.posargs)


@nox.session(default=False)
def runbooks(session: nox.Session) -> None:
    """Runbooks and jobs: static checks, jobs tests (kustomize required), every `bash cpu` block."""
    session.env["TRM_REQUIRE_KUSTOMIZE"] = "1"
    session.run(PYTHON, "-m", "tools.runbooks", "check")
    # `tools.runbooks run` below runs every cpu block: the default suite's run of two of them is left out here
    fast_blocks = "tests/tools/runbooks/test_runbooks_repo.py::test_fast_cpu_blocks_run_against_the_project"
    session.run(
        PYTHON, "-m", "pytest", "-q", "-n", "auto", "-m", "kube or runbooks", *marker_folders("kube", "runbooks"),
        "--deselect", fast_blocks,
    )  # fmt: skip
    session.run(PYTHON, "-m", "tools.runbooks", "run", *session.posargs)


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Benchmarks, not tests: `nox -s bench -- <name> [args]` runs module tools.bench.<name> (e.g. `data`)."""
    helpers = {
        "__init__",
        "arc_synthetic",
        "curve_data",
        "curve_stats",
        "subset_arc",
        "subset_run",
        "subset_stats",
        "subset_votes",
        "upstream_trainer",
        "urm_reference",
    }  # modules of tools/bench that are not benchmarks
    available = sorted(p.stem for p in (ROOT / "tools" / "bench").glob("*.py") if p.stem not in helpers)
    if not session.posargs or session.posargs[0] not in available:
        session.error(f"name a benchmark: nox -s bench -- <{'|'.join(available)}> [args]")
    name, *args = session.posargs
    session.run(PYTHON, "-m", f"tools.bench.{name}", *args)


@nox.session(default=False)
def docker(session: nox.Session) -> None:
    """Real image test: Docker engine + local registry on 127.0.0.1, build `cpu`, smoke, push, pull, rerun."""
    session.run("bash", "scripts/image_test.sh", *session.posargs, env={"PYTHON": PYTHON}, external=True)


@nox.session(default=False)
def docker_gpu(session: nox.Session) -> None:
    """GPU variants through the adam-atan2 stage (SASS check) on this machine: ~2.7 GB wheelhouse, long."""
    session.run(
        "bash",
        "scripts/image_test.sh",
        *session.posargs,
        env={"PYTHON": PYTHON, "TRM_IMAGE_TESTS": "tests/tools/images/test_docker_gpu.py"},
        external=True,
    )


@nox.session(default=False)
def smoke(session: nox.Session) -> None:
    """CPU run lifecycle: build a tiny ARC set, train, SIGTERM, resume, evaluate (`-- --workdir DIR`)."""
    session.run(PYTHON, "-m", "trm.training.smoke", *session.posargs)


@nox.session(default=False)
def launch(session: nox.Session) -> None:
    """scripts/train_prod.sh on CPU (slow): real data + trainer, torchrun 2 gloo ranks, kill, resume, handoff."""
    session.run(
        PYTHON, "-m", "pytest", "-n", "auto", "-m", "launch", *marker_folders("launch"), *session.posargs
    )


@nox.session(default=False)
def kaggle(session: nox.Session) -> None:
    """Kaggle bundle end to end (slow, needs the package index): wheelhouse, offline install, inference."""
    session.run(PYTHON, "-m", "pytest", "-m", "kaggle", *marker_folders("kaggle"), *session.posargs)
