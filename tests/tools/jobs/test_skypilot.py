"""jobs/skypilot/: the managed-job tasks load with SkyPilot's own parser and keep our exit-code contract."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import pytest
import yaml

from trm import exit_codes
from trm.launch.config.settings import LaunchSettings
from trm.launch.config.variables import ENV_VARS

ROOT = Path(__file__).resolve().parents[3]
TASKS = sorted((ROOT / "jobs" / "skypilot").glob("*.yaml"))
LAUNCH_VARS = {v.name for v in ENV_VARS}
needs_skypilot = pytest.mark.skipif(
    importlib.util.find_spec("sky") is None,
    reason="skypilot is not installed: pip install -e '.[skypilot]' (the pinned optional dependency; .ci/run "
    "installs it)",
)


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def test_there_is_a_production_and_a_smoke_task():
    assert [p.name for p in TASKS] == ["smoke.yaml", "train.yaml"]


@pytest.mark.parametrize("path", TASKS, ids=lambda p: p.name)
def test_exit_codes_recovery_and_the_launcher(path):
    task = _load(path)
    recovery = task["resources"]["job_recovery"]
    # 75 (saved, safe to retry) and 77 (hung) recover; 2, 74, 78 and 79 must end the job, so no blanket
    # restarts on errors.
    assert recovery["recover_on_exit_codes"] == [exit_codes.SAVED_RETRY, exit_codes.HUNG]
    assert recovery["max_restarts_on_errors"] == 0
    # one candidate per GPU, each with its image (placeholder until released; --gpus + --image-id override)
    candidates = task["resources"]["any_of"]
    assert candidates and all(c["image_id"] == "docker:trm-stack" for c in candidates)
    assert "image_id" not in task["resources"] and "accelerators" not in task["resources"]
    # The run restores from the bucket, then runs the production launcher from the synced checkout.
    run = task["run"]
    assert task["workdir"] == "." and run.strip().splitlines()[-1] == "bash scripts/train_prod.sh"
    assert '-m trm sync --from "$SYNC_TO/$RUN_NAME" "$WORKSPACE/checkpoints/$RUN_NAME" --missing-ok' in run
    assert task["file_mounts"]["/sync"] == {"name": "${CHECKPOINT_BUCKET}", "mode": "MOUNT_CACHED"}
    # Every env is a launcher setting (or the bucket), and together they are valid launch settings.
    envs = {k: v for k, v in task["envs"].items() if k != "CHECKPOINT_BUCKET"}
    assert set(envs) <= LAUNCH_VARS, set(envs) - LAUNCH_VARS
    settings = LaunchSettings.from_env({k: str(v) for k, v in envs.items()})
    assert settings.sync_remote == f"/sync/{envs['RUN_NAME']}"
    assert settings.max_hours is not None


def test_the_restore_command_of_the_tasks_exists():
    from trm.commands import build_parser

    parser = build_parser(["sync"])
    args = parser.parse_args(["sync", "--from", "/sync/r", "/workspace/checkpoints/r", "--missing-ok"])
    assert args.missing_ok and args.from_remote == "/sync/r"


@needs_skypilot
@pytest.mark.parametrize("path", TASKS, ids=lambda p: p.name)
def test_skypilot_loads_the_task(path, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # SkyPilot may create ~/.sky; keep it out of the real home
    import sky

    config = _load(path)
    task = sky.Task.from_yaml_config(copy.deepcopy(config), env_overrides=[("CHECKPOINT_BUCKET", "trm-runs")])
    # one Resources per any_of candidate, each with its GPU and its own image
    want = {
        (c["accelerators"].split(":")[0], int(c["accelerators"].split(":")[1]), c["image_id"])
        for c in config["resources"]["any_of"]
    }
    got = {(*next(iter(r.accelerators.items())), r.image_id[r.region]) for r in task.resources}
    assert got == want
    assert all(r.job_recovery == config["resources"]["job_recovery"] for r in task.resources)
    assert set(task.storage_mounts) == {"/sync"}
    # the bucket name is required at launch (--env CHECKPOINT_BUCKET=…)
    with pytest.raises(ValueError, match="CHECKPOINT_BUCKET"):
        sky.Task.from_yaml_config(copy.deepcopy(config))
    # SkyPilot's schema checks these fields: the loader really validates the files
    broken = copy.deepcopy(config)
    broken["resources"]["job_recovery"]["recover_on_exit_codes"] = [exit_codes.SAVED_RETRY, 300]
    with pytest.raises(ValueError, match="greater than the maximum of 255"):
        sky.Task.from_yaml_config(broken, env_overrides=[("CHECKPOINT_BUCKET", "trm-runs")])
    broken = copy.deepcopy(config)
    broken["file_mount"] = broken.pop("file_mounts")
    with pytest.raises(ValueError, match="Invalid task YAML"):
        sky.Task.from_yaml_config(broken, env_overrides=[("CHECKPOINT_BUCKET", "trm-runs")])


def test_every_task_names_its_image_variants_and_is_unreleased_here():
    from tools.jobs.sky import PLACEHOLDER, task_candidates

    for path in TASKS:
        candidates = task_candidates(path.read_text())
        assert ("H100", "sm90-cu128") in candidates and ("B200", "sm100-cu128") in candidates, path.name
        assert all(c["image_id"] == PLACEHOLDER for c in _load(path)["resources"]["any_of"])
    smoke = dict(task_candidates((ROOT / "jobs" / "skypilot" / "smoke.yaml").read_text()))
    # the smoke accepts the Blackwell, Ampere sm_86 and L4 cards, each with the variant of its SM
    assert {k: smoke[k] for k in ("RTXPRO6000", "RTX5090", "A6000", "A10G", "L4")} == {
        "RTXPRO6000": "sm120-cu128", "RTX5090": "sm120-cu128", "A6000": "sm80-cu128", "A10G": "sm80-cu128",
        "L4": "sm89-cu128",
    }  # fmt: skip


def test_a_candidate_whose_image_does_not_run_its_gpu_is_a_check_problem(tmp_path):
    import shutil

    from tools.jobs.sky import check_task_candidates

    assert check_task_candidates(ROOT) == []
    shutil.copytree(ROOT / "jobs" / "skypilot", tmp_path / "jobs" / "skypilot")
    path = tmp_path / "jobs" / "skypilot" / "train.yaml"
    path.write_text(path.read_text().replace("image-variant: sm100-cu128", "image-variant: sm90-cu128"))
    (problem,) = check_task_candidates(tmp_path)
    assert (
        "train.yaml: candidate B200 (sm_100) runs variant sm90-cu128, which has no kernels for it" in problem
    )
    path.write_text(path.read_text().replace("accelerators: B200:4", "accelerators: TPU-v9:4"))
    (problem,) = check_task_candidates(tmp_path)
    assert "has no known accelerator above it (TPU-v9)" in problem


def test_pinning_rewrites_only_the_image_id_value(tmp_path):
    import shutil

    from tools.images.imagelock import LockedImage
    from tools.jobs.sky import pin_tasks

    shutil.copytree(ROOT / "jobs" / "skypilot", tmp_path / "jobs" / "skypilot")
    digest = "sha256:" + "ab" * 32
    images = {"sm90-cu128": LockedImage("sm90-cu128", "ghcr.io/team/trm", "0.1.0-cu128-sm90", digest)}
    pinned = f"docker:ghcr.io/team/trm@{digest}"
    before = {p.name: p.read_text() for p in (tmp_path / "jobs" / "skypilot").glob("*.yaml")}
    assert pin_tasks(tmp_path, {}, check=True) == []  # nothing released: the placeholder is right
    assert pin_tasks(tmp_path, images, variants={"cpu"}) == []  # another variant released: untouched
    assert [p.name for p in pin_tasks(tmp_path, images, check=True)] == ["smoke.yaml", "train.yaml"]
    assert [p.name for p in pin_tasks(tmp_path, images)] == ["smoke.yaml", "train.yaml"]
    assert pin_tasks(tmp_path, images) == []  # idempotent
    for path in (tmp_path / "jobs" / "skypilot").glob("*.yaml"):
        text = path.read_text()
        # the released variant's candidate is pinned, the others keep the placeholder
        ids = {c["accelerators"]: c["image_id"] for c in _load(path)["resources"]["any_of"]}
        assert ids.pop("H100:" + ("1" if path.name == "smoke.yaml" else "4")) == pinned
        assert set(ids.values()) == {"docker:trm-stack"}
        # one line changed, its comment kept
        changed = [
            (a, b) for a, b in zip(before[path.name].splitlines(), text.splitlines(), strict=True) if a != b
        ]
        assert changed == [
            (
                "    image_id: docker:trm-stack  # trm-stack/image-variant: sm90-cu128",
                f"    image_id: {pinned}  # trm-stack/image-variant: sm90-cu128",
            )
        ]


def test_tasks_run_the_family_every_driver_runs(tmp_path):
    """SkyPilot picks the VM's driver: a task on a CUDA 13.0 (R580+) variant is a `jobs check` problem."""
    import shutil

    from tools.jobs.sky import check_task_families

    assert check_task_families(ROOT) == []
    shutil.copytree(ROOT / "jobs" / "skypilot", tmp_path / "jobs" / "skypilot")
    path = tmp_path / "jobs" / "skypilot" / "train.yaml"
    path.write_text(path.read_text().replace("image-variant: sm90-cu128", "image-variant: sm90"))
    (problem,) = check_task_families(tmp_path)
    assert "train.yaml: variant sm90 needs a newer driver" in problem and "e.g. sm90-cu128" in problem
