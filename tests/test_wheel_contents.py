"""The wheel that runtime images and the Kaggle wheelhouse install: the runtime package (trm/) without the
repository tooling (tools/), and a command line of user commands that runs from the wheel alone."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from trm.commands import COMMANDS
from trm.kaggle.wheelhouse import build_own_wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_own_wheel(tmp_path_factory.mktemp("wheel"))


def test_the_wheel_leaves_repository_tooling_out(wheel):
    packages = {name.rsplit("/", 1)[0] for name in zipfile.ZipFile(wheel).namelist() if name.endswith(".py")}
    assert {"trm", "trm/commands", "trm/launch", "trm/kaggle", "trm/training", "trm/images"} <= packages
    assert not any(p.startswith(("tools", "trm/ops", "trm/bench")) for p in packages)
    assert {"trm/experiments/suites/paper.toml", "trm/experiments/suites/smoke.toml"} <= set(
        zipfile.ZipFile(wheel).namelist()
    )


def test_the_installed_wheel_ships_every_command_and_no_tooling_command(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(target), str(wheel)],
        check=True,
    )  # fmt: skip
    # -S: no site-packages, so neither the checkout nor its editable install is importable; only the wheel.
    env = {**os.environ, "PYTHONPATH": str(target)}

    def trm(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-S", "-m", "trm", *args], env=env, cwd=tmp_path, capture_output=True, text=True
        )

    help_ = trm("--help")
    assert help_.returncode == 0 and "launch" in help_.stdout and "runbooks" not in help_.stdout
    shipped = set(zipfile.ZipFile(wheel).namelist())
    assert {f"trm/commands/{c.module.rpartition('.')[2]}.py" for c in COMMANDS} <= shipped  # every command
    assert trm("version", "--help").returncode == 0
    refused = trm("runbooks", "check")  # a repository task: `python -m tools.runbooks` in a checkout
    assert refused.returncode == 2 and "invalid choice" in refused.stderr
