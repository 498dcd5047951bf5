"""The one decision that picks an image family (CUDA release, torch, optimizer backend) from a host's driver.

The families live in `docker/images.toml` ([families]); `python -m tools.images docs` copies them into
trm/images/catalog.py so that code without the checkout's images.toml (preflight inside an image, the
host bootstrap) reads the same table. Standard library only: scripts/bootstrap_host.sh imports it before
anything is installed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trm.errors import TRMError

# Vast.ai filters offers by the CUDA version the driver supports; the first CUDA release of each driver
# branch we name in an offer filter (CUDA release notes, "CUDA Toolkit and Corresponding Driver Versions").
_OFFER_CUDA_FOR_DRIVER = {525: "12.0", 580: "13.0"}


@dataclass(frozen=True)
class Family:
    """A GPU image family: one lock group, one torch, one CUDA release, one oldest driver branch."""

    name: str  # the lock group, e.g. "cu128"
    cuda: str
    torch: str
    min_driver: int  # driver branch (major version), e.g. 525
    optimizer_backend: str  # "ext" or "torch"

    @property
    def offer_cuda(self) -> str:
        """The `cuda_vers>=` of a Vast.ai offer filter that selects drivers of this family."""
        return _OFFER_CUDA_FOR_DRIVER.get(self.min_driver, f"{self.cuda.split('.')[0]}.0")

    @property
    def node_affinity(self) -> dict[str, object]:
        """The Kubernetes node-selector requirement on GPU feature discovery's driver label."""
        return driver_affinity(self.min_driver)


def driver_affinity(branch: int) -> dict[str, object]:
    """The Kubernetes node-selector requirement for drivers of `branch` or newer (the label is the branch)."""
    return {"key": DRIVER_LABEL, "operator": "Gt", "values": [str(branch - 1)]}


DRIVER_LABEL = "nvidia.com/cuda.driver.major"


def family_from_tuple(entry: tuple) -> Family:
    """A catalog.FAMILIES entry as a Family."""
    name, cuda, torch, min_driver, backend = entry
    return Family(name, cuda, torch, int(min_driver), backend)


def driver_major(driver_version: str | int) -> int:
    """550 for "550.54.15" (and for 550); TRMError when the text holds no version."""
    if isinstance(driver_version, int):
        return driver_version
    match = re.match(r"\s*(\d+)", str(driver_version))
    if not match:
        raise TRMError(
            f"cannot read an NVIDIA driver version from {driver_version!r}: expected e.g. 550.54.15 "
            "(nvidia-smi --query-gpu=driver_version --format=csv,noheader)"
        )
    return int(match.group(1))


def family_for_driver(driver_version: str | int, families: tuple[Family, ...]) -> Family:
    """The newest family the driver runs (the first in `families`, newest first, whose min_driver it
    meets); TRMError with the fix when the driver is older than every family."""
    major = driver_major(driver_version)
    for family in sorted(families, key=lambda f: f.min_driver, reverse=True):
        if major >= family.min_driver:
            return family
    oldest = min(families, key=lambda f: f.min_driver)
    raise TRMError(
        f"NVIDIA driver {driver_version} (branch R{major}) is older than every trm image: the oldest, CUDA "
        f"{oldest.cuda} (torch {oldest.torch}), needs driver R{oldest.min_driver} or newer. Rent a host with "
        f"driver >= {oldest.min_driver} (Vast.ai: cuda_vers>={oldest.offer_cuda}; Kubernetes: nodes labelled "
        f"{DRIVER_LABEL} >= {oldest.min_driver}) or have the driver upgraded (runbooks/v1/01-provision.md)"
    )


def catalog_families(catalog_families: tuple = ()) -> tuple[Family, ...]:
    """The families of trm/images/catalog.py (generated from docker/images.toml), newest first."""
    if not catalog_families:
        from trm.images import catalog

        catalog_families = catalog.FAMILIES
    return tuple(family_from_tuple(entry) for entry in catalog_families)


def variant_driver_floor(
    variant: str, catalog_variants: tuple = (), families: tuple = ()
) -> tuple[Family, int] | None:
    """(family, oldest driver branch) of an image variant: its family's min_driver, raised where its GPUs
    need a newer driver (the CUDA 12.8 Blackwell variants: R570). None for a variant not in the catalog."""
    if not catalog_variants:
        from trm.images import catalog

        catalog_variants = catalog.VARIANTS
    entry = next((e for e in catalog_variants if e[0] == variant), None)
    family = next((f for f in catalog_families(families) if entry and f.name == entry[-1]), None)
    if entry is None or family is None:
        return None
    own = int(str(entry[3]).split(".")[0]) if entry[3] else 0
    return family, max(family.min_driver, own)


def _driver_meets(driver_version: str | int, min_driver: str) -> bool:
    """Whether the host driver is at least `min_driver` ("570.26"); a bare branch (Kubernetes' driver-major
    label, e.g. 570) is compared by branch."""
    from trm.images import compat

    if not min_driver:
        return True
    if isinstance(driver_version, int) or "." not in str(driver_version).strip():
        return driver_major(driver_version) >= compat.version_tuple(min_driver)[0]
    return compat.version_tuple(str(driver_version)) >= compat.version_tuple(min_driver)


def _nearest(sms: set[int], entries: list[tuple[str, set[int], str]]) -> tuple[str, set[int], str]:
    """The variant built for the SMs closest to `sms` (same major release first)."""

    def distance(entry: tuple[str, set[int], str]) -> tuple[int, int]:
        built = entry[1]
        same_major = all(any(b // 10 == sm // 10 for b in built) for sm in sms)
        return (0 if same_major else 1, sum(min(abs(b - sm) for b in built) for sm in sms))

    return min(entries, key=distance)


def variant_for_host(
    sms: set[int], driver_version: str | int, catalog_variants: tuple = (), families: tuple = ()
) -> tuple[Family, str, str]:
    """(family, variant, tag) of the image for GPUs with compute capabilities `sms` (e.g. {90}) on this
    driver: the driver picks the family, the SMs its variant. TRMError with the fix when none fits: a
    driver older than the variant's GPUs need (Blackwell: R570), or GPUs no variant covers (one line naming
    the capability, the nearest variant and the torch-backend fallback)."""
    from trm.images import compat

    if not catalog_variants:
        from trm.images import catalog

        catalog_variants = catalog.VARIANTS
    family = family_for_driver(driver_version, catalog_families(families))
    covering, too_new, ours = [], [], []
    for name, _cuda, floor, min_driver, archs, tag, lock in catalog_variants:
        if lock != family.name:
            continue
        built = compat.parse_sm_list(" ".join(archs))
        ours.append((name, {sm for sm, _ptx in built}, tag))
        if all(compat.sm_covered(sm, built) for sm in sms):
            if not _driver_meets(driver_version, min_driver):
                too_new.append((name, min_driver, floor))
                continue
            # a build for exactly these SMs first (an sm_80 build also runs on sm_89, slower)
            exact = {sm for sm, _ptx in built} >= sms
            covering.append((not exact, name, tag))
    if covering:
        _, name, tag = min(covering, key=lambda entry: entry[0])
        return family, name, tag
    have = ", ".join(f"sm_{sm}" for sm in sorted(sms)) or "no GPU"
    if too_new:
        name, min_driver, floor = too_new[0]
        branch = min_driver.split(".")[0]
        raise TRMError(
            f"NVIDIA driver {driver_version} is too old for {have}: the {name} image needs driver >= {min_driver} "
            f"(R{branch}: its GPUs first appear in CUDA {floor}, whose driver that is); rent a host with driver "
            f"R{branch}+ or have the driver upgraded (runbooks/v1/01-provision.md)"
        )
    capability = ", ".join(f"{sm // 10}.{sm % 10}" for sm in sorted(sms))
    if not sms or not ours:
        raise TRMError(
            f"no {family.name} image variant covers {have} (docker/images.toml [variants.*] with lock = "
            f"{family.name!r}); add one with these archs, or run on GPUs an existing variant covers"
        )
    near, near_sms, near_tag = _nearest(sms, ours)
    archs = [f"{sm // 10}.{sm % 10}" for sm in sorted(sms)]
    raise TRMError(
        f"no {family.name} image variant covers compute capability {capability} ({have}): the nearest is "
        f"{near} ({near_tag}, built for {', '.join(f'sm_{sm}' for sm in sorted(near_sms))}), whose adam-atan2 "
        "kernels do not run here; fallback: trm's AdamATan2 (the torch backend, no per-GPU build) from a venv "
        "whose CUDA torch supports these GPUs (the trainer falls back to it when the extension has no kernel "
        f"for them, and its log, run.json and the handoff say so), or add a [variants.*] table with archs {archs} "
        "to docker/images.toml"
    )
