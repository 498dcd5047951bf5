"""A Hugging Face Hub cache laid out as huggingface_hub lays it out, built from local files (no network).

<cache>/models--ORG--NAME/blobs/<sha256>            file contents (an LFS blob's name is its sha256)
<cache>/models--ORG--NAME/snapshots/<commit>/<path>  relative symlinks to the blobs
<cache>/models--ORG--NAME/refs/<branch>             the commit the branch points at
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest


def add_commit(
    cache: Path, repo_id: str, files: dict[str, Path], branch: str = "main", git_files: tuple[str, ...] = ()
) -> str:
    """Put `files` (path in repo -> local file) in the cache as one commit on `branch`; its commit id.
    A blob is named by the sha256 of its bytes (a Git LFS file), or by its Git blob id for the paths in
    `git_files` (a plain Git file, as the Hub names a small config)."""
    storage = cache / f"models--{repo_id.replace('/', '--')}"
    digests = {}
    for rel, source in sorted(files.items()):
        data = source.read_bytes()
        if rel in git_files:
            digest = hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()
        else:
            digest = hashlib.sha256(data).hexdigest()
        blob = storage / "blobs" / digest
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        digests[rel] = digest
    commit = hashlib.sha1("".join(f"{k}\0{v}\n" for k, v in sorted(digests.items())).encode()).hexdigest()
    snapshot = storage / "snapshots" / commit
    for rel, digest in digests.items():
        link = snapshot / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(storage / "blobs" / digest, link.parent))
    (storage / "refs").mkdir(parents=True, exist_ok=True)
    (storage / "refs" / branch).write_text(commit)
    return commit


def folder_files(folder: Path, prefix: str = "") -> dict[str, Path]:
    """{path in repo: file} for every file under `folder`, under `prefix`."""
    return {prefix + p.relative_to(folder).as_posix(): p for p in sorted(folder.rglob("*")) if p.is_file()}


def offline_cache(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    """HF_HUB_OFFLINE=1 and HF_HUB_CACHE=cache, also in huggingface_hub's constants (read at import)."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
