"""GPU variants built on this (GPU-less) machine through the devel and adam-atan2 stages.

Run by `nox -s docker_gpu`: needs the cu130 wheelhouse (~2.7 GB) and ~4-15 min of nvcc per SM on 2
cores. The adam-atan2 stage itself fails unless the wheel is 0.0.3, has the backend module, imports next
to the CUDA torch and `cuobjdump --list-elf` lists exactly the variant's SM; this test re-checks the
SASS list from outside and records the per-SM build time.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest

from tools.images.base import DEVEL, ensure_local_base
from tools.images.driver import ImageDriver, connect
from tools.images.requirements import fill_wheelhouse
from tools.images.variants import load_config

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[3]
# Every variant that compiles the extension (sm90, sm80, sm89, sm100, sm120), or TRM_GPU_VARIANTS.
GPU_VARIANTS = os.environ.get("TRM_GPU_VARIANTS", "").split() or [
    v.name for v in load_config(ROOT / "docker/images.toml").variants.values() if v.optimizer_backend == "ext"
]


@pytest.fixture(scope="module")
def driver():
    client = connect()
    ensure_local_base(client, DEVEL)
    config = load_config(ROOT / "docker/images.toml")
    fill_wheelhouse(config, config.select(GPU_VARIANTS), ROOT)
    return ImageDriver(client, config, ROOT, out=sys.stdout)


@pytest.mark.parametrize("name", GPU_VARIANTS)
def test_adam_atan2_stage_builds_exactly_the_variants_sass(driver, name):
    variant = driver.config.variants[name]
    start = time.monotonic()
    built = driver.build(
        variant, target="adam-atan2", build_base=DEVEL.tag, runtime_base=DEVEL.tag, max_jobs=1
    )
    print(
        f"\nADAM-ATAN2 {name}: stage built in {time.monotonic() - start:.0f} s (image {built.image_id[:19]})"
    )
    home = "$(python3 /build/buildtools.py cuda-home /opt/venv)"
    script = f"ls /dist/adam && cd /tmp && python3 -m zipfile -e /dist/adam/*.whl w && {home}/bin/cuobjdump --list-elf w/*.so"
    listing = driver.client.containers.run(
        built.image_id, ["sh", "-c", script], network_mode="none", remove=True
    ).decode()
    print(listing)
    assert re.search(r"^adam_atan2-0\.0\.3-cp311-cp311-linux_x86_64\.whl$", listing, re.MULTILINE)
    assert set(re.findall(r"sm_\d+", listing)) == set(variant.sm_list)
