"""The kernel `python -m trm kaggle publish` pushes: a notebook that installs trm-stack from the wheelhouse
dataset with the internet off and writes `submission.json` with `python -m trm infer`.

It finds what is attached by content, not by mount path: the wheelhouse is the folder holding
`trm_stack-*.whl`, the weights the folder whose `config.json` is a trm-kaggle-bundle, the challenges the
competition's file of the configured name, anywhere under /kaggle/input. The commands are the ones the
bundle's README.md gives (pip with --no-index from the wheelhouse; `trm infer --ranks auto` with the time
budget, on every attached GPU, and, when given, test-time adaptation of the tasks without trained rows). TRM_KAGGLE_INPUT / TRM_KAGGLE_WORKING
replace /kaggle/input and /kaggle/working, so that the same notebook runs anywhere (`script`: its code
cells as one Python file).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from trm.kaggle.bundle import FORMAT

INPUT, WORKING = "/kaggle/input", "/kaggle/working"
# Run the notebook outside Kaggle (the offline CI test, a dry run on a workstation): the folders instead.
INPUT_ENV, WORKING_ENV = "TRM_KAGGLE_INPUT", "TRM_KAGGLE_WORKING"


@dataclass(frozen=True)
class KernelSettings:
    """What the notebook is configured with (its first code cell)."""

    weights_dataset: str
    wheels_dataset: str
    challenges_name: str = "arc-agi_test_challenges.json"
    max_minutes: float = 600
    adapt_minutes: float | None = 300
    ranks: str = "auto"
    """`trm infer --ranks`: auto runs one process per visible GPU (all four of the competition's)."""


def _settings_cell(s: KernelSettings) -> str:
    return "\n".join(
        [
            "# Written by `python -m trm kaggle publish`; change and re-run to experiment.",
            "import os",
            "",
            "# where Kaggle mounts attached datasets and the competition (TRM_KAGGLE_INPUT: a copy elsewhere)",
            f"INPUT = os.environ.get({INPUT_ENV!r}, {INPUT!r})",
            "# the notebook's output folder, submission.json goes here (TRM_KAGGLE_WORKING: elsewhere)",
            f"WORKING = os.environ.get({WORKING_ENV!r}, {WORKING!r})",
            f"WEIGHTS_DATASET = {s.weights_dataset!r}",
            f"WHEELS_DATASET = {s.wheels_dataset!r}",
            f"CHALLENGES_NAME = {s.challenges_name!r}",
            f"MAX_MINUTES = {s.max_minutes!r}  # the whole inference budget (`trm infer --max-minutes`)",
            f"ADAPT_MINUTES = {s.adapt_minutes!r}  # test-time training within it; None: no adaptation",
            f"RANKS = {s.ranks!r}  # processes, one per GPU (`trm infer --ranks`; auto: every GPU attached)",
        ]
    )


_LOCATE = f"""# Find the attached datasets and the competition's challenges by their content.
import glob
import json
import os


def find_all(pattern):
    return sorted(glob.glob(os.path.join(INPUT, "**", pattern), recursive=True))


def is_bundle(folder):
    try:
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
            return json.load(f).get("format") == {FORMAT!r}
    except (OSError, ValueError):
        return False


wheels = find_all("trm_stack-*.whl")
bundles = [os.path.dirname(p) for p in find_all("manifest.json") if is_bundle(os.path.dirname(p))]
challenges = find_all(CHALLENGES_NAME)
for found, what in ((wheels, WHEELS_DATASET), (bundles, WEIGHTS_DATASET), (challenges, CHALLENGES_NAME)):
    if not found:
        raise SystemExit(f"nothing of {{what}} under {{INPUT}}: attach it to this notebook (Add Input)")
WHEELS, WEIGHTS, CHALLENGES = os.path.dirname(wheels[0]), bundles[0], challenges[0]
print("wheelhouse:", WHEELS, "| weights:", WEIGHTS, "| challenges:", CHALLENGES, flush=True)"""

_INSTALL = """# Install trm-stack and its pinned dependencies from the wheelhouse (no index: the internet is off).
import subprocess
import sys

pip = [sys.executable, "-m", "pip", "install", "--no-index"]
subprocess.run([*pip, "--find-links", WHEELS, "-r", os.path.join(WHEELS, "requirements.txt")], check=True)
subprocess.run([*pip, "--no-deps", *glob.glob(os.path.join(WHEELS, "trm_stack-*.whl"))], check=True)"""

_INFER = """# Write the submission: two attempts for every test input, within the time budget, on every GPU
# (the tasks split into groups, one process per GPU; a group whose process fails gets un-adapted predictions).
command = [
    sys.executable, "-m", "trm", "infer", "--challenges", CHALLENGES, "--weights", WEIGHTS,
    "--out", os.path.join(WORKING, "submission.json"), "--max-minutes", str(MAX_MINUTES), "--ranks", RANKS,
]
if ADAPT_MINUTES:
    command += ["--adapt-minutes", str(ADAPT_MINUTES), "--adapt-dir", os.path.join(WORKING, "adapt")]
subprocess.run(command, check=True)"""


def code_cells(settings: KernelSettings) -> list[str]:
    """The notebook's code cells, in order: settings, locate, install, infer."""
    return [_settings_cell(settings), _LOCATE, _INSTALL, _INFER]


def script(notebook_text: str) -> str:
    """A notebook's code cells as one Python script (what running it top to bottom executes)."""
    cells = json.loads(notebook_text)["cells"]
    return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code") + "\n"


def _cell(kind: str, source: str) -> dict[str, Any]:
    cell: dict[str, Any] = {"cell_type": kind, "metadata": {}, "source": source.splitlines(keepends=True)}
    if kind == "code":
        cell.update(execution_count=None, outputs=[])
    return cell


def render_notebook(settings: KernelSettings, title: str) -> str:
    """The notebook (nbformat 4) as JSON text."""
    intro = (
        f"# {title}\n\nOffline ARC Prize submission with trm-stack: installs the wheelhouse "
        f"(`{settings.wheels_dataset}`) and runs `python -m trm infer` with the weights "
        f"(`{settings.weights_dataset}`). Internet off, GPU on."
    )
    notebook = {
        "cells": [_cell("markdown", intro), *(_cell("code", c) for c in code_cells(settings))],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 4,
    }
    return json.dumps(notebook, indent=1) + "\n"
