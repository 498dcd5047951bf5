"""The SkyPilot tasks under jobs/skypilot/: their `image_id` pinned from docker/images.lock.json.

A task names the image variant it runs in a comment on its `image_id` line, which keeps the placeholder
until that variant is released:

    image_id: docker:trm-stack  # trm-stack/image-variant: sm90

A task that accepts several GPUs lists them as `resources.any_of` candidates, each with its
`accelerators` and its own `image_id` line (the images are per SM), the accelerators line first.
`pin_tasks` rewrites only the value on each such line (`docker:<repository>@sha256:…`), so the comments
and layout of the file stay as they are. `sky jobs launch --gpus … --image-id …` still overrides them.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path

from tools.images.imagelock import LockedImage
from trm.io import atomic_write_text

TASKS_DIR = Path("jobs") / "skypilot"
PLACEHOLDER = "docker:trm-stack"
_IMAGE_LINE = re.compile(
    r"^(?P<lead>[ \t]+image_id:[ \t]*)(?P<value>\S+)(?P<tail>[ \t]+#[ \t]*trm-stack/image-variant:[ \t]*"
    r"(?P<variant>[A-Za-z0-9_.-]+).*)$",
    re.M,
)


_ACCELERATORS = re.compile(
    r"^[ \t-]+accelerators:[ \t]*(?P<name>[A-Za-z0-9_.-]+?)(?::\d+)?[ \t]*(?:#.*)?$", re.M
)
# The compute capability (SM) of the GPUs our tasks name, under SkyPilot's accelerator names (`sky gpus
# list`): which image variant each candidate must run.
ACCELERATOR_SM = {
    "H100": 90, "H200": 90, "B200": 100, "RTXPRO6000": 120, "RTX5090": 120, "A100": 80, "A100-80GB": 80,
    "A6000": 86, "A40": 86, "A10": 86, "A10G": 86, "RTX3090": 86, "L4": 89, "L40S": 89, "RTX4090": 89,
}  # fmt: skip


def task_variants(text: str) -> list[str]:
    """The image variants a task's `image_id` lines name, in order ([]: the task pins no trm image)."""
    return [match["variant"] for match in _IMAGE_LINE.finditer(text)]


def task_candidates(text: str) -> list[tuple[str | None, str]]:
    """(accelerator, image variant) of each `image_id` line: the accelerator named last above it (None
    when there is none)."""
    out = []
    for match in _IMAGE_LINE.finditer(text):
        above = list(_ACCELERATORS.finditer(text, 0, match.start()))
        out.append((above[-1]["name"] if above else None, match["variant"]))
    return out


def wanted_image_id(variant: str, images: dict[str, LockedImage]) -> str:
    """The `image_id` a task of `variant` carries: the pinned image, or the placeholder while unreleased."""
    return f"docker:{images[variant].pinned}" if variant in images else PLACEHOLDER


def pin_tasks(
    root: str | Path,
    images: dict[str, LockedImage],
    *,
    check: bool = False,
    variants: Collection[str] | None = None,
) -> list[Path]:
    """Write each task's `image_id` for `images` (limited to `variants` when given); returns the tasks that
    changed (with `check=True` nothing is written and these are the stale ones)."""
    changed = []
    for path in sorted((Path(root) / TASKS_DIR).glob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        new = _IMAGE_LINE.sub(
            lambda m: (
                m.group(0)
                if variants is not None and m["variant"] not in variants
                else f"{m['lead']}{wanted_image_id(m['variant'], images)}{m['tail']}"
            ),
            text,
        )
        if new == text:
            continue
        changed.append(path)
        if not check:
            atomic_write_text(path, new)
    return changed


def check_task_families(root: str | Path) -> list[str]:
    """Each task runs a variant of the image family with the oldest driver floor: SkyPilot chooses the VM
    image and its NVIDIA driver, so the task must not need a newer one (docker/images.toml [families])."""
    from trm.images import catalog
    from trm.images.families import catalog_families

    oldest = min(catalog_families(), key=lambda f: f.min_driver)
    family_of = {entry[0]: entry[-1] for entry in catalog.VARIANTS}
    problems = []
    for path in sorted((Path(root) / TASKS_DIR).glob("*.yaml")):
        for variant in dict.fromkeys(task_variants(path.read_text(encoding="utf-8"))):
            if family_of.get(variant) != oldest.name:
                problems.append(
                    f"{path.relative_to(root)}: variant {variant} needs a newer driver than SkyPilot's VM "
                    f"images promise; use a {oldest.name} variant (CUDA {oldest.cuda}, drivers "
                    f"R{oldest.min_driver}+), e.g. {next(n for n, f in family_of.items() if f == oldest.name)}"
                )
    return problems


def check_task_candidates(root: str | Path) -> list[str]:
    """Each candidate of a task runs the image variant of its GPU: the variant's build covers the compute
    capability of the accelerator named above its `image_id` line (an sm90 image on a B200 fails at the
    first kernel: 'no kernel image is available')."""
    from trm.images import catalog, compat

    archs_of = {entry[0]: entry[4] for entry in catalog.VARIANTS}
    problems = []
    for path in sorted((Path(root) / TASKS_DIR).glob("*.yaml")):
        where = path.relative_to(root)
        for accelerator, variant in task_candidates(path.read_text(encoding="utf-8")):
            if accelerator not in ACCELERATOR_SM:
                problems.append(
                    f"{where}: the image_id of variant {variant} has no known accelerator above it "
                    f"({accelerator or 'none'}); put `accelerators: <GPU>:<count>` first in each candidate, a "
                    f"GPU of tools/jobs/sky.py ACCELERATOR_SM ({', '.join(ACCELERATOR_SM)})"
                )
                continue
            sm = ACCELERATOR_SM[accelerator]
            built = compat.parse_sm_list(" ".join(archs_of.get(variant, ())))
            if not compat.sm_covered(sm, built):
                problems.append(
                    f"{where}: candidate {accelerator} (sm_{sm}) runs variant {variant}, which has no kernels for "
                    f"it; use a variant for sm_{sm} (docs/images.md)"
                )
    return problems
