"""`python -m tools.jobs render --experiments P`: one Indexed Job whose completion index selects the experiment,
validated by `jobs check`; and the launcher side, `python -m trm launch --experiments`."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest

from tests.helpers import trm_in_process
from tests.tools.jobs.test_jobs import DIGEST, ROOT, kustomize, tree  # noqa: F401 - fixtures
from tools.images.imagelock import LockedImage
from tools.jobs import k8s
from tools.jobs import policy as jobpolicy
from tools.jobs.experiments import experiments_job
from trm.commands import build_parser
from trm.errors import TRMError
from trm.experiments import indexed
from trm.experiments.batch import batch_id

OVERLAY = "jobs/overlays/prod-4xh100"


def _job(objects: list[dict]) -> dict:
    (job,) = [o for o in objects if o["kind"] == "Job"]
    return job


@pytest.mark.kube
def test_the_experiment_job_is_indexed_over_the_names_and_passes_jobs_check(tree, kustomize):  # noqa: F811
    objects = experiments_job("exp03", tree / OVERLAY, parallelism=3, claim="trm-workspace-shared")
    job = _job(objects)
    spec = job["spec"]
    names = ["exp03a", "exp03b", "exp03c", "exp03d"]
    assert job["metadata"]["name"] == f"trm-{batch_id(names)}"
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 4, 3)
    base = _job(k8s.render(tree / OVERLAY))["spec"]
    assert spec["activeDeadlineSeconds"] == 2 * base["activeDeadlineSeconds"]  # two waves of pods
    (trainer,) = spec["template"]["spec"]["containers"]
    assert trainer["args"] == ["python", "-m", "trm", "launch", "--experiments", ",".join(names)]
    env = {e["name"] for e in trainer["env"]}
    assert "TASK" not in env and "RUN_NAME" not in env and "NUM_GPUS" in env
    assert k8s.validate(objects) == []
    problems = k8s.check_jobs(tree, build_parser(), extra=[(tree / OVERLAY, objects)])
    assert problems == []


@pytest.mark.kube
def test_pods_at_once_need_a_claim_every_node_can_mount(tree, kustomize):  # noqa: F811
    """The single-node overlays mount the ReadWriteOnce claim: a second pod on another node would hang with
    Multi-Attach, so the default is one at a time there and more is refused (it was rendered before)."""
    spec = _job(experiments_job("exp03", tree / OVERLAY))["spec"]
    assert spec["parallelism"] == 1 and spec["completions"] == 4
    assert (
        spec["activeDeadlineSeconds"] == 4 * _job(k8s.render(tree / OVERLAY))["spec"]["activeDeadlineSeconds"]
    )
    with pytest.raises(TRMError, match=r"claim trm-workspace, which is not ReadWriteMany .*Multi-Attach"):
        experiments_job("exp03", tree / OVERLAY, parallelism=3)
    shared = _job(experiments_job("exp03", tree / OVERLAY, claim="trm-workspace-shared"))["spec"]
    assert shared["parallelism"] == 4
    (volume,) = [v for v in shared["template"]["spec"]["volumes"] if "persistentVolumeClaim" in v]
    assert volume["persistentVolumeClaim"]["claimName"] == "trm-workspace-shared"


@pytest.mark.kube
def test_jobs_check_catches_an_experiment_job_that_does_not_match_its_list(tree, kustomize):  # noqa: F811
    image = LockedImage("sm90", "registry.example.com/trm", "0.1.0-cu130-sm90", DIGEST)
    objects = experiments_job("exp08", tree / OVERLAY)
    broken = copy.deepcopy(objects)
    _job(broken)["spec"]["completions"] = 5
    (trainer,) = _job(broken)["spec"]["template"]["spec"]["containers"]
    trainer["args"][-1] += ",exp99z"
    problems = jobpolicy.check_objects(broken, image, None, set())
    assert any("completionMode: Indexed and completions = 3" in p for p in problems), problems
    assert any("'exp99z' is not a shipped experiment" in p for p in problems), problems
    assert jobpolicy.check_objects(objects, image, None, set()) == []


@pytest.mark.kube
def test_cli_renders_the_experiment_job(kustomize):  # noqa: F811
    result = subprocess.run(
        [sys.executable, "-m", "tools.jobs", "render", "--experiments", "exp10"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    assert "completionMode: Indexed" in result.stdout and "- exp10a,exp10b" in result.stdout


def test_the_completion_index_selects_the_experiment_and_its_launch_settings():
    names = indexed.parse_names("exp05a, exp05c")
    exp = indexed.selected(names, {"JOB_COMPLETION_INDEX": "1"})
    assert exp.name == "exp05c"
    env = indexed.launch_environment(exp, names, {"TRAIN_OVERRIDES": "log_interval=10", "NUM_GPUS": "1"})
    assert env["TASK"] == "sudoku-mlp" and env["RUN_NAME"] == "exp05c-sudoku-mlp-subsample_size-500"
    assert env["TRAIN_OVERRIDES"] == "log_interval=10"  # data.* keys choose the dataset, not trainer keys
    assert env["WANDB_RUN_GROUP"] == batch_id(names) and env["NUM_GPUS"] == "1"
    recipe = indexed.recipe_of(exp)
    assert recipe.dataset == "sudoku-extreme-500-aug-1000" and recipe.build_args[:2] == (
        "--subsample-size",
        "500",
    )
    with pytest.raises(TRMError, match="JOB_COMPLETION_INDEX between 0 and 1"):
        indexed.selected(names, {"JOB_COMPLETION_INDEX": "2"})
    with pytest.raises(TRMError, match="unknown experiment 'exp5a'"):
        indexed.parse_names("exp5a")


def test_launch_dry_run_of_an_index_plans_the_experiments_run_and_dataset(tmp_path, monkeypatch, capsys):
    env = {
        **dict(__import__("os").environ),
        "JOB_COMPLETION_INDEX": "1",
        "NUM_GPUS": "0",
        "WORKSPACE": str(tmp_path),
    }
    monkeypatch.chdir(ROOT)
    # `python -m trm launch` in this process (tests/launch/plan/test_plan.py starts the launcher's script)
    result = trm_in_process(
        monkeypatch, capsys, ["launch", "--dry-run", "--experiments", "exp08a,exp08b"], env
    )
    assert result.returncode == 0, result.stderr
    assert "run           exp08b-sudoku-mlp-no-ema (recipe sudoku-mlp)" in result.stdout
    assert f"checkpoint_path={tmp_path / 'checkpoints' / 'exp08b-sudoku-mlp-no-ema'}" in result.stdout
    assert " ema=false" in result.stdout
