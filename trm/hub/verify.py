"""A file of a Hub snapshot checked against the content address it is cached under, before it is read.

huggingface_hub stores each file once, as `blobs/<etag>`, and links it from `snapshots/<commit>/<path>`:
the etag of a file kept with Git LFS (weights) is the sha256 of its bytes, that of a plain Git file (a
config, a manifest) is its Git blob id (sha1 of `blob <size>\\0` and the bytes). A blob that no longer
hashes to its name was damaged or changed after the download (a full disk, an edit, a copied cache); an
upstream step_N file has no manifest of ours, so this is the only check its bytes get.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path

from trm.errors import TRMError
from trm.io import sha256_file

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_GIT_SHA1 = re.compile(r"^[0-9a-f]{40}$")


def git_blob_id(path: Path, chunk_size: int = 1 << 20) -> str:
    """The Git blob id (sha1 of `blob <size>\\0` + bytes) of a file, streamed."""
    h = hashlib.sha1(f"blob {path.stat().st_size}\0".encode(), usedforsecurity=False)
    with open(path, "rb") as f:
        while chunk := f.read(chunk_size):
            h.update(chunk)
    return h.hexdigest()


def verify_cached(files: Iterable[Path], where: str) -> None:
    """TRMError naming the first of `files` (links into a Hub cache) whose blob does not hash to its
    name; a file that is no link into `blobs/` (a local folder) or has another kind of name is left to the
    checks of what reads it."""
    for file in files:
        if not file.is_symlink():
            continue
        blob = file.resolve()
        if blob.parent.name != "blobs":
            continue
        if _SHA256.match(blob.name):
            kind, digest = "sha256", sha256_file(blob)
        elif _GIT_SHA1.match(blob.name):
            kind, digest = "Git blob id", git_blob_id(blob)
        else:
            continue
        if digest != blob.name:
            raise TRMError(
                f"{where}: {file.name} in the Hub cache does not match its {kind} (a damaged or changed "
                f"cache file: {blob}); nothing was loaded. Delete that file and run again online to "
                "download it afresh"
            )
