"""Each overlay's run is copied off its own volume, the copy verified, and only then is anything deleted."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tools.jobs import copyout, k8s
from tools.jobs import policy as jobpolicy
from trm.errors import TRMError

pytestmark = pytest.mark.kube

ROOT = Path(__file__).resolve().parents[3]
PRODUCTION = ["prod-4xh100", "prod-8xh200", "multinode-2x8xh200", "urm-8xh100"]


@pytest.fixture(scope="module")
def kustomize():
    try:
        return k8s.kustomize_command()
    except TRMError as err:
        pytest.skip(str(err))


@pytest.mark.parametrize("overlay", PRODUCTION)
def test_the_copy_out_reads_the_overlays_run_from_the_overlays_volume(kustomize, overlay):
    job = next(o for o in k8s.render(ROOT / "jobs" / "overlays" / overlay) if o["kind"] == "Job")
    spec = job["spec"]["template"]["spec"]
    trainer_env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    claim = next(v for v in spec["volumes"] if v["name"] == "workspace")["persistentVolumeClaim"]["claimName"]
    (pod,) = copyout.copy_out_objects(f"jobs/overlays/{overlay}", "store:bucket/runs", ROOT)
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["RUN_NAME"] == trainer_env["RUN_NAME"] and env["SYNC_TO"] == "store:bucket/runs"
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "workspace")
    assert volume["persistentVolumeClaim"] == {"claimName": claim, "readOnly": True}
    script = pod["spec"]["containers"][0]["args"][0]
    assert "rclone check" in script and script.index("rclone check") < script.index(copyout.VERIFIED_LINE)
    assert k8s.validate([pod]) == []


def test_the_smokes_scratch_runs_have_no_copy_out(kustomize):
    with pytest.raises(TRMError, match="not a fixed name"):
        copyout.copy_out_objects("jobs/overlays/smoke", "store:bucket/runs", ROOT)


class FakeKubectl:
    def __init__(self, phase: str, log: str) -> None:
        self.phase, self.log, self.calls = phase, log, []

    def __call__(self, cmd: list[str]) -> subprocess.CompletedProcess:
        self.calls.append(cmd)
        out = {"get": self.phase, "logs": self.log}.get(cmd[1], "")
        return subprocess.CompletedProcess(cmd, 0, out, "")


@pytest.mark.parametrize(
    ("phase", "log"),
    [("Running", ""), ("Failed", "ERROR : 3 differences found"), ("Succeeded", "copied, not checked")],
)
def test_teardown_deletes_nothing_without_a_verified_copy(kustomize, phase, log):
    kubectl = FakeKubectl(phase, log)
    with pytest.raises(TRMError, match="nothing deleted"):
        copyout.teardown("jobs/overlays/prod-4xh100", kubectl, ROOT)
    assert not any(cmd[1] == "delete" for cmd in kubectl.calls)


def test_teardown_after_the_verified_copy_deletes_job_volume_and_secrets(kustomize):
    kubectl = FakeKubectl(
        "Succeeded", f"{copyout.VERIFIED_LINE}: /workspace/checkpoints/trm-arc2-2x8xh200 -> x"
    )
    copyout.teardown("jobs/overlays/multinode-2x8xh200", kubectl, ROOT)
    deletes = [cmd[2:] for cmd in kubectl.calls if cmd[1] == "delete"]
    assert ["job", "trm-train-multinode-2x8xh200", "--cascade=foreground", "--ignore-not-found"] in deletes
    assert ["pvc", "trm-workspace-shared", "--ignore-not-found"] in deletes
    assert ["secret", "trm-wandb", "trm-rclone", "--ignore-not-found"] in deletes
    assert ["pod", "trm-copy-out-multinode-2x8xh200", "--ignore-not-found"] in deletes


def test_the_gpu_affinity_follows_the_overlay(kustomize):
    smoke = next(o for o in k8s.render(ROOT / "jobs" / "overlays" / "smoke") if o["kind"] == "Job")
    # Before: the smoke inherited the base's H100-only affinity and stayed Pending on H200 clusters.
    assert jobpolicy._product_terms(smoke["spec"]["template"]["spec"]) == [jobpolicy.accepted_products("any")]
    assert jobpolicy.check_gpu_follows_overlay("Job/smoke", smoke) == []
    h100_only = {**smoke, "metadata": {**smoke["metadata"], "annotations": {"trm-stack/gpu": "any"}}}
    h100_only["spec"] = {"template": {"spec": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "nvidia.com/gpu.product", "operator": "In", "values": list(jobpolicy.GPU_PRODUCT_VALUES["H100"])}
        ]}]}}}}}}  # fmt: skip
    assert "stays Pending" in jobpolicy.check_gpu_follows_overlay("Job/smoke", h100_only)[0]
    unnamed = {**smoke, "metadata": {"name": "trm-train-smoke"}}
    assert "must name the GPU" in jobpolicy.check_gpu_follows_overlay("Job/smoke", unnamed)[0]
