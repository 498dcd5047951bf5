"""The GPU kit's contents (from pyproject.toml and the image lock) and the rehearsal's verdict on a report."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tools.gpu import kit as gpu_kit
from tools.gpu.check.core import NO_GPU, NO_TIME
from tools.gpu.check.plan import PARTS
from trm.errors import TRMError

ROOT = Path(__file__).resolve().parents[3]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _names(requirements: list[str]) -> set[str]:
    return {r.split("==")[0].lower() for r in requirements}


def test_kit_holds_the_runtime_dependencies_but_torch_and_the_checks_test_runner() -> None:
    wanted = gpu_kit.kit_requirements(PYPROJECT, upstream=False)
    runtime = _names(PYPROJECT["project"]["dependencies"]) - {"torch", "matplotlib"}
    assert _names(wanted) == runtime | {"pytest", "pytest-xdist", "pyyaml"}
    assert all("==" in r for r in wanted)  # downloaded at the project's pins
    with_upstream = _names(gpu_kit.kit_requirements(PYPROJECT, upstream=True))
    assert {"pydantic", "argdantic", "einops"} <= with_upstream and "numba" not in with_upstream


def test_the_kit_plots_nothing_and_carries_what_upstreams_trainer_imports() -> None:
    """matplotlib only draws `trm report` figures; upstream's pretrain.py (the step A/B) imports coolname
    (pinned in the kit) and wandb (stood in for by tools.bench.upstream_trainer)."""
    plain = _names(gpu_kit.kit_requirements(PYPROJECT, upstream=False))
    assert "matplotlib" not in plain and "coolname" not in plain
    with_upstream = gpu_kit.kit_requirements(PYPROJECT, upstream=True)
    assert "coolname==5.0.0" in with_upstream and "wandb" not in _names(with_upstream)
    upstream_imports = {
        "pydantic",
        "argdantic",
        "einops",
        "coolname",
        "hydra-core",
        "omegaconf",
        "tqdm",
        "pyyaml",
    }
    assert upstream_imports <= _names(with_upstream)


def test_the_kits_requirements_are_pinned_except_what_the_host_keeps() -> None:
    wanted = ["numpy==2.4.6", "hydra-core==1.3.8", "PyYAML==6.0.3", "tqdm==4.70.1; python_version >= '3.8'"]
    text = gpu_kit.requirements_text(wanted, {"numpy"})
    assert text.splitlines() == ["hydra-core==1.3.8", "numpy", "PyYAML==6.0.3", "tqdm==4.70.1"]


def test_the_wandb_stand_in_lets_upstreams_trainer_run_without_wandb(monkeypatch) -> None:
    import sys

    from tools.bench import upstream_trainer

    monkeypatch.setitem(sys.modules, "wandb", None)
    upstream_trainer.install_tracking_stub()
    import wandb

    wandb.init(project="p", name="n", config={}, settings=wandb.Settings(_disable_stats=True))
    wandb.log({"num_params": 1}, step=0)
    wandb.finish()
    assert wandb.run is None  # upstream then skips copying its code into the run


def test_an_unpinned_dependency_is_named() -> None:
    broken = {"project": {**PYPROJECT["project"], "dependencies": ["torch==2.13.0", "numpy>=2"]}}
    with pytest.raises(TRMError, match=r"'numpy>=2' is not pinned with ==; pin it exactly"):
        gpu_kit.kit_requirements(broken, upstream=False)


def test_lock_pins_drop_torch_and_local_versions() -> None:
    text = "torch==2.13.0+cpu \\\n    --hash=sha256:aa\nnumpy==2.4.6 \\\n    --hash=sha256:bb\n    # via x\n"
    assert gpu_kit.lock_pins(text) == ["numpy==2.4.6"]
    pins = gpu_kit.lock_pins((ROOT / gpu_kit.RUNTIME_LOCK).read_text())
    assert "antlr4-python3-runtime==4.9.3" in pins and not any(p.startswith("torch==") for p in pins)


def _report(**changes) -> dict:
    cuda = {p.name for p in PARTS if p.needs_cuda}
    parts = [
        {"name": p.name, "status": "skip" if p.name in cuda else "pass", "skipped": NO_GPU if p.name in cuda else None,
         "summary": "…", "seconds": 1.0}
        for p in PARTS
    ]  # fmt: skip
    return {"status": "incomplete", "plan_fits_budget": True, "planned_h100_s": 500, "budget_s": 540, "parts": parts,
            **changes}  # fmt: skip


def test_the_rehearsal_passes_only_when_cuda_parts_skip_for_no_gpu_and_the_rest_pass() -> None:
    cuda = {p.name for p in PARTS if p.needs_cuda}
    assert cuda == {p.name for p in PARTS} - {"facts", "kit", "imports", "collect"}  # all that touch the GPU
    assert gpu_kit.check_simulated_report(_report(), cuda) == []
    report = _report()
    next(p for p in report["parts"] if p["name"] == "imports")["status"] = "fail"
    assert gpu_kit.check_simulated_report(report, cuda) == ["imports: fail (…), expected pass"]
    report = _report()
    gpu_tests = next(p for p in report["parts"] if p["name"] == "gpu-tests")
    gpu_tests["skipped"] = NO_TIME  # skipped for time, not for the missing GPU
    assert gpu_kit.check_simulated_report(report, cuda) == ["gpu-tests: skip (…), expected 'skipped: no GPU'"]
    problems = gpu_kit.check_simulated_report(_report(plan_fits_budget=False, planned_h100_s=900), cuda)
    assert problems == ["the plan (900 s on an H100) exceeds the budget 540"]


def test_wheels_the_host_has_are_named_by_their_distribution() -> None:
    assert (
        gpu_kit.wheel_dist_name("pydantic_core-2.50.4-cp312-cp312-manylinux2014_x86_64.whl")
        == "pydantic-core"
    )
    assert gpu_kit.wheel_dist_name("numpy-2.4.6-cp312-cp312-manylinux_2_28_x86_64.whl") == "numpy"


def test_the_kit_leaves_out_the_upstream_checkouts_notebooks_and_images(tmp_path: Path) -> None:
    import shutil

    src = tmp_path / "upstream"
    for rel in (
        "pretrain.py",
        "models/recursive_reasoning/trm.py",
        "kaggle/data.json",
        "assets/fig.png",
        "README.md",
    ):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text("x")
    shutil.copytree(src, tmp_path / "copy", ignore=shutil.ignore_patterns(*gpu_kit.UPSTREAM_SKIP_FILES))
    kept = sorted(
        str(p.relative_to(tmp_path / "copy")) for p in (tmp_path / "copy").rglob("*") if p.is_file()
    )
    assert kept == ["README.md", "models/recursive_reasoning/trm.py", "pretrain.py"]


FAKE_PIP = """
import json, pathlib, sys
args = sys.argv[1:]
with open(sys.argv[0] + ".calls", "a") as log:
    log.write(json.dumps(args) + "\\n")
dest = pathlib.Path(args[args.index("-d") + 1] if "-d" in args else args[args.index("-w") + 1])
if args[0] == "download" and "--no-binary=:all:" in args:
    (dest / "adam_atan2-0.0.3.tar.gz").write_bytes(b"sdist")
elif args[0] == "download":
    version = args[args.index("--python-version") + 1].replace(".", "")
    (dest / ("PyYAML-6.0.3-cp%s-cp%s-manylinux_2_28_x86_64.whl" % (version, version))).write_bytes(b"w")
    (dest / "coolname-5.0.0-py3-none-any.whl").write_bytes(b"w")
"""


def test_one_kit_serves_several_host_pythons_with_pinned_requirements(tmp_path: Path, monkeypatch) -> None:
    """Each Python version's compiled wheels are downloaded into the same folder (the pure-Python ones serve
    them all); requirements.txt pins what the kit carries and names what the host keeps without a version."""
    import hashlib
    import json
    import sys

    from trm.images import buildtools

    fake = tmp_path / "pip.py"
    fake.write_text(FAKE_PIP)
    monkeypatch.setattr(buildtools, "lock_hashes", lambda text, name: {hashlib.sha256(b"sdist").hexdigest()})
    manifest = gpu_kit.build_kit(
        tmp_path / "kit",
        python_version=("3.11", "3.12"),
        pip=[sys.executable, str(fake)],
        host_has=("numpy",),
    )
    calls = [json.loads(line) for line in (tmp_path / "pip.py.calls").read_text().splitlines()]
    versions = [c[c.index("--python-version") + 1] for c in calls if "--python-version" in c]
    assert versions == ["3.11", "3.12"] and manifest["python_version"] == "3.11 3.12"
    wheels = sorted(p.name for p in (tmp_path / "kit").glob("*.whl"))
    assert wheels == [
        "PyYAML-6.0.3-cp311-cp311-manylinux_2_28_x86_64.whl",
        "PyYAML-6.0.3-cp312-cp312-manylinux_2_28_x86_64.whl",
        "coolname-5.0.0-py3-none-any.whl",
    ]
    requirements = (tmp_path / "kit" / "requirements.txt").read_text().splitlines()
    assert "numpy" in requirements and "PyYAML==6.0.3" in requirements and "hydra-core==1.3.8" in requirements
    assert all("==" in r for r in requirements if r != "numpy") and "matplotlib" not in " ".join(requirements)
