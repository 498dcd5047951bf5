"""Read the pushed-image lock file (`docker/images.lock.json`): one pinned digest per image variant."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from trm.errors import TRMError

LOCK_PATH = Path("docker") / "images.lock.json"
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_FIX = "run `make image push REGISTRY=…` to (re)write it, or check it out from main"


@dataclasses.dataclass(frozen=True)
class LockedImage:
    """One pushed image: where it lives and the digest it was pushed with."""

    variant: str
    repository: str  # registry/name without tag or digest
    tag: str
    digest: str  # sha256:<64 hex>

    @property
    def tagged(self) -> str:
        return f"{self.repository}:{self.tag}"

    @property
    def pinned(self) -> str:
        """The reference to deploy: repository@digest (the tag is only a label)."""
        return f"{self.repository}@{self.digest}"


def _split_ref(ref: str) -> tuple[str, str | None, str | None]:
    """`repo[:tag][@digest]` → (repo, tag, digest); a registry port is not mistaken for a tag."""
    digest = None
    if "@" in ref:
        ref, digest = ref.split("@", 1)
    tag = None
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        ref, tag = ref.rsplit(":", 1)
    return ref, tag, digest


def _entry(variant: str, raw: dict, path: Path) -> LockedImage:
    if not isinstance(raw, dict):
        raise TRMError(
            f"{path}: variant {variant!r} must be an object with repository, tag and digest; {_FIX}."
        )
    repository, tag, digest = raw.get("repository"), raw.get("tag"), raw.get("digest")
    tags = raw.get("tags")
    if tag is None and isinstance(tags, list) and tags and isinstance(tags[0], str):
        tag = tags[0]  # the human-readable `<version>-cu<XY>-sm<NN>` tag comes first
    for key in ("reference", "pinned", "ref", "image", "tagged"):
        value = raw.get(key)
        if isinstance(value, str):
            repo2, tag2, digest2 = _split_ref(value)
            repository, tag, digest = repository or repo2, tag or tag2, digest or digest2
    if isinstance(tag, str) and ":" in tag:  # a full reference `repo:tag` instead of a bare tag
        tag = _split_ref(tag)[1]
    if not (isinstance(repository, str) and repository and isinstance(tag, str) and tag):
        raise TRMError(f"{path}: variant {variant!r} lacks its repository and tag; {_FIX}.")
    if not (isinstance(digest, str) and _DIGEST.match(digest)):
        raise TRMError(f"{path}: variant {variant!r} has no sha256 digest (got {digest!r}); {_FIX}.")
    return LockedImage(variant, repository, tag, digest)


def read_lock(root: str | Path = ".") -> dict[str, LockedImage]:
    """Every variant of the lock file under repository `root`, keyed by variant name."""
    path = Path(root) / LOCK_PATH
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise TRMError(f"{path} does not exist; {_FIX}.") from err
    except json.JSONDecodeError as err:
        raise TRMError(f"{path} is not valid JSON ({err}); {_FIX}.") from err
    variants = data.get("variants", data.get("images")) if isinstance(data, dict) else None
    if isinstance(variants, list):
        variants = {str(v.get("variant")): v for v in variants if isinstance(v, dict)}
    if not isinstance(variants, dict) or not variants:
        raise TRMError(f"{path}: no `variants` object with pushed images; {_FIX}.")
    return {name: _entry(name, raw, path) for name, raw in sorted(variants.items())}


def locked(root: str | Path, variant: str) -> LockedImage:
    """The lock entry of one variant, with the list of known ones when it is missing."""
    images = read_lock(root)
    if variant not in images:
        raise TRMError(
            f"{Path(root) / LOCK_PATH}: no pushed image for variant {variant!r} "
            f"(have: {', '.join(images)}); push it with `make image push VARIANTS={variant}`."
        )
    return images[variant]
