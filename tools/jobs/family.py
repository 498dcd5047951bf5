"""`python -m tools.jobs family OVERLAY --nodes FILE [--write]`: the image an overlay can run on a cluster,
chosen from its GPU nodes' labels.

Every overlay requires `nvidia.com/cuda.driver.major` above its image family's floor (CUDA 13.0: R580+), so
on a pool whose drivers are older (many H100 pools run R570) its pods stay Pending. This reads the nodes
(`kubectl get nodes -o json`, a file or `-` for standard input), keeps those labelled with one of the
overlay's GPU products (`nvidia.com/gpu.product`, the overlay's required affinity), and picks the newest
image family that every one of them runs (`trm.images.families`: the same decision the GPU-host bootstrap
makes from `nvidia-smi`), and the variant of that family covering the overlay's SMs. `--write` puts it into
the overlay: the `trm-stack/image-variant` annotation and the driver floor of its affinity, together (what
`jobs check` compares); `python -m tools.jobs pin` then pins that variant's pushed digest.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from tools.jobs.k8s import VARIANT_ANNOTATION, overlay_variant
from tools.jobs.policy import GPU_PRODUCT_LABEL
from trm.errors import TRMError
from trm.images.families import DRIVER_LABEL, driver_major, variant_driver_floor, variant_for_host


@dataclass(frozen=True)
class Choice:
    """The image an overlay gets on these nodes, and what it was chosen from."""

    overlay: Path
    variant: str
    family: str
    driver_floor: int  # the variant's minimum driver branch (its family's, or newer for its GPUs)
    drivers: dict[str, int]  # matching node -> driver branch
    current: str | None  # the overlay's variant before

    def summary(self) -> str:
        counts: dict[int, int] = {}
        for major in self.drivers.values():
            counts[major] = counts.get(major, 0) + 1
        seen = ", ".join(f"R{major} on {n}" for major, n in sorted(counts.items()))
        change = "unchanged" if self.variant == self.current else f"was {self.current}"
        return (
            f"{self.overlay}: {len(self.drivers)} matching node(s) ({seen}) -> family {self.family} "
            f"(driver R{self.driver_floor}+), variant {self.variant} ({change})"
        )


def overlay_products(overlay: Path) -> list[str]:
    """The GPU product label values the overlay's required node affinity accepts."""
    patch = yaml.safe_load((overlay / "job-patch.yaml").read_text())
    affinity = patch["spec"]["template"]["spec"].get("affinity", {}).get("nodeAffinity", {})
    terms = affinity.get("requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", [])
    products = [
        value
        for term in terms
        for expr in term.get("matchExpressions", [])
        if expr.get("key") == GPU_PRODUCT_LABEL and expr.get("operator") == "In"
        for value in expr.get("values", [])
    ]
    if not products:
        raise TRMError(
            f"{overlay}/job-patch.yaml: no required {GPU_PRODUCT_LABEL} affinity to match nodes by"
        )
    return products


def read_nodes(source: str) -> list[dict]:
    """The items of `kubectl get nodes -o json` from a file, or standard input for `-`."""
    where = "standard input" if source == "-" else source
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text()
        items = json.loads(text)["items"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise TRMError(
            f"{where}: not the output of `kubectl get nodes -o json` ({err}); run "
            "`kubectl get nodes -o json > nodes.json` and pass that file"
        ) from None
    return [item for item in items if isinstance(item, dict)]


def node_drivers(nodes: list[dict], products: list[str]) -> dict[str, int]:
    """Driver branch of each node labelled with one of `products`; a node without a readable driver label
    is an error naming it (GPU feature discovery labels both)."""
    drivers: dict[str, int] = {}
    for node in nodes:
        meta = node.get("metadata", {})
        labels = meta.get("labels", {}) or {}
        if labels.get(GPU_PRODUCT_LABEL) not in products:
            continue
        name = meta.get("name", "?")
        try:
            drivers[name] = driver_major(labels[DRIVER_LABEL])
        except (KeyError, ValueError, TRMError):
            raise TRMError(
                f"node {name} ({labels.get(GPU_PRODUCT_LABEL)}) has no usable {DRIVER_LABEL} label "
                f"({labels.get(DRIVER_LABEL)!r}): GPU feature discovery sets it (NVIDIA GPU Operator or "
                "node-feature-discovery with the GPU plugin); install it, or label the node by hand"
            ) from None
    return drivers


def _sms_of(variant: str) -> set[int]:
    from trm.images import catalog, compat

    for name, _cuda, _floor, _min, archs, _tag, _lock in catalog.VARIANTS:
        if name == variant:
            return {sm for sm, _ptx in compat.parse_sm_list(" ".join(archs))}
    raise TRMError(f"unknown image variant {variant!r} (docker/images.toml)")


def choose(overlay: Path, nodes: list[dict]) -> Choice:
    """The variant of the newest family every matching node's driver runs, covering the overlay's SMs."""
    products = overlay_products(overlay)
    drivers = node_drivers(nodes, products)
    if not drivers:
        raise TRMError(
            f"no node of the cluster is labelled {GPU_PRODUCT_LABEL} in {products} (the products "
            f"{overlay}'s affinity requires): its pods would stay Pending. Check the labels with "
            f"`kubectl get nodes -L {GPU_PRODUCT_LABEL} -L {DRIVER_LABEL}`, or use the overlay of the GPUs "
            "you have (runbooks/v1/08-troubleshooting.md, Pending pods)"
        )
    current = overlay_variant(overlay)
    if current is None:
        raise TRMError(f"{overlay}/kustomization.yaml has no {VARIANT_ANNOTATION} annotation")
    oldest = min(drivers.values())
    # raises with the fix when the oldest driver is older than every family, or no variant covers the SMs
    family, variant, _tag = variant_for_host(_sms_of(current), oldest)
    floor = variant_driver_floor(variant)
    return Choice(overlay, variant, family.name, floor[1] if floor else family.min_driver, drivers, current)


_FLOOR = re.compile(r"(- key: " + re.escape(DRIVER_LABEL) + r"\n\s+operator: Gt\n\s+values: \[\")(\d+)(\"\])")
_ANNOTATION = re.compile(r"^(\s*" + re.escape(VARIANT_ANNOTATION) + r":\s*)(\S+)\s*$", re.M)


def write(choice: Choice) -> list[Path]:
    """Put the chosen variant and its driver floor into the overlay (text edits: comments stay)."""
    from trm.io import atomic_write_text

    patch = choice.overlay / "job-patch.yaml"
    kustomization = choice.overlay / "kustomization.yaml"
    patch_text, kustomization_text = patch.read_text(), kustomization.read_text()
    new_patch, n = _FLOOR.subn(lambda m: f"{m.group(1)}{choice.driver_floor - 1}{m.group(3)}", patch_text)
    if n == 0:
        raise TRMError(f"{patch}: no `{DRIVER_LABEL}` Gt requirement to update; add the one jobs/base has")
    new_kustomization, n = _ANNOTATION.subn(lambda m: f"{m.group(1)}{choice.variant}", kustomization_text)
    if n != 1:
        raise TRMError(f"{kustomization}: expected one {VARIANT_ANNOTATION} annotation, found {n}")
    changed = []
    for path, old, new in (
        (patch, patch_text, new_patch),
        (kustomization, kustomization_text, new_kustomization),
    ):
        if new != old:
            atomic_write_text(path, new)
            changed.append(path)
    return changed
