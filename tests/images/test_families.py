"""The one decision from a host's NVIDIA driver to an image family and variant (trm.images.families), and
every place that uses it: the generated catalog, `python -m tools.images ref --driver`, the launch plan."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import fake_smi_env
from tools.images.variants import load_config
from trm.errors import TRMError
from trm.images import catalog
from trm.images.families import catalog_families, driver_major, family_for_driver, variant_for_host

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = catalog_families()


@pytest.mark.parametrize(
    ("driver", "family"),
    [("580.95.05", "cu130"), ("590.1", "cu130"), ("575.57.08", "cu128"), ("550.127.05", "cu128"),
     ("535.104.05", "cu128"), ("525.60.13", "cu128"), (580, "cu130"), (525, "cu128")],
)  # fmt: skip
def test_driver_branch_picks_the_family(driver, family):
    assert family_for_driver(driver, FAMILIES).name == family


@pytest.mark.parametrize("driver", ["524.99", "470.256.02", 450])
def test_driver_older_than_every_family_gets_one_error_with_the_fix(driver):
    with pytest.raises(
        TRMError,
        match=r"older than every trm image.*R525 or newer.*cuda_vers>=12.0.*cuda.driver.major >= 525",
    ):
        family_for_driver(driver, FAMILIES)


def test_unreadable_driver_version_names_the_query():
    with pytest.raises(
        TRMError, match=r"cannot read an NVIDIA driver version from 'N/A'.*--query-gpu=driver_version"
    ):
        driver_major("N/A")


def test_catalog_families_are_images_toml_families():
    """The generated catalog (read inside images and by the bootstrap) holds the same table, newest first."""
    config = load_config(ROOT / "docker/images.toml")
    assert set(FAMILIES) == set(config.families.values())
    assert [f.min_driver for f in FAMILIES] == sorted((f.min_driver for f in FAMILIES), reverse=True)
    assert {(f.name, f.cuda, f.torch) for f in FAMILIES} == {
        ("cu130", "13.0", "2.13.0"),
        ("cu128", "12.8", "2.10.0"),
    }


@pytest.mark.parametrize(
    ("sms", "driver", "variant"),
    [({90}, "550.127.05", "sm90-cu128"), ({90}, "580.95.05", "sm90"), ({89}, "570.124.06", "sm89-cu128"),
     ({80}, "535.104.05", "sm80-cu128"), ({89}, "580.95.05", "sm89")],
)  # fmt: skip
def test_variant_for_host_prefers_the_exact_build_of_the_family(sms, driver, variant):
    family, name, tag = variant_for_host(sms, driver)
    assert name == variant and tag.startswith("trm:") and family.name in tag


def test_no_variant_for_mixed_gpus_names_the_fix():
    with pytest.raises(
        TRMError, match=r"no cu128 image variant covers compute capability 8.0, 9.0 \(sm_80, sm_90\)"
    ):
        variant_for_host({80, 90}, "550.127.05")


@pytest.mark.parametrize(
    ("sms", "driver", "variant"),
    [({100}, "580.95.05", "sm100"), ({100}, "570.124.06", "sm100-cu128"), ({120}, "590.44.01", "sm120"),
     ({120}, "575.57.08", "sm120-cu128"), ({100}, 570, "sm100-cu128"),
     # B300 (10.3) and GB10 (12.1): a cubin of X.0 runs on X.y
     ({103}, "580.95.05", "sm100"), ({121}, "580.95.05", "sm120"),
     # sm_86 (A6000, A40, A10, RTX 3090) runs the sm_80 build; L4 (sm_89) its own
     ({86}, "580.95.05", "sm80"), ({86}, "550.127.05", "sm80-cu128"), ({89}, "580.95.05", "sm89")],
)  # fmt: skip
def test_blackwell_and_sm86_hosts_get_their_variant(sms, driver, variant):
    family, name, _tag = variant_for_host(sms, driver)
    assert name == variant
    assert family.optimizer_backend == ("ext" if family.name == "cu130" else "torch")


@pytest.mark.parametrize("driver", ["565.57.01", "550.127.05", 565])
def test_blackwell_on_a_driver_older_than_r570_names_the_floor(driver):
    """The CUDA 12.8 family starts at R525, but Blackwell needs CUDA 12.8's own driver (570.26)."""
    with pytest.raises(
        TRMError, match=r"too old for sm_100: the sm100-cu128 image needs driver >= 570\.26 \(R570"
    ):
        variant_for_host({100}, driver)


@pytest.mark.parametrize(
    ("sms", "driver", "capability", "nearest"),
    [({75}, "580.95.05", "7.5", "sm80"), ({70}, "550.127.05", "7.0", "sm80-cu128"),
     ({110}, "580.95.05", "11.0", "sm100")],
)  # fmt: skip
def test_an_uncovered_capability_is_one_line_with_the_nearest_variant_and_the_fallback(
    sms, driver, capability, nearest
):
    with pytest.raises(TRMError) as err:
        variant_for_host(sms, driver)
    text = str(err.value)
    assert "\n" not in text
    assert f"compute capability {capability}" in text and f"the nearest is {nearest} (" in text
    assert "the torch backend" in text and f"archs ['{capability}']" in text


def test_catalog_variants_name_their_family():
    assert {entry[-1] for entry in catalog.VARIANTS} == {"cu130", "cu128"}


def _lock(tmp_path: Path) -> Path:
    digest = "sha256:" + "b" * 64
    images = {name: {"reference": f"r.example/trm@{digest}-{name}"} for name in ("sm90", "sm90-cu128")}
    path = tmp_path / "images.lock.json"
    path.write_text(json.dumps({"schema": 1, "images": images}))
    return path


@pytest.mark.parametrize(("driver", "variant"), [("550.127.05", "sm90-cu128"), ("580.95.05", "sm90")])
def test_image_ref_with_the_hosts_driver(tmp_path, driver, variant):
    proc = subprocess.run(
        [sys.executable, "-m", "tools.images", "ref", "sm90", "--driver", driver, "--lock-file", str(_lock(tmp_path))],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith(f"-{variant}") and f"-> variant {variant}" in proc.stderr


def test_image_ref_refuses_an_old_driver(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "tools.images", "ref", "sm90", "--driver", "470.256.02", "--lock-file", str(_lock(tmp_path))],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert (
        proc.returncode == 2
        and "older than every trm image" in proc.stderr
        and "Traceback" not in proc.stderr
    )


@pytest.mark.e2e  # tens of seconds: out of the default suite, run by make test-e2e
@pytest.mark.parametrize(
    ("shape", "line"),
    [("h100x4", "image         sm90-cu128 (trm:0.1.0-cu128-sm90: CUDA 12.8, torch 2.10.0, optimizer trm AdamATan2"),
     ("r580-h100x1", "image         sm90 (trm:0.1.0-cu130-sm90: CUDA 13.0, torch 2.13.0, optimizer adam-atan2")],
)  # fmt: skip
def test_laptop_rehearsal_plans_the_image_of_the_recorded_driver(tmp_path, shape, line):
    """`scripts/train_prod.sh --dry-run` with the recorded h100x4 (R550) plans the CUDA 12.8 image; before,
    the plan said nothing about the driver."""
    env = fake_smi_env(tmp_path, shape)
    env.update(PYTHON=sys.executable, WORKSPACE=str(tmp_path / "ws"), TASK="arc2")
    proc = subprocess.run(["bash", "scripts/train_prod.sh", "--dry-run"], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert line in proc.stdout


def test_laptop_rehearsal_refuses_a_driver_older_than_every_family(tmp_path):
    env = fake_smi_env(tmp_path, "r470-a100-40gx1")
    env.update(PYTHON=sys.executable, WORKSPACE=str(tmp_path / "ws"), TASK="arc2")
    proc = subprocess.run(["bash", "scripts/train_prod.sh", "--dry-run"], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert (
        proc.returncode == 2
        and "older than every trm image" in proc.stderr
        and "Traceback" not in proc.stderr
    )


def test_runbook_offer_filter_admits_every_family():
    """Runbook 01's Vast.ai search filters on the CUDA the driver supports: it must admit the oldest family's
    drivers (before: cuda_vers>=13.0, which hid every R535-R575 host the CUDA 12.8 images run on)."""
    import re

    text = (ROOT / "runbooks/v1/01-provision.md").read_text()
    filters = re.findall(r"vastai search offers '[^']*cuda_vers>=([\d.]+)", text)
    oldest = min(FAMILIES, key=lambda f: f.min_driver)
    assert filters and set(filters) == {oldest.offer_cuda} == {"12.0"}


def test_image_banner_names_the_optimizer_backend():
    from trm.images import entrypoint

    line = entrypoint.banner({"TRM_IMAGE_VARIANT": "sm90-cu128", "TRM_IMAGE_OPTIMIZER_BACKEND": "torch"})
    assert line.startswith("trm image sm90-cu128 |") and "| optimizer backend torch |" in line
