"""CUDA_VISIBLE_DEVICES: nvidia-smi ignores it, so everything planned from nvidia-smi's list applies it as
CUDA does (indices, UUIDs and their prefixes, MIG slices, the end of the list), and a value CUDA would
silently cut short is an error that names the entry.

The host is the fake nvidia-smi (tests/fixtures/nvidia_smi); torch's side is simulated in preflight (the
`gpu` test at the end checks the same against a real CUDA torch).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.helpers import FIXTURES, install_fake_smi
from trm import exit_codes
from trm.launch.host import cuda_visible
from trm.launch.host.cuda_visible import VisibleDevicesError
from trm.launch.host.nvidia_smi import query_gpus, query_memory_used, smi_uuid

H100X8 = [line.split(", ")[4] for line in (FIXTURES / "h100x8" / "query.csv").read_text().splitlines()]
MIG_SLICE = "MIG-0b8a41e5-3c6f-5a0e-9d0e-2f71c1f0a6d3"  # the one slice of h100-mig-3g40gb


def visible(value: str) -> list[tuple[int, int | None, str]]:
    """(CUDA index, nvidia-smi index, UUID) of each GPU CUDA_VISIBLE_DEVICES=value leaves."""
    return [(g.index, g.smi_index, g.uuid) for g in query_gpus(environ={"CUDA_VISIBLE_DEVICES": value})]


@pytest.mark.parametrize(
    ("value", "listed"),
    [
        ("0,2,-1,1", ["0", "2"]),  # CUDA's documented example: -1 ends the list
        (" 3 , 1 ", ["3", "1"]),  # order kept, blanks ignored
        ("0,1,", ["0", "1"]),  # a trailing comma
        ("", []),
        ("-1", []),
        ("NoDevFiles", []),  # Slurm's value for a job without GPUs
        ("GPU-74106407,GPU-08f22e65", ["GPU-74106407", "GPU-08f22e65"]),
        (MIG_SLICE, [MIG_SLICE]),
    ],
)
def test_entries_read_as_cuda_reads_them(value, listed):
    assert cuda_visible.entries(value) == listed


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0,x,1", "entry 'x' is neither a GPU index nor a GPU-/MIG- UUID; CUDA would ignore it and every"),
        ("0,,1", "an empty entry is neither"),
        ("1gpu2", "entry '1gpu2'"),  # CUDA's strtoul would read GPU 1 and drop the rest
        ("74106407-f32f-0663-90a7-a1acf7eb04ae", "UUIDs keep their GPU- or MIG- prefix"),
        ("0,GPU-74106407", "mixes GPU UUIDs and indices"),
        (f"GPU-74106407,{MIG_SLICE}", "mixes GPU UUIDs and MIG UUIDs"),
    ],
)
def test_values_cuda_would_cut_short_are_errors_naming_the_entry(value, message):
    with pytest.raises(VisibleDevicesError, match=message) as info:
        cuda_visible.entries(value)
    assert f"CUDA_VISIBLE_DEVICES={value!r}" in str(info.value) and "nvidia-smi -L" in str(info.value)


def test_query_gpus_keeps_the_gpus_cuda_sees_in_its_order(monkeypatch, tmp_path):
    """Before, nvidia-smi's 8 GPUs were all listed whatever CUDA_VISIBLE_DEVICES said."""
    install_fake_smi(monkeypatch, tmp_path, "h100x8")
    assert visible("5,2") == [(0, 5, H100X8[5]), (1, 2, H100X8[2])]
    assert visible(f"{H100X8[3]},{H100X8[6][:12]}") == [(0, 3, H100X8[3]), (1, 6, H100X8[6])]  # full, prefix
    assert visible("1,2,-1,0") == [(0, 1, H100X8[1]), (1, 2, H100X8[2])]
    assert visible("") == [] and visible("NoDevFiles") == []
    assert len(query_gpus(environ={})) == 8  # unset: every GPU
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")  # this process's environment by default
    assert [(g.index, g.smi_index) for g in query_gpus()] == [(0, 7)]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("8", r"GPU 8 does not exist: nvidia-smi lists 8 GPU\(s\) \(0-7\)"),
        ("GPU-ffffffff", "'GPU-ffffffff' is the UUID of no GPU here"),
        ("GPU-", r"'GPU-' is the start of 8 GPU UUIDs; give more of it"),
        ("1,3,1", "'1' names a device listed before; CUDA then sees no GPU at all"),
        (f"{H100X8[2]},GPU-126d", "names a device listed before"),  # the same GPU by UUID and prefix
    ],
)
def test_devices_this_host_lacks_are_errors(monkeypatch, tmp_path, value, message):
    install_fake_smi(monkeypatch, tmp_path, "h100x8")
    with pytest.raises(VisibleDevicesError, match=message):
        query_gpus(environ={"CUDA_VISIBLE_DEVICES": value})


def test_mig_slices_by_their_uuid_or_by_their_gpu(monkeypatch, tmp_path):
    install_fake_smi(monkeypatch, tmp_path, "h100-mig-3g40gb")
    for value in (MIG_SLICE, MIG_SLICE[:12], "0", "GPU-74106407"):
        (gpu,) = query_gpus(environ={"CUDA_VISIBLE_DEVICES": value})
        assert (gpu.index, gpu.uuid, gpu.mig_profile, gpu.memory_mib) == (0, MIG_SLICE, "3g.40gb", 40 * 1024)
    with pytest.raises(VisibleDevicesError, match="UUID of no MIG slice"):
        query_gpus(environ={"CUDA_VISIBLE_DEVICES": "MIG-ffff"})
    with pytest.raises(VisibleDevicesError, match="listed before"):
        query_gpus(environ={"CUDA_VISIBLE_DEVICES": "GPU-74106407,GPU-74106407-f32f"})


def test_memory_in_use_is_keyed_like_the_visible_gpus(monkeypatch, tmp_path):
    install_fake_smi(monkeypatch, tmp_path, "h100x8")
    gpus = query_gpus(environ={"CUDA_VISIBLE_DEVICES": "6,4"})
    assert set(query_memory_used()) == set(range(8))  # nvidia-smi's numbering without `gpus`
    assert set(query_memory_used(gpus=gpus)) == {0, 1}


def test_preflight_checks_the_gpus_torch_sees(monkeypatch, tmp_path):
    """Before, preflight counted all 4 GPUs, so a torch that sees the 2 listed ones failed "torch cuda"."""
    from tests.launch.host.test_preflight import by_name, gpu_context
    from trm.launch.host.preflight import run_preflight

    install_fake_smi(monkeypatch, tmp_path, "h100x4")
    ranks: list[int] = []
    ctx = gpu_context(
        environ={"CUDA_VISIBLE_DEVICES": "2,3"},
        torch_cuda=lambda: ("12.4", 2),
        allreduce=lambda n: (ranks.append(n) is None, f"nccl all-reduce over {n} rank(s) correct"),
    )
    report = run_preflight(ctx)
    checks = by_name(report)
    assert report.ok, [c.line() for c in report.checks if c.status == "fail"]
    assert ranks == [2] and [n for n in checks if n.startswith("matmul gpu")] == [
        "matmul gpu0",
        "matmul gpu1",
    ]
    assert "CUDA_VISIBLE_DEVICES='2,3'" in checks["nvidia-smi"].found
    assert [g["uuid"] for g in report.environment["gpus"]] == [H100X8[2], H100X8[3]]  # same UUIDs as h100x8


def test_preflight_with_every_gpu_hidden_or_a_bad_value(monkeypatch, tmp_path):
    from tests.launch.host.test_preflight import by_name, gpu_context
    from trm.launch.host.preflight import run_preflight

    install_fake_smi(monkeypatch, tmp_path, "h100x4")
    hidden = gpu_context(environ={"CUDA_VISIBLE_DEVICES": "-1"})
    auto = run_preflight(hidden)
    assert auto.ok and auto.mode == "cpu" and "hides every GPU" in by_name(auto)["nvidia-smi"].found
    gpu = run_preflight(hidden, mode="gpu")
    assert gpu.exit_code == exit_codes.CONFIG_ERROR and "hides every GPU" in by_name(gpu)["nvidia-smi"].found
    bad = run_preflight(gpu_context(environ={"CUDA_VISIBLE_DEVICES": "0,5"}))
    smi = by_name(bad)["nvidia-smi"]
    assert bad.exit_code == exit_codes.CONFIG_ERROR  # the configuration, not this node
    assert smi.status == "fail" and "GPU 5 does not exist: nvidia-smi lists 4 GPU(s)" in smi.fix


def test_the_launchers_layout_counts_the_visible_gpus(monkeypatch, tmp_path):
    """Before, CUDA_VISIBLE_DEVICES=2,3 on 8 GPUs planned 8 ranks; ranks 2-7 hit "invalid device ordinal"."""
    from trm.errors import TRMError
    from trm.launch.config.settings import LaunchSettings
    from trm.launch.plan.resolve import resolve

    install_fake_smi(monkeypatch, tmp_path, "h100x8")
    env = {"WORKSPACE": str(tmp_path / "ws"), "TASK": "arc1", "CUDA_VISIBLE_DEVICES": "2,3"}
    plan = resolve(LaunchSettings.from_env(env), env)
    assert plan.hardware.world_size == 2
    hidden = {**env, "CUDA_VISIBLE_DEVICES": ""}
    with pytest.raises(TRMError, match="hides every GPU, and TASK=arc1 needs GPUs"):
        resolve(LaunchSettings.from_env(hidden), hidden)


def test_select_config_reads_cuda_visible_devices(monkeypatch, tmp_path):
    env = install_fake_smi(monkeypatch, tmp_path, "h100x8")
    proc = subprocess.run(
        [sys.executable, "-m", "trm", "select-config", "--json"],
        env={**env, "CUDA_VISIBLE_DEVICES": "0,1,2,3"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["world_size"] == 4


def test_a_mig_slices_uuid_keeps_its_mig_prefix():
    """torch gives the bare hex and a name with "MIG 3g.40gb"; matmul_check used to log "GPU-<slice>",
    a UUID that neither nvidia-smi nor CUDA_VISIBLE_DEVICES knows."""
    bare = MIG_SLICE.removeprefix("MIG-")
    assert smi_uuid(bare, "NVIDIA H100 80GB HBM3 MIG 3g.40gb") == MIG_SLICE
    assert smi_uuid(MIG_SLICE, "NVIDIA H100 80GB HBM3 MIG 3g.40gb") == MIG_SLICE
    assert smi_uuid(H100X8[0].removeprefix("GPU-"), "NVIDIA H100 80GB HBM3") == H100X8[0]
    assert smi_uuid(H100X8[0], "NVIDIA H100 80GB HBM3") == H100X8[0]


TORCH_SEES = """
import json, torch
from trm.launch.host.nvidia_smi import query_gpus, smi_uuid
props = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
print(json.dumps({"torch": [smi_uuid(str(p.uuid), p.name) for p in props],
                  "smi": [g.uuid for g in query_gpus()]}))
"""


@pytest.mark.gpu
def test_torch_sees_exactly_the_gpus_query_gpus_lists():
    """On a real GPU host: for each way of naming the last GPU (index, UUID, UUID prefix; a MIG slice's
    UUID), torch's devices are query_gpus' list, UUID for UUID (matmul_check's UUID is nvidia-smi's)."""
    every = query_gpus(environ={})
    last = every[-1]
    values = ["", str(len(every) - 1) if not last.mig_profile else last.uuid, last.uuid, last.uuid[:12]]
    for value in values:
        proc = subprocess.run(
            [sys.executable, "-c", TORCH_SEES],
            env={**os.environ, "CUDA_VISIBLE_DEVICES": value},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        seen = json.loads(proc.stdout.strip().splitlines()[-1])
        assert seen["torch"] == seen["smi"] == ([] if value == "" else [last.uuid]), (value, seen)


def test_the_probes_memory_sampler_reads_only_the_visible_gpus(monkeypatch, tmp_path):
    """The probe's peak memory is per visible GPU, by CUDA index (not every GPU nvidia-smi lists)."""
    from trm.launch.supervision.probe import MemorySampler

    install_fake_smi(monkeypatch, tmp_path, "h100x8")
    gpus = query_gpus(environ={"CUDA_VISIBLE_DEVICES": "6,4"})
    sampler = MemorySampler(interval_s=0.01, gpus=gpus)
    sampler.start()
    deadline = time.monotonic() + 10
    while not sampler.peak_mib and time.monotonic() < deadline:
        time.sleep(0.01)
    assert set(sampler.stop()) == {0, 1}
