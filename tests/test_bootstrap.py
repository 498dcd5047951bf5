"""Host bootstrap (scripts/bootstrap_host.sh, trm/bootstrap.py) on CPU: recorded nvidia-smi outputs, the
real locks, and a recording stand-in for pip/venv, so every decision is checked without installing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import FIXTURES, fake_smi_env, install_fake_smi
from trm import bootstrap
from trm.errors import TRMError

ROOT = Path(__file__).resolve().parents[1]
PY311 = (3, 11)


def target_for(monkeypatch, tmp_path, shape: str) -> bootstrap.Target:
    install_fake_smi(monkeypatch, tmp_path, shape)
    return bootstrap.detect(cpu=False)


def test_detect_compiles_for_the_hosts_sms_only(monkeypatch, tmp_path):
    target = target_for(monkeypatch, tmp_path, "r580-h100x1")
    assert (target.lock, target.archs, target.sm_list) == ("cu130", "9.0", "90")
    mixed = target_for(monkeypatch, tmp_path, "r580-mixed-h100-a100")
    assert mixed.archs == "8.0;9.0" and mixed.sm_list == "80 90"


def test_detect_picks_the_family_from_the_driver(monkeypatch, tmp_path):
    """R550 (h100x4) gets the CUDA 12.8 lock and trm's AdamATan2 (no PyPI nvcc for CUDA 12); R580 the
    CUDA 13.0 lock and the extension. Before the families, R550 was refused outright."""
    target = target_for(monkeypatch, tmp_path, "h100x4")
    assert (target.lock, target.cuda, target.torch, target.optimizer_backend) == (
        "cu128",
        "12.8",
        "2.10.0",
        "torch",
    )
    assert target.archs == "9.0" and not target.builds_extension and target.driver == "550.127.05"
    new = target_for(monkeypatch, tmp_path, "r580-h100x1")
    assert (new.lock, new.cuda, new.torch, new.optimizer_backend) == ("cu130", "13.0", "2.13.0", "ext")
    assert new.builds_extension


def test_detect_refuses_a_driver_older_than_every_family(monkeypatch, tmp_path):
    install_fake_smi(monkeypatch, tmp_path, "r470-a100-40gx1")  # R470: no compute_cap query field either
    with pytest.raises(
        TRMError,
        match=r"driver 470.256.02 \(branch R470\) is older than every trm image.*R525.*cuda_vers>=12.0",
    ):
        bootstrap.detect(cpu=False)


def test_cuda128_bootstrap_installs_no_toolchain_and_verifies_the_torch_backend(tmp_path):
    target = bootstrap.Target("cu128", "12.8", "9.0", ["NVIDIA H100 80GB HBM3 (sm_90)"], "torch", "2.10.0")
    run = Recorder()
    code, out = run_bootstrap(tmp_path, target, run)
    assert code == 0
    cmds = [" ".join(c) for c in run.calls]
    assert cmds[2].endswith(f"-r {ROOT}/docker/requirements/runtime-cu128.txt")
    assert not any("adam" in c or "toolchain" in c for c in cmds)
    assert cmds[-1].endswith("-m trm.bootstrap verify --cuda 12.8")
    assert "optimizer backend torch" in out and "TRM_IMAGE_OPTIMIZER_BACKEND=torch" in out


def test_detect_without_nvidia_smi_points_at_cpu(monkeypatch, tmp_path):
    install_fake_smi(monkeypatch, tmp_path, None)
    with pytest.raises(TRMError, match=r"pass --cpu"):
        bootstrap.detect(cpu=False)
    assert bootstrap.detect(cpu=True) == bootstrap.Target("cpu", "", "")


class Recorder:
    """Stands in for subprocess.run: records argv, creates the venv's python when `-m venv` runs."""

    def __init__(self, fail_on: str | None = None):
        self.calls: list[list[str]] = []
        self.fail_on = fail_on

    def __call__(self, argv, env=None, check=False):
        self.calls.append(list(argv))
        if argv[1:3] == ["-m", "venv"]:
            (Path(argv[3]) / "bin").mkdir(parents=True)
            (Path(argv[3]) / "bin" / "python").touch()
        code = 1 if self.fail_on and self.fail_on in " ".join(argv) else 0
        return subprocess.CompletedProcess(argv, code)


def run_bootstrap(tmp_path, target, run, **kw):
    lines: list[str] = []
    code = bootstrap.bootstrap(
        venv=tmp_path / "venv", target=target, base_python="/usr/bin/python3.11", python_version=PY311,
        run=run, out=lines.append, jobs=2, **kw,
    )  # fmt: skip
    return code, "\n".join(lines)


def test_gpu_bootstrap_installs_the_locks_builds_adam_for_the_sm_verifies_and_stamps(tmp_path):
    target = bootstrap.Target("cu130", "13.0", "9.0", ["NVIDIA H100 80GB HBM3 (sm_90)"])
    run = Recorder()
    code, out = run_bootstrap(tmp_path, target, run)
    assert code == 0
    venv = tmp_path / "venv"
    cmds = [" ".join(c) for c in run.calls]
    assert cmds[0] == f"/usr/bin/python3.11 -m venv {venv}"
    assert "--require-hashes" in cmds[1] and cmds[1].endswith(".trm-bootstrap/bootstrap.txt")
    assert cmds[2].endswith(f"-r {ROOT}/docker/requirements/runtime-cu130.txt")
    assert cmds[3].endswith(".trm-bootstrap/toolchain.txt")
    assert "pip download --require-hashes --no-deps --no-build-isolation --no-binary adam-atan2" in cmds[4]
    assert cmds[4].endswith(".trm-bootstrap/adam-atan2.txt")
    adam = (venv / ".trm-bootstrap" / "adam-atan2.txt").read_text()
    assert adam.startswith("adam-atan2==0.0.3") and "--hash=sha256:" in adam
    assert "-m trm.images.buildtools build-adam-atan2" in cmds[5] and "--archs 9.0 " in cmds[5]
    assert cmds[6].endswith(f"-e {ROOT}")
    assert cmds[7] == f"{venv}/bin/python -m trm.bootstrap verify --archs 9.0"
    # the requirement subsets are the lock's own hash-pinned entries
    tools = (venv / ".trm-bootstrap" / "bootstrap.txt").read_text()
    assert tools.startswith("pip==") and "--hash=sha256:" in tools and "adam-atan2" not in tools
    toolchain = (venv / ".trm-bootstrap" / "toolchain.txt").read_text()
    assert "adam-atan2" not in toolchain and "nvidia-cuda-cuobjdump" in toolchain
    stamp = json.loads((venv / bootstrap.STAMP).read_text())
    assert stamp["archs"] == "9.0" and stamp["lock"] == "cu130"
    assert (
        "next: PYTHON=" in out and "TRM_ADAM_ATAN2_SM_LIST=90" in out and "bash scripts/train_prod.sh" in out
    )

    # idempotent: the same inputs only verify
    again = Recorder()
    code, out = run_bootstrap(tmp_path, target, again)
    assert code == 0 and again.calls == [
        [f"{venv}/bin/python", "-m", "trm.bootstrap", "verify", "--archs", "9.0"]
    ]
    assert "is up to date" in out

    # another GPU (another SM): everything is redone for it
    other = bootstrap.Target("cu130", "13.0", "8.0", ["NVIDIA A100-SXM4-80GB (sm_80)"])
    rebuild = Recorder()
    code, out = run_bootstrap(tmp_path, other, rebuild)
    assert "built for other inputs (archs)" in out and "reusing it" in out
    assert any("--archs 8.0" in " ".join(c) for c in rebuild.calls)
    assert json.loads((venv / bootstrap.STAMP).read_text())["archs"] == "8.0"


def test_cpu_bootstrap_has_no_toolchain_or_adam_build(tmp_path):
    run = Recorder()
    code, out = run_bootstrap(tmp_path, bootstrap.Target("cpu", "", ""), run)
    cmds = [" ".join(c) for c in run.calls]
    assert code == 0 and len(cmds) == 5
    assert cmds[2].endswith("runtime-cpu.txt") and not any("adam" in c for c in cmds)
    assert "TASK=debug-tiny NUM_GPUS=0" in out


def test_a_failed_step_stops_without_a_stamp(tmp_path):
    run = Recorder(fail_on="build-adam-atan2")
    with pytest.raises(TRMError, match=r"step 6 \(adam-atan2 build\) failed"):
        run_bootstrap(tmp_path, bootstrap.Target("cu130", "13.0", "9.0"), run)
    assert not (tmp_path / "venv" / bootstrap.STAMP).exists()
    assert not any("verify" in c for c in run.calls[-1])


def test_dry_run_prints_the_plan_and_changes_nothing(tmp_path):
    run = Recorder()
    code, out = run_bootstrap(tmp_path, bootstrap.Target("cu130", "13.0", "9.0"), run, dry_run=True)
    assert code == 0 and run.calls == [] and not (tmp_path / "venv").exists()
    assert "step 6: adam-atan2 build: compile for TORCH_CUDA_ARCH_LIST=9.0 only" in out
    assert "dry run: nothing was changed" in out


def test_refuses_another_python_than_the_locks(tmp_path):
    with pytest.raises(TRMError, match=r"Python 3.10.*CPython 3.11.*python3.11"):
        bootstrap.bootstrap(
            venv=tmp_path / "v", target=bootstrap.Target("cpu", "", ""), python_version=(3, 10)
        )


def test_script_dry_run_with_recorded_nvidia_smi(tmp_path):
    env = fake_smi_env(tmp_path, "r580-h100x1")
    env["PYTHON"] = sys.executable
    proc = subprocess.run(
        ["bash", "scripts/bootstrap_host.sh", "--dry-run", "--venv", str(tmp_path / "v")],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (
        "(sm_90); driver 580.95.05; lock cu130 (CUDA 13.0, torch 2.13.0), adam-atan2 for 9.0" in proc.stdout
    )
    assert not (tmp_path / "v").exists()
    r550 = fake_smi_env(tmp_path, "h100x4")
    r550["PYTHON"] = sys.executable
    proc = subprocess.run(["bash", "scripts/bootstrap_host.sh", "--dry-run", "--venv", str(tmp_path / "v")],
                          cwd=ROOT, env=r550, capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "driver 550.127.05; lock cu128 (CUDA 12.8, torch 2.10.0), optimizer backend torch" in proc.stdout
    assert "runtime-cu128.txt" in proc.stdout and "adam-atan2 build" not in proc.stdout
    old = fake_smi_env(tmp_path, "r470-a100-40gx1")
    old["PYTHON"] = sys.executable
    proc = subprocess.run(["bash", "scripts/bootstrap_host.sh", "--dry-run"], cwd=ROOT, env=old,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 2 and "older than every trm image" in proc.stderr and "R525" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_fixture_drivers_are_what_the_names_say():
    assert "CUDA Version: 13.0" in (FIXTURES / "r580-h100x1" / "nvidia-smi.txt").read_text()


def test_print_env_names_the_venv_this_hosts_driver_gets(tmp_path):
    """Runbooks 02/03 take PYTHON (and the image-label facts) from the bootstrap, not a hard-coded venv: an
    R550 host gets .venv-cu128 with the torch backend, an R580 host .venv-cu130 with the extension."""
    for fixture, lock, backend in (("h100x4", "cu128", "torch"), ("r580-h100x1", "cu130", "ext")):
        env = fake_smi_env(tmp_path, fixture)
        env["PYTHON"] = sys.executable
        proc = subprocess.run(["bash", "scripts/bootstrap_host.sh", "--print-env"], cwd=ROOT, env=env,
                              capture_output=True, text=True, check=False)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        exports = dict(line.removeprefix("export ").split("=", 1) for line in proc.stdout.splitlines())
        assert exports["PYTHON"] == str(ROOT / f".venv-{lock}" / "bin" / "python")
        assert exports["TRM_IMAGE_OPTIMIZER_BACKEND"] == backend
        assert ("TRM_ADAM_ATAN2_SM_LIST" in exports) == (backend == "ext")
