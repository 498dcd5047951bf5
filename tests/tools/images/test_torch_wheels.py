"""Each GPU family's torch, checked in the wheel itself: the hash-locked torch of
docker/requirements/runtime-<family>.txt says the family's CUDA release in torch/version.py, and
libtorch_cuda.so carries SASS that runs on every GPU the family's variants target (docker/images.toml
archs: sm_80, sm_86 through the sm_80 variant, sm_89, sm_90, sm_100, sm_120), so no kernel needs the
driver's PTX JIT, which CUDA minor-version compatibility does not give an older driver of the same major.
"Runs on" is CUDA's binary compatibility (trm.images.compat.sm_covered): the CUDA 13.0 torch has no sm_89
SASS of its own for most kernels, and its sm_86 cubins run on 8.9.

Downloads the torch wheels (~900 MB for 12.8, ~500 MB for 13.0) and NVIDIA's cuobjdump wheel (the
build-cu130 lock's pin) with their locked hashes into TRM_WHEEL_CACHE (default build/wheel-cache/, kept
between runs): slow, opt-in (`nox -s tests -- -m download tests/tools/images/test_torch_wheels.py`).
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
from tools.images.variants import load_config
from trm.images import compat
from trm.images.buildtools import parse_cuobjdump_elf
from trm.images.venvtools import subset_lock

pytestmark = pytest.mark.download

ROOT = Path(__file__).resolve().parents[3]
CONFIG = load_config(ROOT / "docker/images.toml")
# The sm_86 cards (A6000, A40, A10, RTX 3090) run the sm80 variants (docs/images.md): their torch must
# cover 8.6 too.
EXTRA_TARGETS = {86}


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


def family_targets(family: str) -> set[int]:
    """The SMs the family's images are for: their variants' archs, plus the sm_86 cards."""
    archs = " ".join(a for v in CONFIG.variants.values() if v.lock == family for a in v.archs)
    return {sm for sm, _ptx in compat.parse_sm_list(archs)} | EXTRA_TARGETS


@pytest.mark.parametrize("family", sorted(CONFIG.families))
def test_locked_torch_is_the_familys_cuda_build_with_sass_for_every_target_gpu(family, cache, tmp_path):
    torch_wheel = _download(requirements.runtime_lock(ROOT, family), "torch", cache)
    tool_wheel = _download(requirements.build_lock(ROOT, "cu130"), "nvidia-cuda-cuobjdump", cache)
    with zipfile.ZipFile(torch_wheel) as wheel:
        version_py = wheel.read("torch/version.py").decode()
        library = Path(wheel.extract("torch/lib/libtorch_cuda.so", tmp_path))
    cuda = re.escape(CONFIG.families[family].cuda)
    assert re.search(rf"^cuda(: Optional\[str\])? = '{cuda}'$", version_py, re.M), version_py
    with zipfile.ZipFile(tool_wheel) as wheel:
        (member,) = [n for n in wheel.namelist() if n.endswith("/bin/cuobjdump")]
        cuobjdump = Path(wheel.extract(member, tmp_path))
    cuobjdump.chmod(cuobjdump.stat().st_mode | stat.S_IXUSR)
    listing = subprocess.run(
        [str(cuobjdump), "--list-elf", str(library)], capture_output=True, text=True, check=True
    )
    found = parse_cuobjdump_elf(listing.stdout)
    print(f"{torch_wheel.name}: SASS {sorted(found)}")
    built = compat.parse_sm_list(" ".join(found))
    missing = sorted(sm for sm in family_targets(family) if not compat.sm_covered(sm, built))
    assert not missing, f"no SASS runs on sm {missing}; found {sorted(found)}"
    assert {100, 120} <= family_targets(family)  # the Blackwell variants are among the targets
