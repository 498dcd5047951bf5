"""`make release` (`python -m tools.release`): from a clean checkout to pushed images and pinned runbooks and jobs.

One run, for the selected variants:

1. refuses a missing or malformed `REGISTRY` and a checkout with uncommitted changes (the image records
   the commit it was built from, so that commit must exist);
2. builds each variant (wheelhouse first), pushes it, and reads its digest back from the registry (what a
   host pulling the tag gets; it must equal the digest the push reported);
3. writes those digests into `docker/images.lock.json` in one atomic write;
4. re-stamps the runbooks of those variants (`runbooks stamp`: header `image`/`image_digest`, version,
   CHANGELOG entry) and pins the Kubernetes overlays deploying them (`jobs pin`: `images:` with the digest,
   the `TRM_IMAGE_DIGEST` patch) and writes the `image_id` of the SkyPilot tasks of those variants
   (tools.jobs.sky); runbooks, overlays and tasks of variants never released keep `unreleased` and the
   placeholder;
5. prints one `variant reference` line per image.

The same steps split over machines (the release workflow: one variant per runner, since one CUDA image with
its wheelhouse does not fit one runner's disk beside another): `--push-only --pushed-out FILE` runs steps 1-2
and records the pushed images in FILE; `--pin-from FILE …` reads each image back from the registry again
and runs steps 3-5 for all of them at once.

Idempotent: at the same commit the build is a cache hit, the push uploads nothing new and the registry
returns the same digest, so the lock entry, the runbook headers and the overlays come out byte-identical
and no runbook is bumped twice.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TextIO

from tools.images import lockfile
from tools.images.driver import ImageDriver, PushedImage, parse_registry
from tools.images.imagelock import read_lock
from tools.images.requirements import fill_wheelhouse
from tools.images.variants import Variant
from tools.jobs import k8s
from tools.jobs.sky import pin_tasks
from tools.runbooks.check import stamp
from trm.errors import TRMError
from trm.io import atomic_write_json

STAMP_MESSAGE = (
    "image pinned by `make release` (procedure unchanged; re-run its gpu blocks on this image to validate it)"
)


class Publisher(Protocol):
    """What a release needs from an engine and a registry (tools.images.driver.ImageDriver, or a fake)."""

    def build(self, variant: Variant) -> Any: ...

    def push(self, variant: Variant, registry: str) -> PushedImage: ...

    def registry_digest(self, reference: str) -> str: ...


class EnginePublisher:
    """The real publisher: the wheelhouse and build of `make image`, the push of `make push` (without its
    own lock write), the registry read-back; `overrides` are the base-image overrides of local builds."""

    def __init__(self, driver: ImageDriver, **overrides: Any) -> None:
        self.driver = driver
        self.overrides = overrides

    def build(self, variant: Variant) -> Any:
        fill_wheelhouse(self.driver.config, [variant], self.driver.root)
        return self.driver.build(variant, **self.overrides)

    def push(self, variant: Variant, registry: str) -> PushedImage:
        return self.driver.push(variant, registry, lock_path=None, **self.overrides)

    def registry_digest(self, reference: str) -> str:
        return self.driver.registry_digest(reference)


@dataclass(frozen=True)
class Outcome:
    """What one release did."""

    images: tuple[PushedImage, ...]
    bumped: tuple[str, ...]  # runbooks re-stamped, `name vN`
    pinned: tuple[Path, ...]  # overlays whose kustomization changed, SkyPilot tasks whose image_id changed


def uncommitted(root: Path) -> list[str]:
    """`git status --porcelain` lines of `root` (untracked files too: they would enter the image)."""
    try:
        proc = subprocess.run(
            ["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, timeout=60
        )
    except OSError as err:
        raise TRMError(f"cannot run git in {root} ({err}): a release is built from a git checkout") from None
    if proc.returncode != 0:
        raise TRMError(
            f"{root} is not a git checkout ({proc.stderr.strip()}): a release records the commit it was "
            "built from; run it in a clone of the repository"
        )
    return [line for line in proc.stdout.splitlines() if line.strip()]


def require_clean(root: Path) -> None:
    """Refuse a checkout whose files differ from its commit."""
    changes = uncommitted(root)
    if changes:
        shown = "\n  ".join(changes[:10]) + ("\n  …" if len(changes) > 10 else "")
        raise TRMError(
            f"{root} has {len(changes)} uncommitted change(s):\n  {shown}\nthe images record the commit they "
            "are built from: commit (or stash) them first, then run the release again. After a release, "
            "commit what it wrote (docker/images.lock.json, runbooks/, jobs/) before the next one."
        )


def _read_back(publisher: Publisher, pushed: PushedImage) -> None:
    """Every pushed tag must resolve, in the registry, to the digest the push reported."""
    for tag in pushed.tags:
        reference = f"{pushed.repository}:{tag}"
        remote = publisher.registry_digest(reference)
        if remote != pushed.digest:
            raise TRMError(
                f"the registry resolves {reference} to {remote}, but the push reported {pushed.digest}: "
                "another push to that tag raced this one, or the registry rewrote the manifest; nothing "
                "was pinned, run the release again"
            )


def push_variants(
    root: Path, registry: str, variants: Iterable[Variant], publisher: Publisher
) -> list[PushedImage]:
    """Steps 1-2: refuse a bad registry or a dirty checkout, then build, push and read back each variant."""
    variants = list(variants)
    if not variants:
        raise TRMError("no variants selected: name them, e.g. VARIANTS=cpu (see docker/images.toml)")
    parse_registry(registry)
    require_clean(root)
    pushed: list[PushedImage] = []
    for variant in variants:
        publisher.build(variant)
        image = publisher.push(variant, registry)
        _read_back(publisher, image)
        pushed.append(image)
    return pushed


def pin(root: Path, pushed: list[PushedImage], *, out: TextIO = sys.stdout) -> Outcome:
    """Steps 3-5 for images already pushed and read back: the lock, the runbook stamps, the pins, the lines."""
    lock_path = root / lockfile.LOCK_PATH
    lockfile.record_pushes(lock_path, {image.variant: image.entry for image in pushed})
    bumped = stamp(root, STAMP_MESSAGE)
    images = read_lock(root)
    pinned = k8s.pin_images(root, variants=set(images))
    pinned += pin_tasks(root, images, variants=set(images))
    for image in pushed:
        print(f"{image.variant}\t{image.reference}", file=out)
    for name in bumped:
        print(f"re-stamped runbook {name}", file=out)
    for directory in pinned:
        print(f"pinned {directory.relative_to(root)}", file=out)
    print(f"released {len(pushed)} image(s); commit docker/images.lock.json, runbooks/ and jobs/", file=out)
    return Outcome(tuple(pushed), tuple(bumped), tuple(pinned))


def release(
    root: str | Path,
    registry: str,
    variants: Iterable[Variant],
    publisher: Publisher,
    *,
    out: TextIO = sys.stdout,
) -> Outcome:
    """Build, push, read back, pin and re-stamp `variants` (see the module docstring)."""
    root = Path(root)
    return pin(root, push_variants(root, registry, variants, publisher), out=out)


# --- a release split over machines: one variant per machine pushes, one machine pins them all --------------
PUSHED_FORMAT = 1


def write_pushed(path: Path, pushed: list[PushedImage]) -> None:
    """Record what `push_variants` pushed (and read back) in `path`, for the pinning step (`--pin-from`)."""
    images = [
        {
            "variant": i.variant,
            "repository": i.repository,
            "digest": i.digest,
            "tags": i.tags,
            "entry": i.entry,
        }
        for i in pushed
    ]
    atomic_write_json(path, {"format": PUSHED_FORMAT, "images": images})


def read_pushed(paths: Iterable[Path], publisher: Publisher) -> list[PushedImage]:
    """The images recorded by `write_pushed`, each read back from the registry again before it is pinned.

    A file that is not such a record, or two records of one variant, is refused: the lock gets exactly what
    the registry serves now, once per variant."""
    pushed: dict[str, PushedImage] = {}
    for path in paths:
        try:
            data = json.loads(Path(path).read_text())
            if data.get("format") != PUSHED_FORMAT:
                raise ValueError(f"format {data.get('format')!r}, expected {PUSHED_FORMAT}")
            images = [
                PushedImage(i["variant"], i["repository"], i["digest"], list(i["tags"]), dict(i["entry"]))
                for i in data["images"]
            ]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise TRMError(
                f"{path}: not a record of pushed images ({err}); pass the files that "
                "`python -m tools.release --push-only --pushed-out FILE` wrote"
            ) from None
        for image in images:
            if image.variant in pushed:
                raise TRMError(
                    f"{path}: variant {image.variant!r} is recorded twice; pass one record per variant"
                )
            _read_back(publisher, image)
            pushed[image.variant] = image
    if not pushed:
        raise TRMError("no pushed images to pin: pass the records with --pin-from FILE [FILE …]")
    return list(pushed.values())
