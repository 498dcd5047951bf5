"""Kubernetes jobs: render the kustomize overlays, validate them offline, pin images from the lock file.

Rendering uses kustomize as built into kubectl (`kubectl kustomize DIR`) or a standalone `kustomize
build DIR`; `$KUSTOMIZE` may name either binary. The kustomizations use the dialect that both the old
kustomize inside Debian's kubectl 1.20 and current kustomize 5 understand (`bases`,
`patchesStrategicMerge`), so CI can install it from Debian and users can apply with any kubectl.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import subprocess
from collections.abc import Collection, Mapping
from pathlib import Path

import yaml

from tools.images.imagelock import LockedImage, read_lock
from tools.jobs import policy
from trm.errors import TRMError

JOBS_DIR = Path("jobs")
KUBERNETES_VERSION = "1.33"  # the API the manifests are validated against (kubernetes-validate schemas)
IMAGE_NAME = "trm-stack"  # the placeholder image name in jobs/base, replaced by each overlay's `images:`
VARIANT_ANNOTATION = policy.VARIANT_ANNOTATION


def overlay_dirs(root: str | Path = ".") -> list[Path]:
    """Every directory under jobs/ with a kustomization that renders something deployable."""
    jobs = Path(root) / JOBS_DIR
    dirs = sorted(p.parent for p in jobs.glob("*/*/kustomization.yaml"))
    if not dirs:
        raise TRMError(f"no kustomizations under {jobs}/*/*/; run from the repository root.")
    return dirs


@functools.cache
def kustomize_command() -> list[str]:
    """The command prefix that renders a kustomization directory."""
    candidates = [os.environ["KUSTOMIZE"]] if os.environ.get("KUSTOMIZE") else ["kustomize", "kubectl"]
    for name in candidates:
        path = shutil.which(name)
        if path is None:
            continue
        if Path(path).name.startswith("kustomize"):
            return [path, "build"]
        proc = subprocess.run([path, "kustomize", "--help"], capture_output=True, text=True, check=False)
        if proc.returncode == 0:
            return [path, "kustomize"]
    raise TRMError(
        "neither `kustomize` nor a `kubectl` with `kubectl kustomize` is on PATH; install one "
        "(Debian: `apt-get install kubernetes-client`) or point $KUSTOMIZE at it."
    )


def render(directory: str | Path) -> list[dict]:
    """The objects a kustomization renders to, in kustomize's order."""
    proc = subprocess.run(
        [*kustomize_command(), str(directory)], capture_output=True, text=True, check=False, timeout=120
    )
    if proc.returncode != 0:
        raise TRMError(f"rendering {directory} failed:\n{proc.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def validate(objects: list[dict], version: str = KUBERNETES_VERSION) -> list[str]:
    """Schema errors of rendered objects (strict: unknown fields are errors), offline."""
    import kubernetes_validate

    problems = []
    for obj in objects:
        name = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            path = ".".join(str(p) for p in err.path)
            problems.append(f"{name}: {path}: {err.message}")
        except kubernetes_validate.SchemaNotFoundError as err:
            problems.append(f"{name}: {err.message}")
    return problems


def pod_specs(objects: list[dict]) -> list[tuple[str, dict]]:
    """(object name, pod spec) of every workload object."""
    specs = []
    for obj in objects:
        spec = obj.get("spec", {})
        template = spec.get("template", spec.get("jobTemplate", {}).get("spec", {}).get("template"))
        if isinstance(template, dict) and "spec" in template:
            specs.append((f"{obj['kind']}/{obj['metadata']['name']}", template["spec"]))
    return specs


def containers(objects: list[dict]) -> list[tuple[str, dict]]:
    """(object name, container) of every container and init container."""
    found = []
    for name, spec in pod_specs(objects):
        for container in spec.get("initContainers", []) + spec.get("containers", []):
            found.append((name, container))
    return found


def _read_kustomization(directory: Path) -> dict:
    path = directory / "kustomization.yaml"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as err:
        raise TRMError(f"{path}: cannot read it ({err}).") from err
    return data


def overlay_variant(directory: Path) -> str | None:
    """The image variant an overlay deploys (its `trm-stack/image-variant` annotation)."""
    return _read_kustomization(directory).get("commonAnnotations", {}).get(VARIANT_ANNOTATION)


def desired_images(directory: Path, images: dict[str, LockedImage]) -> list[dict] | None:
    """The `images:` entry an overlay must carry for the lock file, or None if it deploys no image."""
    variant = overlay_variant(directory)
    if variant is None:
        return None
    if variant not in images:
        raise TRMError(
            f"{directory}/kustomization.yaml: variant {variant!r} has no pushed image in the lock file "
            f"(have: {', '.join(images)}); push it (`make image push`) or change {VARIANT_ANNOTATION}."
        )
    image = images[variant]
    return [{"name": IMAGE_NAME, "newName": image.repository, "digest": image.digest}]


PIN_PATCH = "image-pin.yaml"


def pin_patch(image: LockedImage) -> str:
    """The overlay patch that tells the trainer its own image digest (recorded in handoff.json)."""
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "trm-train"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "trainer", "env": [{"name": "TRM_IMAGE_DIGEST", "value": image.digest}]}
                    ]
                }
            }
        },
    }
    header = f"# Written by `python -m tools.jobs pin` from docker/images.lock.json ({image.tagged}); do not edit.\n"
    return header + yaml.safe_dump(job, sort_keys=False, default_flow_style=False)


def pin_images(
    root: str | Path = ".", *, check: bool = False, variants: Collection[str] | None = None
) -> list[Path]:
    """Write each overlay's `images:` (and its TRM_IMAGE_DIGEST patch) from docker/images.lock.json.

    Returns the overlays that changed; with `check=True` nothing is written and these are the stale ones.
    `variants` limits it to the overlays deploying those image variants (the others are left as they are).
    """
    from trm.io import atomic_write_text

    root = Path(root)
    images = read_lock(root)
    changed = []
    for directory in overlay_dirs(root):
        if variants is not None and overlay_variant(directory) not in variants:
            continue
        wanted = desired_images(directory, images)
        if wanted is None:
            continue
        image = images[overlay_variant(directory)]
        data = _read_kustomization(directory)
        patches = list(data.get("patchesStrategicMerge", []))
        patch_path = directory / PIN_PATCH
        current_patch = patch_path.read_text(encoding="utf-8") if patch_path.exists() else None
        if data.get("images") == wanted and PIN_PATCH in patches and current_patch == pin_patch(image):
            continue
        changed.append(directory)
        if check:
            continue
        if PIN_PATCH not in patches:
            data["patchesStrategicMerge"] = [*patches, PIN_PATCH]
        data["images"] = wanted
        atomic_write_text(patch_path, pin_patch(image))
        text = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=200)
        atomic_write_text(directory / "kustomization.yaml", text)
    return changed


def check_jobs(
    root: str | Path,
    cli: argparse.ArgumentParser,
    *,
    version: str = KUBERNETES_VERSION,
    extra: list[tuple[Path, list[dict]]] | None = None,
    tasks: Mapping[str, argparse.ArgumentParser] | None = None,
) -> list[str]:
    """Render every overlay and report schema errors, stale image pins and policy violations (the
    `python -m trm` commands of the pods against `cli`, the full parser of `trm.commands`); `extra`:
    objects rendered otherwise from an overlay (the experiment Job), checked the same way."""
    from tools.shell.refs import RefChecker

    root = Path(root)
    images = read_lock(root)
    refs = RefChecker(root, cli, tasks)
    rendered = {d: render(d) for d in overlay_dirs(root)}
    rwx = policy.rwx_claim_names(rendered)
    from tools.jobs.sky import check_task_candidates, check_task_families, pin_tasks

    problems = [
        f"{d}: `images:` is stale; run `python -m tools.jobs pin`" for d in pin_images(root, check=True)
    ]
    problems += [
        f"{p}: `image_id` is stale; run `python -m tools.jobs pin`"
        for p in pin_tasks(root, images, check=True)
    ]
    problems += check_task_families(root)
    problems += check_task_candidates(root)
    for directory, objects in [*rendered.items(), *(extra or [])]:
        rel = directory.relative_to(root)
        problems += [f"{rel}: {p}" for p in validate(objects, version)]
        variant = overlay_variant(directory)
        image = images.get(variant) if variant else None
        problems += [f"{rel}: {p}" for p in policy.check_objects(objects, image, refs, rwx)]
        for obj in objects:
            if obj.get("kind") == "Job":
                pod = obj["spec"]["template"]["spec"]
                problems += [
                    f"{rel}: {p}" for p in policy.check_driver_affinity(obj["metadata"]["name"], pod, variant)
                ]
    return problems
