"""The pull-request workflow runs the README's checks and the end-to-end tests; every workflow pins its
actions by commit."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def _load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


def test_pull_requests_run_lint_the_tests_and_the_e2e_tests():
    ci = _load(ROOT / ".github" / "workflows" / "ci.yml")
    assert "pull_request" in ci["on"] and ci["on"]["push"]["branches"] == ["main"]
    runs = [step["run"] for job in ci["jobs"].values() for step in job["steps"] if "run" in step]
    for target in ("make lint", "make test", "make test-e2e"):
        assert target in runs, runs
    assert ci["permissions"] == {"contents": "read"}


def test_every_workflow_pins_its_actions_by_commit():
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "release.yml"}
    for path in WORKFLOWS:
        for job in _load(path)["jobs"].values():
            for step in job["steps"]:
                if "uses" in step:
                    assert re.fullmatch(r"[\w-]+/[\w-]+@[0-9a-f]{40}", step["uses"]), (
                        path.name,
                        step["uses"],
                    )
