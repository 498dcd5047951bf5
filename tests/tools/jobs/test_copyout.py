"""Each overlay's run is copied off its own volume, the copy verified, and only then is anything deleted."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tools.jobs import copyout, k8s
from tools.jobs import policy as jobpolicy
from trm import gpu_catalog
from trm.errors import TRMError

pytestmark = pytest.mark.kube

ROOT = Path(__file__).resolve().parents[3]
PRODUCTION = ["prod-4xh100", "prod-8xh200", "multinode-2x8xh200", "urm-8xh100"]


@pytest.fixture(scope="module", autouse=True)
def _render_each_repository_kustomization_once():
    """The repository's jobs/ is read-only here: each of its kustomizations is rendered once per module (a
    kubectl call, 0.3 s), and every render returns its own copy of the objects; anything else renders as
    it is."""
    real_render = k8s.render
    jobs = (ROOT / "jobs").resolve()
    rendered: dict[Path, list[dict]] = {}

    def render(directory: str | Path) -> list[dict]:
        path = Path(directory).resolve()
        if jobs not in path.parents:
            return real_render(directory)
        if path not in rendered:
            rendered[path] = real_render(directory)
        return copy.deepcopy(rendered[path])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(k8s, "render", render)
        yield


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
    """The cluster teardown talks to: the copy-out pod (its phase, RUN_NAME, claim and log), the claim (its
    annotations; None: it does not exist), the remover pod, the run's Job (`job_ended`: when it ended, "" while
    it runs, None: not on the cluster) and when the copy-out pod started; `fail` makes the first command
    starting with it fail once (a partial failure)."""

    def __init__(
        self,
        phase: str = "Succeeded",
        log: str | None = None,
        *,
        run_name: str = "trm-arc2-4xh100",
        claim: str = "trm-workspace",
        annotations: dict[str, str] | None = None,
        claim_exists: bool = True,
        fail: list[str] | None = None,
        job_ended: str | None = "2026-01-01T10:00:00Z",
        copy_started: str = "2026-01-01T11:00:00Z",
    ) -> None:
        self.phase, self.run_name, self.claim = phase, run_name, claim
        self.log = (
            log if log is not None else f"{copyout.VERIFIED_LINE}: /workspace/checkpoints/{run_name} -> x"
        )
        self.annotations, self.claim_exists = annotations or {}, claim_exists
        self.fail = list(fail or [])
        self.job_ended, self.copy_started = job_ended, copy_started
        self.calls: list[list[str]] = []
        self.pods_deleted: set[str] = set()
        self.applied: list[str] = []

    def __call__(self, cmd: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
        self.calls.append(cmd)
        line = " ".join(cmd)
        for prefix in self.fail:
            if line.startswith(prefix):
                self.fail.remove(prefix)
                return subprocess.CompletedProcess(cmd, 1, "", "error: the server is currently unable")
        out = ""
        if cmd[1] == "config":  # the current context and its namespace
            out = "ctx-a" if cmd[2] == "current-context" else "ns-a"
        elif cmd[1:3] == ["get", "pod"] and cmd[-1].startswith("jsonpath="):  # a phase query alone
            out = self.phase if cmd[3] not in self.pods_deleted else ""
        elif cmd[1:3] == ["get", "pod"]:
            if cmd[3] not in self.pods_deleted:
                out = json.dumps({
                    "status": {"phase": self.phase, "startTime": self.copy_started},
                    "spec": {"containers": [{"env": [{"name": "RUN_NAME", "value": self.run_name}]}],
                             "volumes": [{"name": "workspace",
                                          "persistentVolumeClaim": {"claimName": self.claim}}]},
                })  # fmt: skip
        elif cmd[1:3] == ["get", "job"] and self.job_ended is not None:
            ended = [{"type": "Complete", "status": "True", "lastTransitionTime": self.job_ended}]
            out = json.dumps({"status": {"conditions": ended if self.job_ended else []}})
        elif cmd[1:3] == ["delete", "job"]:
            self.job_ended = None
        elif cmd[1:3] == ["get", "pvc"] and self.claim_exists:
            out = json.dumps({"metadata": {"name": cmd[3], "annotations": self.annotations}})
        elif cmd[1] == "logs":
            name = cmd[2].removeprefix("pod/")
            if name.startswith("trm-remove-run-"):
                script = yaml.safe_load(self.applied[-1])["spec"]["containers"][0]["args"][0]
                out = "runs left on the volume: other-run\n" + script.splitlines()[-1].split('"')[1].replace(
                    "${RUN_NAME}", self.run_name
                )
            elif name not in self.pods_deleted:
                out = self.log
        elif cmd[1] == "apply":
            self.applied.append(stdin or "")
        elif cmd[1:3] == ["delete", "pod"]:
            self.pods_deleted.add(cmd[3])
        elif cmd[1:3] == ["delete", "pvc"]:
            self.claim_exists = False
        return subprocess.CompletedProcess(cmd, 0, out, "")

    def deletes(self) -> list[list[str]]:
        return [cmd[2:] for cmd in self.calls if cmd[1] == "delete"]


@pytest.mark.parametrize(
    ("phase", "log"),
    [("Running", ""), ("Failed", "ERROR : 3 differences found"), ("Succeeded", "copied, not checked")],
)
def test_teardown_deletes_nothing_without_a_verified_copy(kustomize, phase, log):
    kubectl = FakeKubectl(phase, log)
    with pytest.raises(TRMError, match="nothing deleted"):
        copyout.teardown("jobs/overlays/prod-4xh100", kubectl, ROOT)
    assert not any(cmd[1] == "delete" for cmd in kubectl.calls)


def test_the_copy_out_of_another_run_is_no_proof(kustomize):
    # Before: any 'copy-out verified' line in the pod's log was accepted, whichever run it copied.
    other = f"{copyout.VERIFIED_LINE}: /workspace/checkpoints/trm-arc2-8xh200 -> store:bucket/runs/trm-arc2-8xh200"
    for kubectl, why in (
        (FakeKubectl(log=other), "no 'copy-out verified' line for trm-arc2-4xh100"),
        (FakeKubectl(run_name="trm-arc2-8xh200", log=other), "copied run 'trm-arc2-8xh200'"),
        (FakeKubectl(claim="trm-workspace-shared"), "read the volume"),
    ):
        with pytest.raises(TRMError, match=why):
            copyout.teardown("jobs/overlays/prod-4xh100", kubectl, ROOT)
        assert kubectl.deletes() == []


def test_a_copy_made_before_the_job_ended_is_no_proof(kustomize):
    # Before: a copy-out run while the trainer still trained passed; teardown then killed the Job and deleted
    # the run with the checkpoints it wrote after the copy.
    for kubectl, why in (
        (FakeKubectl(job_ended=""), "Job trm-train-prod-4xh100 has not ended"),
        (FakeKubectl(copy_started="2026-01-01T09:59:59Z"), "the copy may miss its last checkpoints"),
        (FakeKubectl(fail=["kubectl get job"]), "`kubectl get job trm-train-prod-4xh100` failed"),
    ):
        with pytest.raises(TRMError, match=why):
            copyout.teardown("jobs/overlays/prod-4xh100", kubectl, ROOT)
        assert kubectl.deletes() == []
    # A Job an earlier teardown deleted writes nothing: the rerun goes on.
    gone = FakeKubectl(job_ended=None)
    copyout.teardown("jobs/overlays/prod-4xh100", gone, ROOT)
    assert gone.deletes()[-1] == ["pod", "trm-copy-out-prod-4xh100", "--ignore-not-found"]


def test_a_failed_read_of_the_proof_is_named_not_taken_for_a_missing_pod(kustomize, monkeypatch, capsys):
    # Before: a `kubectl get pod` refused (forbidden, another context) read "there is no copy-out pod".
    from tools.jobs import cli

    def subprocess_run(cmd, input=None, **kwargs):
        if cmd[0] != "kubectl" or cmd[1] == "kustomize":
            return real_run(cmd, input=input, **kwargs)  # rendering the overlay
        if cmd[1] == "config":
            return subprocess.CompletedProcess(cmd, 0, "ctx-a", "")
        assert cmd[1] == "get", cmd  # nothing but the read of the proof
        return subprocess.CompletedProcess(
            cmd, 1, "", 'Error from server (Forbidden): pods "x" is forbidden\n'
        )

    real_run = subprocess.run
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(subprocess, "run", subprocess_run)
    assert cli.main(["teardown", "jobs/overlays/prod-4xh100"]) == TRMError("").exit_code
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "`kubectl get pod trm-copy-out-prod-4xh100` failed (Error from server (Forbidden)" in line
    assert "nothing deleted" in line and "there is no copy-out pod" not in line


def test_the_copy_out_fails_without_printing_verified_when_the_handoff_differs(tmp_path):
    # Before: only the checkpoints were checked; the handoff bundle, deleted with the run, was not.
    pod = yaml.safe_load((ROOT / copyout.COPY_OUT_DIR / "pod.yaml").read_text())
    script = pod["spec"]["containers"][0]["args"][0].replace("/workspace", str(tmp_path / "ws"))
    for sub in ("checkpoints/r", "artifacts/r"):
        (tmp_path / "ws" / sub).mkdir(parents=True)
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "rclone"  # `rclone check SRC DEST`: DEST=$3; FAIL names the one that differs

    def copy_out(fail: str) -> subprocess.CompletedProcess:
        fake.write_text(
            f'#!/bin/sh\n[ "$1 $3" = "check {fail}" ] && {{ echo "1 differences found" >&2; exit 1; }}\nexit 0\n'
        )
        fake.chmod(0o755)
        env = {
            "PATH": f"{fake.parent}:/usr/bin:/bin",
            "RUN_NAME": "r",
            "SYNC_TO": "store:b",
            "HOME": str(tmp_path),
        }
        return subprocess.run(
            ["/bin/sh", "-ec", script], env=env, capture_output=True, text=True, check=False
        )

    assert copyout.VERIFIED_LINE in copy_out("nothing").stdout
    for fail in ("store:b/r", "store:b/r/handoff"):
        done = copy_out(fail)
        assert done.returncode != 0 and copyout.VERIFIED_LINE not in done.stdout, fail
        assert "1 differences found" in done.stderr


def test_teardown_never_deletes_the_shared_claim_only_the_runs_directories(kustomize):
    # Before: `kubectl delete pvc trm-workspace`, the volume every single-node overlay trains on.
    kubectl = FakeKubectl()
    copyout.teardown("jobs/overlays/prod-4xh100", kubectl, ROOT)
    deletes = kubectl.deletes()
    assert not any(d[0] == "pvc" for d in deletes)
    assert not any(d[0] == "secret" for d in deletes)  # the Secrets serve every run: only on request
    (manifest,) = kubectl.applied
    (pod,) = yaml.safe_load_all(manifest)
    assert pod["metadata"]["name"] == "trm-remove-run-prod-4xh100"
    assert pod["spec"]["volumes"][0]["persistentVolumeClaim"] == {"claimName": "trm-workspace"}
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env["RUN_NAME"] == "trm-arc2-4xh100" and "envFrom" not in pod["spec"]["containers"][0]
    script = pod["spec"]["containers"][0]["args"][0]
    assert 'rm -rf -- "/workspace/checkpoints/${RUN_NAME}" "/workspace/artifacts/${RUN_NAME}"' in script
    assert k8s.validate([pod]) == []
    # The proof goes last, after the run's directories are gone.
    assert deletes[-1] == ["pod", "trm-copy-out-prod-4xh100", "--ignore-not-found"]
    assert kubectl.calls.index(["kubectl", "apply", "-f", "-"]) < len(kubectl.calls) - 1


def test_teardown_deletes_a_claim_made_for_the_run_and_the_proof_last(kustomize):
    kubectl = FakeKubectl(
        run_name="trm-arc2-2x8xh200",
        claim="trm-workspace-shared",
        annotations={copyout.RUN_ANNOTATION: "trm-arc2-2x8xh200"},
    )
    copyout.teardown("jobs/overlays/multinode-2x8xh200", kubectl, ROOT, secrets=True)
    assert kubectl.deletes() == [
        ["job", "trm-train-multinode-2x8xh200", "--cascade=foreground", "--ignore-not-found"],
        ["pvc", "trm-workspace-shared", "--ignore-not-found"],
        ["secret", "trm-wandb", "trm-rclone", "--ignore-not-found"],
        ["pod", "trm-copy-out-multinode-2x8xh200", "--ignore-not-found"],
    ]
    assert kubectl.applied == []
    # A claim annotated for another run is shared as far as this run is concerned.
    other = FakeKubectl(annotations={copyout.RUN_ANNOTATION: "someone-else"})
    copyout.teardown("jobs/overlays/prod-4xh100", other, ROOT)
    assert not any(d[0] == "pvc" for d in other.deletes()) and other.applied


def test_a_rerun_after_a_failed_volume_delete_finishes_the_job(kustomize):
    # Before: the proof was deleted before the volume; once the volume delete failed every rerun refused
    # ("no verified copy") and the volume stayed, billing.
    kubectl = FakeKubectl(
        annotations={copyout.RUN_ANNOTATION: "trm-arc2-4xh100"}, fail=["kubectl delete pvc"]
    )
    with pytest.raises(TRMError, match="rerun teardown, it finishes the job"):
        copyout.teardown("jobs/overlays/prod-4xh100", kubectl, ROOT)
    assert "trm-copy-out-prod-4xh100" not in kubectl.pods_deleted and kubectl.claim_exists
    copyout.teardown("jobs/overlays/prod-4xh100", kubectl, ROOT)
    assert not kubectl.claim_exists and "trm-copy-out-prod-4xh100" in kubectl.pods_deleted
    # Once finished, the proof is gone: a further rerun refuses and deletes nothing more.
    before = len(kubectl.deletes())
    with pytest.raises(TRMError, match="there is no copy-out pod"):
        copyout.teardown("jobs/overlays/prod-4xh100", kubectl, ROOT)
    assert len(kubectl.deletes()) == before


def test_a_rerun_after_a_failed_removal_on_the_shared_volume_finishes_it(kustomize):
    kubectl = FakeKubectl(fail=["kubectl wait"])
    with pytest.raises(TRMError, match="is kept"):
        copyout.teardown("jobs/overlays/prod-4xh100", kubectl, ROOT)
    assert "trm-copy-out-prod-4xh100" not in kubectl.pods_deleted
    copyout.teardown("jobs/overlays/prod-4xh100", kubectl, ROOT)
    assert kubectl.deletes()[-1] == ["pod", "trm-copy-out-prod-4xh100", "--ignore-not-found"]
    assert len(kubectl.applied) == 2  # the remover was made again, not trusted half-done


def test_the_gpu_affinity_follows_the_overlay(kustomize):
    smoke = next(o for o in k8s.render(ROOT / "jobs" / "overlays" / "smoke") if o["kind"] == "Job")
    # Before: the smoke inherited the base's H100-only affinity and stayed Pending on H200 clusters.
    assert jobpolicy._product_terms(smoke["spec"]["template"]["spec"]) == [
        jobpolicy.accepted_products("any", "sm90")
    ]
    assert jobpolicy.check_gpu_follows_overlay("Job/smoke", smoke) == []
    h100_only = {**smoke, "metadata": {**smoke["metadata"], "annotations": {"trm-stack/gpu": "any"}}}
    h100_only["spec"] = {"template": {"spec": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "nvidia.com/gpu.product", "operator": "In", "values": list(gpu_catalog.k8s_products()["H100"])}
        ]}]}}}}}}  # fmt: skip
    assert "stays Pending" in jobpolicy.check_gpu_follows_overlay("Job/smoke", h100_only)[0]
    unnamed = {**smoke, "metadata": {"name": "trm-train-smoke"}}
    assert "must name the GPU" in jobpolicy.check_gpu_follows_overlay("Job/smoke", unnamed)[0]


def test_the_dry_run_walks_every_step_and_runs_no_delete(kustomize, monkeypatch, capsys):
    from tools.jobs import cli

    cluster = FakeKubectl()
    ran: list[list[str]] = []
    real_run = subprocess.run

    def subprocess_run(cmd, input=None, **kwargs):
        if cmd[1] == "kustomize" or cmd[0].endswith("kustomize"):
            return real_run(cmd, input=input, **kwargs)  # rendering the overlay
        ran.append(cmd)
        return cluster(cmd, input)

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(subprocess, "run", subprocess_run)
    assert cli.main(["teardown", "jobs/overlays/prod-4xh100", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would run: kubectl apply -f -" in out
    assert (
        out.strip().splitlines()[-1]
        == "would run: kubectl delete pod trm-copy-out-prod-4xh100 --ignore-not-found"
    )
    assert {cmd[1] for cmd in ran if cmd[0] == "kubectl"} <= {"config", "get", "logs"}  # reads only


def test_every_kubectl_command_of_a_teardown_acts_in_the_context_it_started_in(
    kustomize, monkeypatch, capsys
):
    # Before: each command used whatever context/namespace was current when it ran; a `kubectl config
    # use-context` meanwhile (the remover's wait lasts up to 30 min) sent the deletes to another cluster.
    from tools.jobs import cli

    cluster = FakeKubectl()
    real_run = subprocess.run

    def subprocess_run(cmd, input=None, **kwargs):
        if cmd[0] != "kubectl" or cmd[1] == "kustomize":
            return real_run(cmd, input=input, **kwargs)  # rendering the overlay
        return cluster(cmd, input)

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(subprocess, "run", subprocess_run)
    assert cli.main(["teardown", "jobs/overlays/prod-4xh100"]) == 0
    assert capsys.readouterr().out.startswith("teardown in --context=ctx-a --namespace=ns-a\n")
    acting = [cmd for cmd in cluster.calls if cmd[1] != "config"]
    assert len(acting) > 5 and all(cmd[-2:] == ["--context=ctx-a", "--namespace=ns-a"] for cmd in acting)
    assert [c for c in cluster.calls if c[1] == "config"] == [
        ["kubectl", "config", "current-context"],
        ["kubectl", "config", "view", "--minify", "-o", "jsonpath={..namespace}"],
    ]  # read once


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (FileNotFoundError("kubectl"), "`kubectl` is not on PATH; install kubectl"),
        (subprocess.TimeoutExpired(["kubectl"], 2400), "did not answer in 2400 s; rerun teardown"),
        (
            None,
            "kubectl has no current context (error: current-context is not set); choose the run's cluster",
        ),
    ],
)
def test_a_kubectl_that_is_missing_hangs_or_has_no_context_is_one_line(
    kustomize, monkeypatch, capsys, error, expected
):
    # Before: a missing or hanging kubectl ended teardown in a traceback.
    from tools.jobs import cli

    real_run = subprocess.run

    def subprocess_run(cmd, input=None, **kwargs):
        if cmd[0] != "kubectl" or cmd[1] == "kustomize":
            return real_run(cmd, input=input, **kwargs)  # rendering the overlay
        if error is not None:
            raise error
        return subprocess.CompletedProcess(cmd, 1, "", "error: current-context is not set\n")

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(subprocess, "run", subprocess_run)
    assert cli.main(["teardown", "jobs/overlays/prod-4xh100"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert expected in line


def _with(job: dict, gpu: str, variant: str, products: list[str]) -> dict:
    annotations = {"trm-stack/gpu": gpu, "trm-stack/image-variant": variant}
    spec = {"template": {"spec": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "nvidia.com/gpu.product", "operator": "In", "values": products}
        ]}]}}}}}}  # fmt: skip
    return {**job, "metadata": {**job["metadata"], "annotations": annotations}, "spec": spec}


def test_any_gpu_means_every_product_the_overlays_image_runs_on(kustomize):
    """ "any" is every known GPU the image variant's build runs on: with the Blackwell and sm_86 products in
    the policy, an sm90 smoke listing them would land on GPUs its adam-atan2 has no kernel for."""
    smoke = next(o for o in k8s.render(ROOT / "jobs" / "overlays" / "smoke") if o["kind"] == "Job")
    assert set(jobpolicy.accepted_products("any", "sm90")) == {
        "NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-SXM5-80GB", "NVIDIA-H200", "NVIDIA-H200-SXM5-141GB",
    }  # fmt: skip
    assert jobpolicy.accepted_products("any", "sm100") == ["NVIDIA-B200"]
    assert "NVIDIA-RTX-A6000" in jobpolicy.accepted_products("any", "sm80")  # sm_86 runs the sm_80 build
    everything = [v for values in gpu_catalog.k8s_products().values() for v in values]
    assert jobpolicy.check_gpu_follows_overlay("Job/smoke", _with(smoke, "any", "sm90", everything))
    blackwell = _with(smoke, "any", "sm120", jobpolicy.accepted_products("any", "sm120"))
    assert jobpolicy.check_gpu_follows_overlay("Job/smoke", blackwell) == []
    assert set(jobpolicy.accepted_products("any", "sm120")) >= {
        "NVIDIA-GeForce-RTX-5090",
        "NVIDIA-RTX-PRO-6000-Blackwell-Workstation-Edition",  # pragma: allowlist secret (a GPU name)
    }


def test_a_gpu_the_variant_does_not_run_on_is_refused(kustomize):
    smoke = next(o for o in k8s.render(ROOT / "jobs" / "overlays" / "smoke") if o["kind"] == "Job")
    job = _with(smoke, "B200", "sm90", ["NVIDIA-B200"])
    (problem,) = jobpolicy.check_gpu_follows_overlay("Job/x", job)
    assert "trm-stack/gpu=B200 (sm_100) but trm-stack/image-variant=sm90 does not run on it" in problem
    assert jobpolicy.check_gpu_follows_overlay("Job/x", _with(smoke, "B200", "sm100", ["NVIDIA-B200"])) == []


def test_every_spelling_of_a_new_gpu_is_required_and_names_match_as_whole_words():
    pod = _with({"metadata": {}}, "A10", "sm80", ["NVIDIA-A10"])["spec"]["template"]["spec"]
    (problem,) = jobpolicy.check_gpu_placement("Job/x", pod)
    assert "affinity for A10 lacks NVIDIA-A10G" in problem
    # an A100 or L40S product is not the A10's or the L4's (whole words, not substrings)
    for products in (["NVIDIA-A100-SXM4-80GB"], ["NVIDIA-L40S"], ["NVIDIA-GB200"]):
        pod = _with({"metadata": {}}, "any", "sm80", products)["spec"]["template"]["spec"]
        assert jobpolicy.check_gpu_placement("Job/x", pod) == [], products
