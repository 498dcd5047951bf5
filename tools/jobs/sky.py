"""The SkyPilot tasks under jobs/skypilot/: their `image_id` pinned from docker/images.lock.json.

A task names the image variant it runs in a comment on its `image_id` line, which keeps the placeholder
until that variant is released:

    image_id: docker:trm-stack  # trm-stack/image-variant: sm90

`pin_tasks` rewrites only the value on that line (`docker:<repository>@sha256:…`), so the comments and
layout of the file stay as they are. `sky jobs launch --image-id …` still overrides it.
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


def task_variant(text: str) -> str | None:
    """The image variant a task's `image_id` line names (None: the task pins no trm image)."""
    match = _IMAGE_LINE.search(text)
    return match["variant"] if match else None


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
        match = _IMAGE_LINE.search(text)
        if match is None or (variants is not None and match["variant"] not in variants):
            continue
        wanted = wanted_image_id(match["variant"], images)
        if match["value"] == wanted:
            continue
        changed.append(path)
        if not check:
            atomic_write_text(path, text[: match.start("value")] + wanted + text[match.end("value") :])
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
        variant = task_variant(path.read_text(encoding="utf-8"))
        if variant is not None and family_of.get(variant) != oldest.name:
            problems.append(
                f"{path.relative_to(root)}: variant {variant} needs a newer driver than SkyPilot's VM images "
                f"promise; use a {oldest.name} variant (CUDA {oldest.cuda}, drivers R{oldest.min_driver}+), "
                f"e.g. {next(n for n, f in family_of.items() if f == oldest.name)}"
            )
    return problems
