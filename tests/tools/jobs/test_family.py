"""`python -m tools.jobs family`: an overlay's image chosen from the cluster's GPU node labels (a pool of R570
H100s gets the CUDA 12.8 variant instead of Pending pods), written into the overlay as `jobs check` wants it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tools.jobs.cli import main
from tools.jobs.family import choose, read_nodes, write
from tools.jobs.k8s import overlay_variant, pod_specs, render
from tools.jobs.policy import check_driver_affinity
from trm.errors import TRMError

ROOT = Path(__file__).resolve().parents[3]
H100 = "NVIDIA-H100-80GB-HBM3"


def _node(name: str, product: str, driver: str | None) -> dict:
    labels = {"nvidia.com/gpu.product": product}
    if driver is not None:
        labels["nvidia.com/cuda.driver.major"] = driver
    return {"metadata": {"name": name, "labels": labels}}


def _nodes(*nodes: dict) -> list[dict]:
    return [*nodes, _node("cpu-1", "", None) | {"metadata": {"name": "cpu-1", "labels": {}}}]


@pytest.fixture
def overlay(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "jobs", tmp_path / "jobs")
    return tmp_path / "jobs" / "overlays" / "prod-4xh100"


@pytest.mark.kube
def test_a_pool_of_r570_h100s_gets_the_cuda_12_8_variant_written_as_jobs_check_wants_it(overlay):
    choice = choose(overlay, _nodes(*(_node(f"gpu-{i}", H100, "570") for i in range(3))))
    assert (choice.current, choice.variant, choice.family, choice.driver_floor) == (
        "sm90",
        "sm90-cu128",
        "cu128",
        525,
    )
    assert "3 matching node(s) (R570 on 3) -> family cu128 (driver R525+), variant sm90-cu128 (was sm90)" in (
        choice.summary()
    )
    before = (overlay / "job-patch.yaml").read_text()
    assert {p.name for p in write(choice)} == {"job-patch.yaml", "kustomization.yaml"}
    assert overlay_variant(overlay) == "sm90-cu128"
    after = (overlay / "job-patch.yaml").read_text()
    assert 'values: ["524"]' in after and after.count("#") == before.count("#")  # comments kept
    rendered = render(overlay)
    problems = [
        p for name, pod in pod_specs(rendered) for p in check_driver_affinity(name, pod, "sm90-cu128")
    ]
    assert problems == []
    assert write(choose(overlay, _nodes(_node("gpu-0", H100, "570")))) == []  # idempotent


def test_r580_nodes_keep_cuda_13_and_a_mixed_pool_gets_what_every_node_runs(overlay):
    assert choose(overlay, _nodes(_node("a", H100, "580"))).variant == "sm90"
    mixed = choose(overlay, _nodes(_node("a", H100, "580"), _node("b", "NVIDIA-H100-SXM5-80GB", "570")))
    assert mixed.variant == "sm90-cu128" and mixed.drivers == {"a": 580, "b": 570}
    # nodes of other GPUs do not count: an R535 A100 pool beside R580 H100s changes nothing
    assert (
        choose(overlay, _nodes(_node("a", H100, "580"), _node("c", "NVIDIA-A100-SXM4-80GB", "535"))).variant
        == "sm90"
    )


def test_no_matching_node_a_missing_label_and_a_too_old_driver_are_one_clear_error_each(overlay):
    with pytest.raises(TRMError, match=r"no node of the cluster is labelled .* would stay Pending"):
        choose(overlay, _nodes(_node("a", "NVIDIA-L40S", "580")))
    with pytest.raises(
        TRMError, match=r"node gpu-7 \(NVIDIA-H100-80GB-HBM3\) has no usable .*cuda.driver.major"
    ):
        choose(overlay, _nodes(_node("gpu-7", H100, None)))
    with pytest.raises(TRMError, match=r"older than every trm image"):
        choose(overlay, _nodes(_node("a", H100, "470")))


def test_the_command_reads_kubectls_json_and_refuses_anything_else(overlay, tmp_path, capsys):
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps({"kind": "List", "items": _nodes(_node("gpu-0", H100, "570"))}))
    assert main(["family", str(overlay), "--nodes", str(nodes)]) == 0
    out = capsys.readouterr().out
    assert "variant sm90-cu128 (was sm90)" in out and "run again with --write" in out
    assert overlay_variant(overlay) == "sm90"  # nothing written without --write
    assert main(["family", str(overlay), "--nodes", str(nodes), "--write"]) == 0
    assert overlay_variant(overlay) == "sm90-cu128"
    assert yaml.safe_load((overlay / "kustomization.yaml").read_text())["nameSuffix"] == "-prod-4xh100"
    bad = tmp_path / "nodes.txt"
    bad.write_text("NAME STATUS ROLES\n")
    with pytest.raises(TRMError, match=r"nodes.txt: not the output of `kubectl get nodes -o json`"):
        read_nodes(str(bad))


@pytest.mark.kube
def test_a_pool_of_r570_b200s_gets_the_cuda_12_8_blackwell_variant_with_its_r570_floor(tmp_path):
    """The CUDA 12.8 family starts at R525, but its Blackwell variants need R570 (CUDA 12.8's own driver):
    the written driver rule says so, and `jobs check` asks for the same."""
    shutil.copytree(ROOT / "jobs", tmp_path / "jobs")
    # a user's B200 overlay: the 8xH200 one with the B200 product and the sm100 image
    overlay = tmp_path / "jobs" / "overlays" / "prod-8xh200"
    kustomization = overlay / "kustomization.yaml"
    kustomization.write_text(
        kustomization.read_text()
        .replace("trm-stack/gpu: H200", "trm-stack/gpu: B200")
        .replace("trm-stack/image-variant: sm90", "trm-stack/image-variant: sm100")
    )
    patch = overlay / "job-patch.yaml"
    patch.write_text(patch.read_text().replace("[NVIDIA-H200, NVIDIA-H200-SXM5-141GB]", "[NVIDIA-B200]"))
    choice = choose(overlay, _nodes(*(_node(f"gpu-{i}", "NVIDIA-B200", "570") for i in range(2))))
    assert (choice.current, choice.variant, choice.family, choice.driver_floor) == (
        "sm100", "sm100-cu128", "cu128", 570,
    )  # fmt: skip
    assert "-> family cu128 (driver R570+), variant sm100-cu128 (was sm100)" in choice.summary()
    write(choice)
    assert 'values: ["569"]' in (overlay / "job-patch.yaml").read_text()
    pods = pod_specs(render(overlay))
    assert [p for name, pod in pods for p in check_driver_affinity(name, pod, "sm100-cu128")] == []
    # the family's own floor (R525) is not enough for these GPUs
    (_name, pod), *_ = pods
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]
    next(e for e in term["matchExpressions"] if e["key"] == "nvidia.com/cuda.driver.major")["values"] = [
        "524"
    ]
    (problem,) = check_driver_affinity("Job/x", pod, "sm100-cu128")
    assert 'values: ["569"]' in problem and "drivers R570+" in problem
