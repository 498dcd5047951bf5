"""The CUDA 12.8 family's torch, checked in the wheel itself: the hash-locked torch of
docker/requirements/runtime-cu128.txt says CUDA 12.8 in torch/version.py, and libtorch_cuda.so carries SASS
for every GPU the cu128 images target (sm_80, sm_86, sm_89, sm_90), so no kernel needs the driver's PTX JIT,
which CUDA minor-version compatibility does not give an R525-R575 driver.

Downloads the ~900 MB torch wheel and NVIDIA's cuobjdump wheel (the build-cu130 lock's pin) with their
locked hashes into TRM_WHEEL_CACHE (default build/wheel-cache/, kept between runs): slow, opt-in
(`nox -s tests -- -m download tests/tools/images/test_cu128_wheel.py`).
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import zipfile
from pathlib import Path

import pytest

from tools.images import requirements
from trm.images.buildtools import parse_cuobjdump_elf
from trm.images.venvtools import subset_lock

pytestmark = pytest.mark.download

ROOT = Path(__file__).resolve().parents[3]
TARGET_SASS = {"sm_80", "sm_86", "sm_89", "sm_90"}


def _download(lock: Path, name: str, cache: Path) -> Path:
    """The wheel of `name` pinned in `lock`, fetched once (pip checks the lock's sha256)."""
    version = requirements.read_pins(lock)[name]
    dist = name.replace("-", "_")
    found = sorted(cache.glob(f"{dist}-{version}-*.whl"))
    if found:
        return found[0]
    req = cache / f"{name}.txt"
    req.write_text(subset_lock(lock.read_text(), [name]))
    cmd = requirements.download_command(req, cache, "3.11")
    subprocess.run(cmd, check=True)
    (wheel,) = cache.glob(f"{dist}-{version}-*.whl")
    return wheel


@pytest.fixture(scope="module")
def cache() -> Path:
    path = Path(os.environ.get("TRM_WHEEL_CACHE") or ROOT / "build" / "wheel-cache")
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_locked_torch_is_the_cuda128_build_with_sass_for_every_target_gpu(cache, tmp_path):
    torch_wheel = _download(requirements.runtime_lock(ROOT, "cu128"), "torch", cache)
    tool_wheel = _download(requirements.build_lock(ROOT, "cu130"), "nvidia-cuda-cuobjdump", cache)
    with zipfile.ZipFile(torch_wheel) as wheel:
        version_py = wheel.read("torch/version.py").decode()
        library = Path(wheel.extract("torch/lib/libtorch_cuda.so", tmp_path))
    assert re.search(r"^cuda(: Optional\[str\])? = '12\.8'$", version_py, re.M), version_py
    with zipfile.ZipFile(tool_wheel) as wheel:
        (member,) = [n for n in wheel.namelist() if n.endswith("/bin/cuobjdump")]
        cuobjdump = Path(wheel.extract(member, tmp_path))
    cuobjdump.chmod(cuobjdump.stat().st_mode | stat.S_IXUSR)
    listing = subprocess.run(
        [str(cuobjdump), "--list-elf", str(library)], capture_output=True, text=True, check=True
    )
    found = parse_cuobjdump_elf(listing.stdout)
    print(f"{torch_wheel.name}: SASS {sorted(found)}")
    assert found >= TARGET_SASS, f"missing {sorted(TARGET_SASS - found)}; found {sorted(found)}"
