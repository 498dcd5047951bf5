"""`python -m tools.jobs render DIR --claim NAME`: an overlay on the other workspace claim (runbook 01 creates
either), and the Jobs a ReadWriteOnce claim cannot serve."""

from __future__ import annotations

import pytest
import yaml

from tests.tools.jobs.test_jobs import DIGEST, kustomize, tree  # noqa: F401 - fixtures
from tools.images.imagelock import LockedImage
from tools.jobs import k8s
from tools.jobs import policy as jobpolicy
from tools.jobs.cli import main
from tools.jobs.copyout import WORKSPACE_VOLUME

pytestmark = pytest.mark.kube
SMOKE = "jobs/overlays/smoke"


def _claims(objects: list[dict]) -> list[str]:
    (job,) = [o for o in objects if o["kind"] == "Job"]
    volumes = job["spec"]["template"]["spec"]["volumes"]
    return [v["persistentVolumeClaim"]["claimName"] for v in volumes if v["name"] == WORKSPACE_VOLUME]


def _render(tree, capsys, *argv: str) -> tuple[int, list[dict], str]:  # noqa: F811
    code = main(["render", *argv])
    out = capsys.readouterr()
    return code, [d for d in yaml.safe_load_all(out.out) if d] if code == 0 else [], out.err.strip()


def test_the_smoke_renders_onto_the_shared_claim_and_still_passes_the_job_rules(tree, kustomize, capsys):  # noqa: F811
    code, plain, _ = _render(tree, capsys, str(tree / SMOKE))
    assert code == 0 and _claims(plain) == ["trm-workspace"]  # `kubectl apply -k` as before
    code, shared, err = _render(tree, capsys, str(tree / SMOKE), "--claim", "trm-workspace-shared")
    assert code == 0 and err == "" and _claims(shared) == ["trm-workspace-shared"]
    (job,) = [o for o in shared if o["kind"] == "Job"]
    assert job["metadata"]["name"] == "trm-train-smoke"
    assert k8s.validate(shared) == []
    image = LockedImage("sm90", "registry.example.com/trm", "0.1.0-cu130-sm90", DIGEST)
    assert jobpolicy.check_objects(shared, image, None, {"trm-workspace-shared"}) == []


def test_a_claim_that_cannot_serve_the_job_is_refused_and_an_unknown_one_noted(tree, kustomize, capsys):  # noqa: F811
    multinode = str(tree / "jobs/overlays/multinode-2x8xh200")
    code, _, err = _render(tree, capsys, multinode, "--claim", "trm-workspace")
    assert code == 2 and len(err.splitlines()) == 1
    assert "--claim trm-workspace: Job trm-train-multinode-2x8xh200 runs pods on several nodes" in err
    code, objects, err = _render(tree, capsys, str(tree / SMOKE), "--claim", "team-scratch")
    assert code == 0 and _claims(objects) == ["team-scratch"]
    assert (
        "claim 'team-scratch' is not one of jobs/storage/'s" in err and "kubectl get pvc team-scratch" in err
    )
    code, _, err = _render(tree, capsys, str(tree / SMOKE), "--parallelism", "2")
    assert code == 2 and "--parallelism applies to --experiments only" in err


def test_a_run_rendered_onto_the_shared_claim_is_copied_out_and_torn_down_from_it(kustomize):  # noqa: F811
    from tests.tools.jobs.test_copyout import ROOT, FakeKubectl
    from tools.jobs import copyout

    overlay = "jobs/overlays/prod-4xh100"
    (pod,) = copyout.copy_out_objects(overlay, "store:bucket/runs", ROOT, claim="trm-workspace-shared")
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == WORKSPACE_VOLUME)
    assert volume["persistentVolumeClaim"]["claimName"] == "trm-workspace-shared"
    kubectl = FakeKubectl(claim="trm-workspace-shared")  # the copy-out pod read the shared claim
    copyout.teardown(overlay, kubectl, ROOT, claim="trm-workspace-shared")
    (manifest,) = kubectl.applied  # the run's directories go from the claim it trained on
    (remover,) = yaml.safe_load_all(manifest)
    assert remover["spec"]["volumes"][0]["persistentVolumeClaim"] == {"claimName": "trm-workspace-shared"}
