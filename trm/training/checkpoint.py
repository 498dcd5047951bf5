"""Checkpoint directories: atomic `step_N/` folders with a manifest and a COMPLETE marker, discovery, pruning.

Layout of `<checkpoint_path>/step_N/`:
  state.pt         model, EMA, optimizers, loader position, progress, resolved config (rank 0)
  rank_<r>.pt      that rank's ACT carry rows [slot_start, slot_end) of the global batch and its RNG states
  manifest.json    compatibility facts + sha256 of every file above
  COMPLETE         written last, inside the temp dir, before the rename that publishes the folder
A folder without COMPLETE, or whose files do not match the manifest, is torn and is skipped with a warning.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trm.errors import TRMError
from trm.io import atomic_write_json, atomic_write_text, fsync_dir, fsync_tree, sha256_file

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
COMPLETE = "COMPLETE"
MANIFEST = "manifest.json"
STATE = "state.pt"
STEP_RE = re.compile(r"^step_(\d+)$")


def rank_file(rank: int) -> str:
    """Name of a rank's shard inside a checkpoint."""
    return f"rank_{rank}.pt"


@dataclass(frozen=True)
class CheckpointInfo:
    """A complete checkpoint found on disk."""

    step: int
    path: Path
    manifest: dict[str, Any]


def partial_dir(root: Path, step: int) -> Path:
    """The temp folder a checkpoint is written into (deterministic, so every rank finds it)."""
    return root / f".step_{step}.partial"


def git_sha() -> str:
    """The code's git commit: $TRM_GIT_SHA (set in images) or `git rev-parse HEAD` of the package's checkout."""
    if sha := os.environ.get("TRM_GIT_SHA"):
        return sha
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def build_manifest(folder: Path, facts: dict[str, Any]) -> dict[str, Any]:
    """Manifest for the files now in `folder`: the given facts plus size and sha256 of every file."""
    files = {
        p.name: {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
        for p in sorted(folder.iterdir())
        if p.is_file() and p.name not in (MANIFEST, COMPLETE)
    }
    return {
        "format_version": FORMAT_VERSION,
        **facts,
        "git_sha": git_sha(),
        "image_digest": os.environ.get("TRM_IMAGE_DIGEST") or None,
        "torch_version": torch.__version__,
        "created_unix": time.time(),
        "files": files,
    }


def publish(root: Path, step: int, facts: dict[str, Any]) -> Path:
    """Finish the partial folder of `step` (written by every rank): manifest, fsync, COMPLETE, rename."""
    tmp = partial_dir(root, step)
    atomic_write_json(tmp / MANIFEST, build_manifest(tmp, facts))
    fsync_tree(tmp)
    atomic_write_text(tmp / COMPLETE, f"{step}\n")
    final = root / f"step_{step}"
    old = None
    if final.exists():
        # A torn leftover, or the same step saved again with newer progress: swap it out atomically.
        old = root / f".step_{step}.old"
        if old.exists():
            shutil.rmtree(old)
        os.replace(final, old)
    os.replace(tmp, final)
    fsync_dir(root)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return final


def prepare_partial(root: Path, step: int) -> Path:
    """Create an empty temp folder for `step` (rank 0, before the others write into it)."""
    root.mkdir(parents=True, exist_ok=True)
    tmp = partial_dir(root, step)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    return tmp


def save_torch(obj: Any, path: Path) -> None:
    """torch.save to `path` and fsync it."""
    with open(path, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def load_torch(path: Path) -> Any:
    """Load one of our own checkpoint files (trusted: its sha256 is checked against the manifest first).

    Memory-mapped: readers that need only part of the state (the config, the weights) touch only those
    pages, and a second load of the same file costs no second copy. Tensors are private mappings, so
    in-place updates (optimizer state after resume) never write back to the checkpoint.
    """
    return torch.load(path, map_location="cpu", weights_only=False, mmap=True)


def check_folder(folder: Path, *, verify_hashes: bool) -> dict[str, Any]:
    """Return the manifest of a complete checkpoint folder; raise ValueError saying why it is torn."""
    if not (folder / COMPLETE).is_file():
        raise ValueError("no COMPLETE marker (the save was interrupted)")
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"unreadable {MANIFEST}: {err}") from None
    for name, meta in manifest.get("files", {}).items():
        path = folder / name
        if not path.is_file() or path.stat().st_size != meta["bytes"]:
            raise ValueError(f"{name} is missing or has the wrong size")
        if verify_hashes and sha256_file(path) != meta["sha256"]:
            raise ValueError(f"{name} does not match its sha256 in {MANIFEST}")
    return manifest


def find_complete(root: Path, *, verify_hashes: bool = False, warn: bool = True) -> list[CheckpointInfo]:
    """Every complete checkpoint under `root`, oldest first; torn ones are skipped with a warning."""
    found: list[CheckpointInfo] = []
    if not root.is_dir():
        return found
    for entry in root.iterdir():
        m = STEP_RE.match(entry.name)
        if not m or not entry.is_dir():
            continue
        try:
            manifest = check_folder(entry, verify_hashes=verify_hashes)
        except ValueError as why:
            if warn:
                log.warning("skipping torn checkpoint %s: %s", entry, why)
            continue
        found.append(CheckpointInfo(int(m.group(1)), entry, manifest))
    return sorted(found, key=lambda c: c.step)


def prune(root: Path, keep: int) -> list[Path]:
    """Delete all but the newest `keep` complete checkpoints (keep=0: keep all) and stale temp folders."""
    removed: list[Path] = []
    for stale in [*root.glob(".step_*.partial"), *root.glob(".step_*.old")]:
        shutil.rmtree(stale, ignore_errors=True)
        removed.append(stale)
    complete = find_complete(root, warn=False)
    if keep > 0:
        for info in complete[:-keep]:
            shutil.rmtree(info.path, ignore_errors=True)
            removed.append(info.path)
    return removed


def check_compatible(manifest: dict[str, Any], current: dict[str, Any], where: Path) -> list[str]:
    """Refuse a resume that would change the dataset or the architecture; return warnings for other changes.

    `current` has the same keys as the stored facts: dataset_fingerprint, arch, global_batch_size, math.
    """
    fix = f"start a new run with another checkpoint_path, or restore the original settings of {where}"
    if manifest.get("dataset_fingerprint") != current["dataset_fingerprint"]:
        raise TRMError(
            f"cannot resume from {where}: it was trained on dataset fingerprint "
            f"{manifest.get('dataset_fingerprint')}, but data_paths now give {current['dataset_fingerprint']}. "
            f"Use the original data_paths, or {fix}."
        )
    old_arch, new_arch = manifest.get("arch", {}), current["arch"]
    changed = sorted(k for k in set(old_arch) | set(new_arch) if old_arch.get(k) != new_arch.get(k))
    if changed:
        detail = ", ".join(f"arch.{k}: {old_arch.get(k)!r} -> {new_arch.get(k)!r}" for k in changed)
        raise TRMError(
            f"cannot resume from {where}: the architecture changed ({detail}). Revert them, or {fix}."
        )
    if manifest.get("global_batch_size") != current["global_batch_size"]:
        raise TRMError(
            f"cannot resume from {where}: global_batch_size {manifest.get('global_batch_size')} -> "
            f"{current['global_batch_size']} changes the ACT carry and the math. Use "
            f"global_batch_size={manifest.get('global_batch_size')} (micro_batch_size and the number of "
            f"processes may change freely), or {fix}."
        )
    warnings = []
    old_math, new_math = manifest.get("math", {}), current["math"]
    for key in sorted(set(old_math) | set(new_math)):
        if key not in ("arch", "global_batch_size") and old_math.get(key) != new_math.get(key):
            warnings.append(f"resuming with {key} changed: {old_math.get(key)!r} -> {new_math.get(key)!r}")
    return warnings
