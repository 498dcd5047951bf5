from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import install_fake_smi, trm_in_process
from trm import exit_codes
from trm.errors import TRMError
from trm.images import compat
from trm.launch.host import preflight
from trm.launch.host.gpu_checks import allreduce_check, matmul_check
from trm.launch.host.nvidia_smi import system_runner
from trm.launch.host.preflight import GIB, PreflightContext, print_report, run_preflight


def gpu_context(**overrides) -> PreflightContext:
    """A context that simulates a healthy CUDA torch with the GPUs the fake nvidia-smi lists."""
    defaults = dict(
        smi=system_runner(),
        shm_path=Path("/dev/shm"),
        disk_path=Path("."),
        fs_size=lambda p: 8 * GIB,
        fs_free=lambda p: 500 * GIB,
        image_cuda="12.4",
        image_sm_list="80 89 90",
        torch_cuda=lambda: ("12.4", 8),
        adam_backend_importable=lambda: True,
        allreduce=lambda n: (True, f"nccl all-reduce over {n} rank(s) correct"),
        matmul=lambda i: (True, "max rel error 1e-07", 700.0),
        memlock=lambda: -1,
        c_toolchain=lambda: ("/usr/bin/gcc", Path("/usr/include/python3.11"), True),
    )
    defaults.update(overrides)
    return PreflightContext(**defaults)


def by_name(report):
    return {c.name: c for c in report.checks}


def test_healthy_h100_host_passes(monkeypatch, tmp_path):
    install_fake_smi(monkeypatch, tmp_path, "h100x4")
    report = run_preflight(gpu_context())
    assert report.ok and report.mode == "gpu"
    checks = by_name(report)
    assert checks["driver"].status == "ok" and "supports CUDA 12.4" in checks["driver"].found
    assert checks["image sm"].status == "ok"
    assert checks["nccl all-reduce"].status == "ok"
    assert [c for c in checks if c.startswith("matmul gpu")] == [f"matmul gpu{i}" for i in range(4)]
    assert "GPU-" in checks["matmul gpu3"].found  # UUID logged
    assert len(report.environment["gpus"]) == 4


def test_small_dev_shm_prints_the_docker_and_kubernetes_fix(monkeypatch, tmp_path):
    install_fake_smi(monkeypatch, tmp_path, "h100x1")
    report = run_preflight(gpu_context(fs_size=lambda p: 64 * 1024**2))
    shm = by_name(report)["shm"]
    assert not report.ok and shm.status == "fail"
    assert "0.06 GiB (< 1 GiB)" in shm.found
    assert "--shm-size" in shm.fix and "emptyDir: {medium: Memory" in shm.fix


def test_missing_nvidia_smi_fails_in_gpu_mode_and_skips_in_auto(monkeypatch, tmp_path):
    install_fake_smi(monkeypatch, tmp_path, None)
    report = run_preflight(gpu_context(smi=system_runner()), mode="gpu")
    smi = by_name(report)["nvidia-smi"]
    assert smi.status == "fail" and smi.found == "not found on PATH"
    assert "--gpus all" in smi.fix and "nvidia.com/gpu" in smi.fix
    auto = run_preflight(gpu_context(smi=system_runner()))
    assert auto.ok and auto.mode == "cpu"
    assert "CPU mode, GPU checks skipped" in by_name(auto)["nvidia-smi"].found


def test_driver_not_loaded(monkeypatch, tmp_path):
    install_fake_smi(monkeypatch, tmp_path, "no-driver")
    report = run_preflight(gpu_context())
    assert not report.ok
    assert "couldn't communicate with the NVIDIA driver" in by_name(report)["nvidia-smi"].fix


def test_uncovered_compute_capability_names_the_image_variant(monkeypatch, tmp_path):
    install_fake_smi(monkeypatch, tmp_path, "h200x4")
    report = run_preflight(gpu_context(image_sm_list="8.0;8.9"))
    check = by_name(report)["image sm"]
    assert check.status == "fail"
    assert "sm90" in check.fix and "9.0" in check.fix and "NVIDIA H200" in check.fix


def test_adam_atan2_build_coverage_is_checked_separately(monkeypatch, tmp_path):
    install_fake_smi(monkeypatch, tmp_path, "l40sx2")
    report = run_preflight(gpu_context(adam_sm_list="90"))
    assert by_name(report)["image sm"].status == "ok"
    assert by_name(report)["adam-atan2 sm"].status == "fail"
    missing = run_preflight(gpu_context(adam_backend_importable=lambda: False))
    assert missing.ok and by_name(missing)["adam-atan2"].status == "warn"


def test_older_driver_of_the_same_major_runs_through_minor_version_compatibility(monkeypatch, tmp_path):
    install_fake_smi(monkeypatch, tmp_path, "old-driver-h100x1")
    report = run_preflight(gpu_context(image_cuda="12.4"))
    driver = by_name(report)["driver"]
    assert driver.status == "warn" and report.ok
    assert "supports CUDA 12.2, image needs CUDA 12.4" in driver.found
    assert "minor-version compatibility" in driver.found
    assert ">= 525.60.13" in driver.fix and "Full support: driver >= 550.54.14" in driver.fix


@pytest.mark.parametrize(
    ("host", "variant"),
    [
        ("a100-80gx1", "sm80-cu128"),
        ("h100x1", "sm90-cu128"),
        ("l40sx1", "sm89-cu128"),
        ("rtx4090x1", "sm89-cu128"),
    ],
)
def test_cuda13_images_on_recorded_hosts_name_the_cuda128_image(monkeypatch, tmp_path, host, variant):
    """Every recorded host runs a 535-575 driver: the CUDA 13.0 image fails, and preflight names the CUDA
    12.8 image of the same GPUs that runs there (before: 'No trm image variant runs on this driver')."""
    install_fake_smi(monkeypatch, tmp_path, host)
    report = run_preflight(gpu_context(image_cuda="13.0", torch_cuda=lambda: ("13.0", 8)))
    checks = by_name(report)
    driver = checks["driver"]
    assert driver.status == "fail" and not report.ok
    assert "image needs CUDA 13.0" in driver.found and "CUDA 13.0 needs driver >= 580.65.06" in driver.fix
    tag = f"trm:0.1.0-cu128-{variant.split('-')[0]}"
    assert f"Use the image variant {tag}" in driver.fix
    family = checks["image family"]
    assert family.status == "ok" and f"runs {variant} ({tag}: CUDA 12.8, torch 2.10.0" in family.found


def test_r470_host_gets_one_family_error_with_the_fix(monkeypatch, tmp_path):
    install_fake_smi(monkeypatch, tmp_path, "old-driver-h100x1")
    from trm.launch.host.nvidia_smi import query_gpus
    from trm.launch.host.preflight import check_image_family

    gpus = query_gpus()
    result = check_image_family(gpus, "470.256.02", gpu_context())
    assert result.status == "fail" and "older than every trm image" in result.fix and "R525" in result.fix


def test_cuda128_image_without_the_extension_says_the_torch_backend(monkeypatch, tmp_path):
    install_fake_smi(monkeypatch, tmp_path, "h100x4")
    report = run_preflight(
        gpu_context(
            image_cuda="12.8",
            image_variant="sm90-cu128",
            image_optimizer_backend="torch",
            adam_backend_importable=lambda: False,
            torch_cuda=lambda: ("12.8", 4),
        )
    )
    checks = by_name(report)
    assert checks["adam-atan2"].status == "ok" and "optimizer backend torch" in checks["adam-atan2"].found
    assert report.environment["optimizer_backend"] == "torch"
    assert checks["driver"].status == "warn" and "minor-version compatibility" in checks["driver"].found
    assert "; this is sm90-cu128" in checks["image family"].found


CU126 = (
    ("sm90-cu126", "12.6", "12.0", "525.60.13", ("9.0",), "trm:0.1.0-cu126-sm90", "cu126"),
    ("sm90", "13.0", "13.0", "580.65.06", ("9.0",), "trm:0.1.0-cu130-sm90", "cu130"),
)
CU126_FAMILIES = (("cu130", "13.0", "2.13.0", 580, "ext"), ("cu126", "12.6", "2.9.1", 525, "torch"))


def test_driver_fix_names_the_variant_that_runs_on_this_host(monkeypatch, tmp_path):
    install_fake_smi(monkeypatch, tmp_path, "h100x1")
    report = run_preflight(gpu_context(image_cuda="13.0", catalog=CU126, families=CU126_FAMILIES))
    fix = by_name(report)["driver"].fix
    assert "driver 550.127.05 runs CUDA <= 12.4" in fix
    assert "Use the image variant trm:0.1.0-cu126-sm90" in fix and "cu130" not in fix


def test_driver_fix_without_a_variant_for_these_gpus(monkeypatch, tmp_path):
    install_fake_smi(monkeypatch, tmp_path, "a100-80gx1")  # SM 8.0: the catalog has only SM 9.0 builds
    report = run_preflight(gpu_context(image_cuda="13.0", catalog=CU126, families=CU126_FAMILIES))
    fix = by_name(report)["driver"].fix
    assert "No trm image variant runs on this driver" in fix and "driver >= 580.65.06" in fix


def test_shipped_catalog_lists_every_gpu_variant_with_its_driver():
    from trm.images import catalog

    assert {entry[0] for entry in catalog.VARIANTS} == {
        "sm90",
        "sm80",
        "sm89",
        "sm100",
        "sm120",
        "sm90-cu128",
        "sm80-cu128",
        "sm89-cu128",
        "sm100-cu128",
        "sm120-cu128",
    }
    assert [f[0] for f in catalog.FAMILIES] == ["cu130", "cu128"]
    for name, cuda, floor, min_driver, archs, tag, _family in catalog.VARIANTS:
        # Blackwell (10.0, 12.0) first appears in CUDA 12.8: its CUDA 12.8 images need that release's driver
        blackwell_cu128 = name in ("sm100-cu128", "sm120-cu128")
        assert floor == ("12.8" if blackwell_cu128 else cuda.split(".")[0] + ".0")
        assert compat.min_driver_for(floor) == min_driver and tag.startswith("trm:") and archs
        assert not blackwell_cu128 or min_driver == "570.26"


def test_an_uncovered_sm_names_the_variants_that_cover_it(monkeypatch, tmp_path):
    """An RTX A6000 (sm_86) in the sm89 image: the fix names sm80/sm80-cu128 (an sm_80 cubin runs on 8.6),
    not a nonexistent `sm86` tag as before."""
    install_fake_smi(monkeypatch, tmp_path, "a6000x2")
    check = by_name(run_preflight(gpu_context(image_sm_list="8.9")))["image sm"]
    assert check.status == "fail"
    assert "use the image variant sm80 or sm80-cu128" in check.fix and "sm86" not in check.fix


def test_cpu_torch_on_a_gpu_host(monkeypatch, tmp_path):
    install_fake_smi(monkeypatch, tmp_path, "a100-80gx2")
    report = run_preflight(gpu_context(torch_cuda=lambda: (None, 0), image_cuda=None))
    checks = by_name(report)
    assert checks["torch cuda"].status == "fail" and "CPU build" in checks["torch cuda"].found
    assert "nccl all-reduce" not in checks  # no collective on GPUs torch cannot see


def test_failed_allreduce_and_bad_or_slow_gpu(monkeypatch, tmp_path):
    install_fake_smi(monkeypatch, tmp_path, "h100x4")
    speeds = {0: 700.0, 1: 690.0, 2: 300.0, 3: 710.0}
    report = run_preflight(
        gpu_context(
            allreduce=lambda n: (False, "ranks [2] did not answer"),
            matmul=lambda i: (i != 1, "max rel error 3e-01" if i == 1 else "ok", speeds[i]),
        )
    )
    checks = by_name(report)
    assert checks["nccl all-reduce"].status == "fail" and "NCCL_DEBUG=INFO" in checks["nccl all-reduce"].fix
    assert checks["matmul gpu1"].status == "fail" and "CUDA_VISIBLE_DEVICES" in checks["matmul gpu1"].fix
    assert checks["gpu speed"].status == "warn" and "[2]" in checks["gpu speed"].found


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        # A node's hardware: another node may pass, so the Job retries elsewhere (exit 76).
        ({"allreduce": lambda n: (False, "ranks [2] did not answer")}, exit_codes.NODE_FAULT),
        ({"matmul": lambda i: (i != 1, "max rel error 3e-01", 700.0)}, exit_codes.NODE_FAULT),
        # The configuration fails the same way on any node (exit 2): the Job must stop.
        ({"fs_size": lambda p: 64 * 1024**2}, exit_codes.CONFIG_ERROR),
        ({"torch_cuda": lambda: (None, 0), "image_cuda": None}, exit_codes.CONFIG_ERROR),
        # Both: the configuration must be fixed first, wherever the run goes.
        (
            {"fs_size": lambda p: 64 * 1024**2, "allreduce": lambda n: (False, "hang")},
            exit_codes.CONFIG_ERROR,
        ),
        ({}, exit_codes.OK),
    ],
)
def test_hardware_faults_and_configuration_errors_have_their_own_exit_codes(
    monkeypatch, tmp_path, overrides, expected
):
    install_fake_smi(monkeypatch, tmp_path, "h100x4")
    report = run_preflight(gpu_context(**overrides))
    assert report.exit_code == expected
    assert report.to_dict()["exit_code"] == expected
    lines: list[str] = []
    print_report(report, lines.append)
    if expected == exit_codes.NODE_FAULT:
        assert "a fault of this node (exit 76)" in lines[-1]


def test_an_nvidia_smi_that_does_not_answer_is_a_node_fault(monkeypatch, tmp_path):
    install_fake_smi(monkeypatch, tmp_path, "h100x1")

    def lost(_smi, _environ):
        raise TRMError("nvidia-smi failed: Unable to determine the device handle for GPU 0000:1B:00.0")

    monkeypatch.setattr(preflight, "query_gpus", lost)
    report = run_preflight(gpu_context(), mode="gpu")
    assert by_name(report)["nvidia-smi"].status == "fail"
    assert report.exit_code == exit_codes.NODE_FAULT


def test_disk_space_check(tmp_path):
    report = run_preflight(
        gpu_context(fs_free=lambda p: 10 * GIB, disk_path=tmp_path / "not" / "yet"),
        mode="cpu",
        checkpoint_bytes=2 * GIB,
        keep=3,
    )
    disk = by_name(report)["disk"]
    # 3 rolling + 3 evaluation checkpoints, the best one, one being written: 8 x 2 GiB
    assert disk.status == "fail" and "need 16.0 GiB" in disk.found and "CHECKPOINT_KEEP" in disk.fix


def test_the_disk_check_counts_a_subset_runs_top_k_candidates(tmp_path):
    """A run with eval_subset keeps best.top_k evaluation checkpoints until its end evaluates them fully: the
    launcher's preflight counts them (arc2 with top_k 3: 2 x 3 + 3 + 1 = 10 checkpoints, not 8)."""
    from trm.training.config import best_checkpoints_kept, compose

    cfg = compose(["eval_subset.fraction=0.1", "best.top_k=3"])
    assert best_checkpoints_kept(cfg) == 3
    assert best_checkpoints_kept(compose(["best.top_k=3"])) == 1  # no subset: top_k is not used
    report = run_preflight(
        gpu_context(fs_free=lambda p: 19 * GIB, disk_path=tmp_path),
        mode="cpu",
        checkpoint_bytes=2 * GIB,
        keep=3,
        keep_best=best_checkpoints_kept(cfg),
    )
    disk = by_name(report)["disk"]
    assert disk.status == "fail" and "need 20.0 GiB" in disk.found and "the best 3" in disk.found


def test_report_printing_shows_fix_under_failure(monkeypatch, tmp_path):
    install_fake_smi(monkeypatch, tmp_path, "h100x1")
    lines: list[str] = []
    print_report(run_preflight(gpu_context(fs_size=lambda p: 1024)), lines.append)
    text = "\n".join(lines)
    assert "[FAIL] shm" in text and "fix: /dev/shm is what NCCL" in text and "preflight FAILED: shm" in text


def test_preflight_command_cpu_mode_and_failure_exit(monkeypatch, tmp_path, capsys):
    env = install_fake_smi(monkeypatch, tmp_path, None)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "trm",
            "preflight",
            "--json",
            "--report",
            str(tmp_path / "r.json"),
            "--checkpoint-gb",
            "0.001",
            "--checkpoint-dir",
            str(tmp_path),
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["mode"] == "cpu" and report["torch"].startswith("2.13") and report["dev_shm_bytes"] > 0
    # the failure exit in this process (the entry point ran above): an interpreter importing torch is 2 s
    failed = trm_in_process(monkeypatch, capsys, ["preflight", "--gpu"], env)
    assert failed.returncode == 2
    assert "[FAIL] nvidia-smi" in failed.stdout and "fix:" in failed.stdout


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("80 89 90", [(80, False), (89, False), (90, False)]),
        ("8.0;8.9;9.0+PTX", [(80, False), (89, False), (90, True)]),
        ("sm_80,sm_90a,compute_90", [(80, False), (90, False), (90, True)]),
    ],
)
def test_sm_list_parsing(text, parsed):
    assert compat.parse_sm_list(text) == parsed


def test_sm_coverage_rules():
    assert compat.sm_covered(89, [(80, False)])  # same major, newer minor: binary compatible
    assert not compat.sm_covered(89, [(90, False)])
    assert not compat.sm_covered(90, [(80, False), (89, False)])
    assert compat.sm_covered(90, [(80, True)])  # PTX JIT-compiles forward
    assert not compat.sm_covered(80, [(90, True)])


def test_driver_table_when_banner_is_missing():
    ok, found = compat.driver_supports(image_cuda="12.6", driver_cuda=None, driver_version="555.42.02")
    assert ok is False and ">= 560.28.03" in found
    ok, _ = compat.driver_supports(image_cuda="12.7", driver_cuda=None, driver_version="565.57.01")
    assert ok is True  # 12.7 is not in the table: the closest older minor (12.6) decides
    assert compat.driver_supports(image_cuda="12.4", driver_cuda=None, driver_version=None)[0] is None


@pytest.mark.dist
def test_gloo_allreduce_across_two_processes():
    result = allreduce_check(2, backend="gloo", timeout_s=60)
    assert result.ok, result.detail
    assert "over 2 rank(s) correct" in result.detail


def test_matmul_check_on_cpu():
    result = matmul_check("cpu", size=128, bench_size=128, repeats=2)
    assert result.ok and result.max_rel_error < 1e-5 and result.tflops > 0


def test_small_locked_memory_limit_is_a_warning_with_the_fix(monkeypatch, tmp_path):
    install_fake_smi(monkeypatch, tmp_path, "h100x2")
    report = run_preflight(gpu_context(memlock=lambda: 64 * 1024))
    check = by_name(report)["ulimit -l"]
    assert report.ok and check.status == "warn" and "--ulimit memlock=-1" in check.fix
    assert by_name(run_preflight(gpu_context()))["ulimit -l"].status == "ok"


def test_missing_c_toolchain_fails_because_compile_needs_it(monkeypatch, tmp_path):
    install_fake_smi(monkeypatch, tmp_path, "h100x1")
    include = Path("/usr/local/include/python3.11")
    report = run_preflight(gpu_context(c_toolchain=lambda: (None, include, True)))
    check = by_name(report)["c compiler"]
    assert check.status == "fail" and not report.ok
    assert "apt-get install gcc libc6-dev python3-dev" in check.fix and "DISABLE_COMPILE=1" in check.fix
    report = run_preflight(gpu_context(c_toolchain=lambda: ("/usr/bin/gcc", include, False)))
    assert by_name(report)["c compiler"].found == f"/usr/bin/gcc, but no Python.h in {include}"
    report = run_preflight(gpu_context(c_toolchain=lambda: ("/usr/bin/gcc", include, True)))
    assert by_name(report)["c compiler"].status == "ok"


def test_c_toolchain_probe_reads_this_interpreter():
    from trm.launch.host.preflight import _c_toolchain

    _cc, include, has_python_h = _c_toolchain()
    assert include.name.startswith("python3") and has_python_h == (include / "Python.h").is_file()
