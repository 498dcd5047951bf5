"""nox sessions for trm-stack. They reuse the project venv (`make venv`): run them as `make test` or
`.venv/bin/nox -s <session>`, so torch is never reinstalled."""

from __future__ import annotations

import sys
from pathlib import Path

import nox

nox.options.default_venv_backend = "none"
nox.options.sessions = ["lint", "tests"]

ROOT = Path(__file__).parent
PYTHON = sys.executable


def shell_scripts() -> list[str]:
    return sorted(str(p) for p in ROOT.glob("scripts/*.sh")) + sorted(str(p) for p in ROOT.glob(".ci/*"))


@nox.session
def lint(session: nox.Session) -> None:
    """Static checks: ruff on Python, shellcheck on every shell script."""
    session.run(PYTHON, "-m", "ruff", "check", "trm", "tests", "noxfile.py")
    session.run(PYTHON, "-m", "ruff", "format", "--check", "trm", "tests", "noxfile.py")
    session.run(str(Path(PYTHON).parent / "shellcheck"), *shell_scripts(), external=True)


@nox.session
def tests(session: nox.Session) -> None:
    """CPU test suite with pytest-xdist (`-- ARGS` are passed to pytest)."""
    session.run(PYTHON, "-m", "pytest", "-n", "auto", *session.posargs)


@nox.session(default=False)
def gpu(session: nox.Session) -> None:
    """The gpu-marked tests; fails loudly when no CUDA GPU is visible."""
    session.env["TRM_REQUIRE_GPU"] = "1"
    session.run(PYTHON, "-m", "pytest", "-m", "gpu", *session.posargs)


@nox.session(default=False)
def kaggle(session: nox.Session) -> None:
    """Kaggle bundle end to end (slow, needs the package index): wheelhouse, offline install, inference."""
    session.run(PYTHON, "-m", "pytest", "-m", "slow", "tests/test_kaggle.py", *session.posargs)
