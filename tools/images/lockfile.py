"""`docker/images.lock.json`: the pushed digest of every variant, read by launch scripts, jobs and runbooks.

Format (schema 1): `{"schema": 1, "images": {"<variant>": {"reference": "<registry>/<repo>@sha256:…",
"repository": …, "digest": …, "tags": [...], "content_hash": …, "git_sha": …, "torch": …, "cuda": …,
"sm_list": [...], "runtime_base": …, "created": …}}}`. Launch by `reference` (immutable), never by tag.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from trm.errors import TRMError
from trm.io import atomic_write_json

LOCK_PATH = Path("docker/images.lock.json")
SCHEMA = 1
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def read_lock(path: str | Path = LOCK_PATH) -> dict[str, Any]:
    """The lock file's content (an empty one when the file does not exist yet)."""
    path = Path(path)
    if not path.exists():
        return {"schema": SCHEMA, "images": {}}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise TRMError(
            f"{path} is not valid JSON ({err}); restore it from git or delete it and push again"
        ) from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("images"), dict):
        raise TRMError(f"{path} is not an images lock of schema {SCHEMA}; restore it from git")
    return data


def is_digest(value: str) -> bool:
    """`sha256:<64 hex>`, the only digest form recorded."""
    return bool(_DIGEST.match(value))


def record_pushes(path: str | Path, entries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Add or replace the entries of some variants, keeping the others, in one atomic write."""
    for variant, entry in entries.items():
        if not is_digest(str(entry.get("digest", ""))):
            raise TRMError(
                f"refusing to record {variant!r} without a sha256 digest (got {entry.get('digest')!r})"
            )
    data = read_lock(path)
    data["images"].update(entries)
    data["images"] = dict(sorted(data["images"].items()))
    atomic_write_json(path, data)
    return data


def record_push(path: str | Path, variant: str, entry: dict[str, Any]) -> dict[str, Any]:
    """Add or replace one variant's entry, keeping the others; the write is atomic."""
    return record_pushes(path, {variant: entry})


def image_reference(variant: str, path: str | Path = LOCK_PATH) -> str:
    """`<registry>/<repo>@sha256:…` of the pushed `variant`, for `docker pull`/`docker run`."""
    images = read_lock(path)["images"]
    if variant not in images:
        known = ", ".join(images) or "none"
        raise TRMError(
            f"{path} has no pushed image for variant {variant!r} (recorded: {known}); run "
            f"`make image push REGISTRY=<registry> VARIANTS={variant}`"
        )
    return images[variant]["reference"]
