"""Kubernetes jobs: offline schema validation of every overlay, the job rules, and image pinning."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

from tools.images.imagelock import LockedImage, read_lock
from tools.jobs import k8s
from tools.jobs import policy as jobpolicy
from tools.jobs.sky import pin_tasks
from tools.shell.refs import RefChecker
from trm import exit_codes, gpu_catalog
from trm.commands import build_parser
from trm.errors import TRMError

pytestmark = pytest.mark.kube

ROOT = Path(__file__).resolve().parents[3]
DIGEST = "sha256:" + "5e" * 32
LOCK = {
    "variants": {
        "sm90": {"repository": "registry.example.com/trm", "tag": "0.1.0-cu130-sm90", "digest": DIGEST},
        "sm90-cu128": {"repository": "registry.example.com/trm", "tag": "0.1.0-cu128-sm90", "digest": DIGEST},
    }
}


@pytest.fixture(scope="module")
def kustomize() -> list[str]:
    try:
        return k8s.kustomize_command()
    except TRMError as err:
        if os.environ.get("TRM_REQUIRE_KUSTOMIZE") == "1":
            pytest.fail(str(err))
        pytest.skip(f"{err} (CI sets TRM_REQUIRE_KUSTOMIZE=1 and installs it)")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of jobs/ and scripts/ with a lock file whose digest the overlays are pinned to."""
    shutil.copytree(ROOT / "jobs", tmp_path / "jobs")
    if (ROOT / "scripts").exists():
        shutil.copytree(ROOT / "scripts", tmp_path / "scripts")
    (tmp_path / "docker").mkdir()
    (tmp_path / "docker" / "images.lock.json").write_text(json.dumps(LOCK))
    k8s.pin_images(tmp_path)
    pin_tasks(tmp_path, read_lock(tmp_path))
    return tmp_path


@pytest.fixture(scope="module")
def rendered(kustomize, tmp_path_factory) -> dict[str, list[dict]]:
    base = tmp_path_factory.mktemp("jobs")
    shutil.copytree(ROOT / "jobs", base / "jobs")
    (base / "docker").mkdir()
    (base / "docker" / "images.lock.json").write_text(json.dumps(LOCK))
    k8s.pin_images(base)
    return {d.relative_to(base).as_posix(): k8s.render(d) for d in k8s.overlay_dirs(base)}


def _job(objects: list[dict]) -> dict:
    return next(o for o in objects if o["kind"] == "Job")


def test_every_overlay_is_there_and_validates_offline(rendered):
    assert set(rendered) == {
        "jobs/overlays/smoke",
        "jobs/overlays/prod-4xh100",
        "jobs/overlays/prod-8xh200",
        "jobs/overlays/multinode-2x8xh200",
        "jobs/overlays/urm-8xh100",
        "jobs/storage/rwo",
        "jobs/storage/rwx",
        "jobs/tools/copy-out",
    }
    for name, objects in rendered.items():
        assert objects, name
        assert k8s.validate(objects) == [], name


def test_strict_schema_rejects_typos_and_wrong_types(rendered):
    job = copy.deepcopy(_job(rendered["jobs/overlays/smoke"]))
    job["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    problems = k8s.validate([job])
    assert len(problems) == 1 and "volumeMount" in problems[0]
    job = copy.deepcopy(_job(rendered["jobs/overlays/smoke"]))
    job["spec"]["activeDeadlineSeconds"] = "1800"
    problems = k8s.validate([job])
    assert len(problems) == 1 and "activeDeadlineSeconds" in problems[0]


def test_copy_out_pod_reads_the_volume_read_only_and_copies_like_trm_sync(rendered):
    (pod,) = rendered["jobs/tools/copy-out"]
    assert pod["kind"] == "Pod" and pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["activeDeadlineSeconds"] > 0
    (volume,) = pod["spec"]["volumes"]
    assert volume["persistentVolumeClaim"] == {"claimName": "trm-workspace", "readOnly": True}
    (container,) = pod["spec"]["containers"]
    assert all(m["readOnly"] for m in container["volumeMounts"])
    assert {m["subPath"] for m in container["volumeMounts"]} == {"checkpoints", "artifacts"}
    # credentials come from a Secret made by hand, never from the manifest; the run from `jobs copy-out`
    assert container["envFrom"] == [{"secretRef": {"name": "trm-rclone"}}]
    script = container["args"][0]
    from trm.launch.storage.sync import HANDOFF_SUBDIR

    assert '--exclude "/.step_*/**"' in script and '--exclude "/step_*/COMPLETE"' in script
    for pattern in ("/launch/smoke/**", "/launch/probe/**", "/launch/onstart.pid", ".*.tmp"):
        assert f'--exclude "{pattern}"' in script, pattern
    assert script.index('--exclude "/step_*/COMPLETE"') < script.index('--include "/step_*/COMPLETE"')
    assert f'"$dest/{HANDOFF_SUBDIR}"' in script and "python -m trm sync --from" in script


def test_storage_variants(rendered):
    modes = {
        o["metadata"]["name"]: o["spec"]["accessModes"]
        for key in ("jobs/storage/rwo", "jobs/storage/rwx")
        for o in rendered[key]
    }
    assert modes == {"trm-workspace": ["ReadWriteOnce"], "trm-workspace-shared": ["ReadWriteMany"]}


def test_job_rules_hold_for_every_overlay(rendered):
    rwx = jobpolicy.rwx_claim_names({Path(k): v for k, v in rendered.items()})
    image = LockedImage("sm90", "registry.example.com/trm", "0.1.0-cu130-sm90", DIGEST)
    for name, objects in rendered.items():
        assert jobpolicy.check_objects(objects, image, None, rwx) == [], name


def test_gpu_counts_products_and_deadlines(rendered):
    expected = {
        "jobs/overlays/smoke": (1, 1800),
        "jobs/overlays/prod-4xh100": (4, None),
        "jobs/overlays/prod-8xh200": (8, None),
        "jobs/overlays/multinode-2x8xh200": (8, None),
        "jobs/overlays/urm-8xh100": (8, None),
    }
    for name, (gpus, deadline) in expected.items():
        job = _job(rendered[name])
        pod = job["spec"]["template"]["spec"]
        trainer = pod["containers"][0]
        assert int(trainer["resources"]["limits"]["nvidia.com/gpu"]) == gpus, name
        env = {e["name"]: e.get("value") for e in trainer["env"]}
        assert env["NUM_GPUS"] == str(gpus), name
        if deadline:
            assert job["spec"]["activeDeadlineSeconds"] == deadline
    for overlay, gpu in [
        ("prod-8xh200", "H200"), ("multinode-2x8xh200", "H200"), ("prod-4xh100", "H100"), ("urm-8xh100", "H100"),
    ]:  # fmt: skip
        pod = _job(rendered[f"jobs/overlays/{overlay}"])["spec"]["template"]["spec"]
        assert "nodeSelector" not in pod, overlay
        assert jobpolicy._product_terms(pod) == [list(gpu_catalog.k8s_products()[gpu])], overlay


def _job_overlays(rendered) -> dict[str, list[dict]]:
    return {k: v for k, v in rendered.items() if any(o["kind"] == "Job" for o in v)}


def test_trainer_runs_behind_the_entrypoint_with_time_to_save(rendered):
    for name, objects in _job_overlays(rendered).items():
        pod = _pod(objects)
        trainer = _trainer(objects)
        assert "command" not in trainer and trainer["args"][:4] == jobpolicy.LAUNCH_COMMAND, name
        assert pod["terminationGracePeriodSeconds"] >= 300 + jobpolicy.GRACE_MARGIN_S, name


def test_budget_and_disk_full_end_the_job(rendered):
    assert len(_job_overlays(rendered)) == 5
    for name, objects in _job_overlays(rendered).items():
        job = _job(objects)
        assert jobpolicy._exit_rule(job, exit_codes.BUDGET_STOPPED) == "FailJob", name
        assert jobpolicy._exit_rule(job, exit_codes.DISK_FULL) == "FailJob", name
        assert jobpolicy._exit_rule(job, exit_codes.SAVED_RETRY) == "Ignore", name
        assert jobpolicy._exit_rule(job, exit_codes.NONFINITE) == "FailJob", name
        assert jobpolicy._exit_rule(job, exit_codes.HUNG) == "Count", name
        codes = [getattr(exit_codes, n) for n in dir(exit_codes) if n.isupper() and n != "NOT_RETRIED"]
        failing = {code for code in codes if jobpolicy._exit_rule(job, code) == "FailJob"}
        assert failing == exit_codes.NOT_RETRIED, name


def test_wandb_key_only_from_a_secret(rendered):
    for name, objects in rendered.items():
        for _, container in k8s.containers(objects):
            for var in container.get("env", []):
                if var["name"] == "WANDB_API_KEY":
                    assert "value" not in var and var["valueFrom"]["secretKeyRef"]["name"] == "trm-wandb", (
                        name
                    )


def _broken(rendered, overlay: str, mutate) -> list[str]:
    objects = copy.deepcopy(rendered[overlay])
    mutate(objects)
    rwx = jobpolicy.rwx_claim_names({Path(k): v for k, v in rendered.items()})
    image = LockedImage("sm90", "registry.example.com/trm", "0.1.0-cu130-sm90", DIGEST)
    return jobpolicy.check_objects(objects, image, None, rwx)


def _pod(objects):
    return _job(objects)["spec"]["template"]["spec"]


def _trainer(objects):
    return _pod(objects)["containers"][0]


# The pod failure policy's rules for the watchdog's exit codes (production and smoke overlays alike).
WATCHDOG_BREAKAGES = {
    "(hung, the watchdog ended it) must be retried": lambda o: _job(o)["spec"]["podFailurePolicy"][
        "rules"
    ].pop(5),
    "(non-finite loss or gradients) must FailJob": lambda o: _job(o)["spec"]["podFailurePolicy"]["rules"][1][
        "onExitCodes"
    ].update(values=[74, 79]),
}

BREAKAGES = {
    "hide the image's code": lambda o: _trainer(o)["volumeMounts"].append(
        {"name": "workspace", "mountPath": "/workspace", "subPath": "x"}
    ),
    "without subPath": lambda o: _trainer(o)["volumeMounts"][0].pop("subPath"),
    "/dev/shm must be": lambda o: _trainer(o).update(
        volumeMounts=[m for m in _trainer(o)["volumeMounts"] if m["mountPath"] != "/dev/shm"]
    ),
    "medium: Memory": lambda o: next(v for v in _pod(o)["volumes"] if v["name"] == "dshm")["emptyDir"].pop(
        "medium"
    ),
    "inline value": lambda o: _trainer(o)["env"].append({"name": "WANDB_API_KEY", "value": "x"}),
    "not pinned by digest": lambda o: _trainer(o).update(image="registry.example.com/trm:latest"),
    "TRM_IMAGE_DIGEST must be": lambda o: _trainer(o).update(
        env=[e for e in _trainer(o)["env"] if e["name"] != "TRM_IMAGE_DIGEST"]
    ),
    "differs from the lock": lambda o: _trainer(o).update(
        image="registry.example.com/trm@sha256:" + "0" * 64
    ),
    "(configuration error) must FailJob": lambda o: _job(o)["spec"]["podFailurePolicy"]["rules"].pop(0),
    "(saved, safe to retry)": lambda o: _job(o)["spec"]["podFailurePolicy"]["rules"].pop(2),
    "DisruptionTarget": lambda o: _job(o)["spec"]["podFailurePolicy"]["rules"].pop(3),
    "activeDeadlineSeconds": lambda o: _job(o)["spec"].pop("activeDeadlineSeconds"),
    "ttlSecondsAfterFinished": lambda o: _job(o)["spec"].pop("ttlSecondsAfterFinished"),
    "restartPolicy: Never": lambda o: _pod(o).update(restartPolicy="OnFailure"),
    "must pick the GPU product": lambda o: _pod(o).pop("affinity"),
    "matches one spelling of the GPU only": lambda o: _pod(o).update(
        nodeSelector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    ),
    "lacks NVIDIA-H100-SXM5-80GB": lambda o: _pod(o)["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]["matchExpressions"][0].update(values=["NVIDIA-H100-80GB-HBM3"]),
    "replaces the image's entrypoint": lambda o: _trainer(o).update(command=_trainer(o).pop("args")),
    "args must start with": lambda o: _trainer(o).update(args=["bash", "-c", "sleep infinity"]),
    "a slow save would be SIGKILLed": lambda o: _pod(o).update(terminationGracePeriodSeconds=180),
    "SHUTDOWN_TIMEOUT 900": lambda o: _trainer(o)["env"].append({"name": "SHUTDOWN_TIMEOUT", "value": "900"}),
    "SHUTDOWN_TIMEOUT must be a whole number": lambda o: _trainer(o)["env"].append(
        {"name": "SHUTDOWN_TIMEOUT", "value": "5m"}
    ),
    "(MAX_HOURS budget spent) must FailJob": lambda o: _job(o)["spec"]["podFailurePolicy"]["rules"].pop(1),
    "must set OMP_NUM_THREADS": lambda o: _trainer(o).update(
        env=[e for e in _trainer(o)["env"] if e["name"] != "OMP_NUM_THREADS"]
    ),
    "NCCL behaviour": lambda o: _trainer(o).update(
        env=[e for e in _trainer(o)["env"] if "NCCL" not in e["name"]]
    ),
    "request GPUs": lambda o: _trainer(o)["resources"]["limits"].pop("nvidia.com/gpu"),
    "silently ignored": lambda o: _trainer(o)["env"].append({"name": "NUM_GPU", "value": "4"}),
    "never committed": lambda o: o.append({"kind": "Secret", "metadata": {"name": "trm-wandb"}}),
    "(a fault of the node found by the preflight) must be a Count rule": lambda o: _job(o)["spec"][
        "podFailurePolicy"
    ]["rules"].pop(4),
    **WATCHDOG_BREAKAGES,
    "not defined above it": lambda o: _trainer(o)["env"].insert(
        0, {"name": "RUN_NAME", "value": "run-$(LATER)"}
    ),
}


@pytest.mark.parametrize("expected", sorted(BREAKAGES))
def test_each_rule_catches_its_breakage(rendered, expected: str):
    problems = _broken(rendered, "jobs/overlays/prod-4xh100", BREAKAGES[expected])
    assert any(expected in p for p in problems), problems


def _deadline(seconds: int):
    return lambda o: _job(o)["spec"].update(activeDeadlineSeconds=seconds)


@pytest.mark.parametrize(
    ("overlay", "seconds", "expected"),
    [
        # The overlay as it was: 96 h for urm-arc2, which the launcher expects to take 109 h on 8xH100.
        ("jobs/overlays/urm-8xh100", 345600, "activeDeadlineSeconds 345600 (96 h) is shorter than TASK=urm-arc2's "
         "expected run on 8x H100, 109 h (step time: estimate: FLOPs at MFU 0.30), x 1.25 margin"),
        # arc2 on 4xH100: 47.8 h expected (derived from the H100 measurement), 60 h with the margin.
        ("jobs/overlays/prod-4xh100", 48 * 3600, "set it to at least 214987 (60 h)"),
        # arc2 on two nodes of 8xH200: 13.5 h expected (FLOPs estimate), 17 h with the margin.
        ("jobs/overlays/multinode-2x8xh200", 12 * 3600, "set it to at least 60769 (17 h)"),
    ],
)  # fmt: skip
def test_a_deadline_shorter_than_the_expected_run_is_refused(rendered, overlay, seconds, expected):
    problems = _broken(rendered, overlay, _deadline(seconds))
    assert any(expected in p for p in problems), problems


def test_the_deadline_rule_skips_runs_without_an_estimate(rendered):
    # The smoke's dataset has no recorded sizes (its 30 min hold a few steps); an experiment Job runs
    # several recipes. Neither gets the rule; the production overlays pass it.
    assert jobpolicy.check_deadline("smoke", _job(rendered["jobs/overlays/smoke"])) == []
    for name in ("prod-4xh100", "prod-8xh200", "multinode-2x8xh200", "urm-8xh100"):
        assert jobpolicy.check_deadline(name, _job(rendered[f"jobs/overlays/{name}"])) == [], name


MULTINODE_BREAKAGES = {
    "ReadWriteMany": lambda o: next(v for v in _pod(o)["volumes"] if v["name"] == "workspace")[
        "persistentVolumeClaim"
    ].update(claimName="trm-workspace"),
    "MASTER_ADDR must be": lambda o: next(e for e in _trainer(o)["env"] if e["name"] == "MASTER_ADDR").update(
        value="localhost"
    ),
    "headless Service in the same overlay": lambda o: _pod(o).update(subdomain="nope"),
    "does not match the pod labels": lambda o: _job(o)["spec"]["template"]["metadata"]["labels"].clear(),
    "completionMode: Indexed": lambda o: _job(o)["spec"].pop("completionMode"),
    "must be headless": lambda o: next(x for x in o if x["kind"] == "Service")["spec"].pop("clusterIP"),
}


def _env_value(objects, name: str) -> dict:
    return next(e for e in _trainer(objects)["env"] if e["name"] == name)


SMOKE_BREAKAGES = {
    # The old overlay: RUN_NAME=smoke on the persistent volume, for every smoke ever run.
    "must contain the Job's UID": lambda o: _env_value(o, "RUN_NAME").update(value="smoke"),
    **WATCHDOG_BREAKAGES,
    # A patch that lists the UID variable after RUN_NAME: the kubelet would pass "smoke-$(SMOKE_JOB_UID)".
    "not defined above it": lambda o: _trainer(o)["env"].append(
        _trainer(o)["env"].pop(_trainer(o)["env"].index(_env_value(o, "SMOKE_JOB_UID")))
    ),
}


@pytest.mark.parametrize("expected", sorted(SMOKE_BREAKAGES))
def test_smoke_rules_catch_their_breakage(rendered, expected: str):
    assert _broken(rendered, "jobs/overlays/smoke", lambda o: None) == []
    problems = _broken(rendered, "jobs/overlays/smoke", SMOKE_BREAKAGES[expected])
    assert any(expected in p for p in problems), problems


def expand_env(container: dict, labels: dict[str, str]) -> dict[str, str]:
    """What the kubelet gives the container: downward-API label values, $(NAME) of variables above."""
    out: dict[str, str] = {}
    for var in container.get("env", []):
        field = var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath", "")
        if field.startswith("metadata.labels['"):
            out[var["name"]] = labels.get(field[len("metadata.labels['") : -2], "")
        elif "value" in var:
            out[var["name"]] = re.sub(r"\$\((\w+)\)", lambda m: out.get(m[1], m[0]), var["value"])
    return out


def test_every_smoke_job_runs_fresh_and_its_retries_share_the_run(rendered):
    trainer = _trainer(rendered["jobs/overlays/smoke"])
    first = expand_env(trainer, {"controller-uid": "4b1c-0001", "job-name": "trm-train-smoke"})
    retry = expand_env(trainer, {"controller-uid": "4b1c-0001", "job-name": "trm-train-smoke"})
    second = expand_env(trainer, {"controller-uid": "9e7f-0002", "job-name": "trm-train-smoke"})
    assert first["RUN_NAME"] == retry["RUN_NAME"] == "smoke-4b1c-0001"
    assert second["RUN_NAME"] == "smoke-9e7f-0002"  # a new Job: a new run directory, the smoke gate runs


@pytest.mark.parametrize("expected", sorted(MULTINODE_BREAKAGES))
def test_multinode_rules_catch_their_breakage(rendered, expected: str):
    problems = _broken(rendered, "jobs/overlays/multinode-2x8xh200", MULTINODE_BREAKAGES[expected])
    assert any(expected in p for p in problems), problems


def test_container_commands_only_call_what_exists(rendered):
    refs = RefChecker(ROOT, build_parser())
    for name, objects in rendered.items():
        for _, container in k8s.containers(objects):
            words = [*container.get("command", []), *container.get("args", [])]
            assert refs.check_code(" ".join(words)) == [], (name, words)
    assert refs.check_code("bash scripts/no_such_script.sh") != []


def test_pin_writes_the_lock_digest_and_check_detects_staleness(tree: Path, kustomize):
    assert k8s.pin_images(tree, check=True) == []
    lock = json.loads((tree / "docker" / "images.lock.json").read_text())
    new_digest = "sha256:" + "7a" * 32
    lock["variants"]["sm90"]["digest"] = new_digest
    (tree / "docker" / "images.lock.json").write_text(json.dumps(lock))
    stale = k8s.pin_images(tree, check=True)
    assert {p.name for p in stale} == {
        "smoke",
        "prod-4xh100",
        "prod-8xh200",
        "multinode-2x8xh200",
        "urm-8xh100",
    }
    assert k8s.pin_images(tree) == stale
    assert k8s.pin_images(tree, check=True) == []
    images = {c["image"] for _, c in k8s.containers(k8s.render(tree / "jobs" / "overlays" / "prod-8xh200"))}
    assert images == {f"registry.example.com/trm@{new_digest}"}
    data = yaml.safe_load((tree / "jobs" / "overlays" / "smoke" / "kustomization.yaml").read_text())
    assert data["patchesStrategicMerge"] == ["job-patch.yaml", "image-pin.yaml"]  # the rest is kept
    trainer = k8s.containers(k8s.render(tree / "jobs" / "overlays" / "smoke"))[0][1]
    assert {"name": "TRM_IMAGE_DIGEST", "value": new_digest} in trainer["env"]  # recorded in handoff.json


def test_pin_fails_for_a_variant_without_pushed_image(tree: Path):
    (tree / "docker" / "images.lock.json").write_text(
        json.dumps({"variants": {"cpu": LOCK["variants"]["sm90"]}})
    )
    with pytest.raises(TRMError, match="variant 'sm90' has no pushed image"):
        k8s.pin_images(tree)


def test_repository_overlays_are_pinned_to_the_lock_file():
    if not (ROOT / "docker" / "images.lock.json").exists():
        pytest.skip("docker/images.lock.json is written by `make image push`; nothing is pushed yet")
    read_lock(ROOT)
    assert k8s.pin_images(ROOT, check=True) == [], "run `python -m tools.jobs pin`"


def test_cli_check_and_pin(tree: Path, kustomize, monkeypatch, capsys):
    """`python -m tools.jobs check|pin` through its main() in this process (an interpreter a call imported
    torch again: 2 s of CPU each); test_experiments.py's render test starts `python -m tools.jobs` itself."""
    import subprocess

    from tests.helpers import main_in_process
    from tools.jobs.cli import main

    def cli(*args: str) -> subprocess.CompletedProcess:
        return main_in_process(monkeypatch, capsys, main, [*args, "--root", str(tree)])

    shutil.copytree(ROOT / "scripts", tree / "scripts", dirs_exist_ok=True)
    ok = cli("check")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "0 problem(s)" in ok.stdout
    patch = tree / "jobs" / "overlays" / "prod-8xh200" / "job-patch.yaml"
    patch.write_text(patch.read_text().replace("activeDeadlineSeconds:", "activeDeadlineSecond:"))  # a typo
    bad = cli("check")
    assert bad.returncode == 1 and "prod-8xh200" in bad.stdout and "activeDeadlineSecond" in bad.stdout
    lock = json.loads((tree / "docker" / "images.lock.json").read_text())
    lock["variants"]["sm90"]["digest"] = lock["variants"]["sm90-cu128"]["digest"] = "sha256:" + "ee" * 32
    (tree / "docker" / "images.lock.json").write_text(json.dumps(lock))
    stale = cli("pin", "--check")
    assert stale.returncode == 1 and "stale: " in stale.stdout
    assert "skypilot/train.yaml (image_id)" in stale.stdout  # the SkyPilot tasks follow the lock too
    assert cli("pin").returncode == 0 and cli("pin", "--check").returncode == 0


def test_the_urm_overlay_trains_a_urm_recipe_under_its_own_run_name(rendered):
    from trm.training.recipes import get_recipe

    env = {
        e["name"]: e.get("value")
        for e in _job(rendered["jobs/overlays/urm-8xh100"])["spec"]["template"]["spec"]["containers"][0][
            "env"
        ]
    }
    assert get_recipe(env["TASK"]).arch == "urm" and env["NUM_GPUS"] == "8"
    trm_runs = {
        e.get("value")
        for name, objects in rendered.items()
        if name != "jobs/overlays/urm-8xh100" and any(o["kind"] == "Job" for o in objects)
        for e in _job(objects)["spec"]["template"]["spec"]["containers"][0]["env"]
        if e["name"] == "RUN_NAME"
    }
    assert env["RUN_NAME"] not in trm_runs and "urm" in env["RUN_NAME"]


def test_driver_affinity_matches_the_overlays_image_family(rendered):
    """Each overlay's Job asks for nodes whose driver runs its variant's family: sm90 (CUDA 13.0) needs
    nvidia.com/cuda.driver.major > 579; the same pod for sm90-cu128 must say > 524 instead."""
    jobs = {
        name: _job(objects) for name, objects in rendered.items() if any(o["kind"] == "Job" for o in objects)
    }
    assert len(jobs) >= 4
    for name, job in jobs.items():
        pod = job["spec"]["template"]["spec"]
        assert jobpolicy.check_driver_affinity(name, pod, "sm90") == [], name
        (problem,) = jobpolicy.check_driver_affinity(name, pod, "sm90-cu128")
        assert 'values: ["524"]' in problem and "R525+" in problem
    pod = _job(rendered["jobs/overlays/smoke"])["spec"]["template"]["spec"]
    for term in pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]:
        term["matchExpressions"] = [
            e for e in term["matchExpressions"] if e["key"] != "nvidia.com/cuda.driver.major"
        ]
    (problem,) = jobpolicy.check_driver_affinity("smoke", pod, "sm90")
    assert "no nvidia.com/cuda.driver.major rule" in problem and 'values: ["579"]' in problem
