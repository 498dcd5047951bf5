"""Checkpoint directories: atomic `step_N/` folders with a manifest and a COMPLETE marker, discovery, pruning.

Layout of `<checkpoint_path>/step_N/`:
  state.pt         model, EMA, optimizers, loader position, progress, resolved config (rank 0)
  rank_<r>.pt      that rank's ACT carry rows [slot_start, slot_end) of the global batch and its RNG states
  manifest.json    compatibility facts + sha256 of every file above
  COMPLETE         written last, inside the temp dir, before the rename that publishes the folder
A folder without COMPLETE, or whose files do not match the manifest, is torn and is skipped with a warning.

Kinds (manifest `kind`): `eval` checkpoints are written right after an evaluation and carry its metrics
(`eval_metrics`); every other save (rolling by time or steps, a signal, a stop) is `rolling`. Retention
(`prune`) keeps the newest `keep` rolling ones, the newest `keep` evaluation ones plus the best `keep_best`
by one metric (higher is better), and always the newest complete checkpoint.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trm import exit_codes
from trm.errors import TRMError
from trm.gitinfo import code_git_sha
from trm.io import atomic_write_json, atomic_write_text, fsync_dir, fsync_tree, sha256_file
from trm.safe_remove import remove_retired_checkpoint

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
COMPLETE = "COMPLETE"
MANIFEST = "manifest.json"
STATE = "state.pt"
STEP_RE = re.compile(r"^step_(\d+)$")
ROLLING = "rolling"
EVAL = "eval"


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
    """The code's git commit (trm.gitinfo.code_git_sha: $TRM_IMAGE_GIT_SHA in images, else the checkout)."""
    return code_git_sha()


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
            remove_retired_checkpoint(old)
        os.replace(final, old)
    os.replace(tmp, final)
    fsync_dir(root)
    if old is not None:
        remove_retired_checkpoint(old)
    return final


def prepare_partial(root: Path, step: int) -> Path:
    """Create an empty temp folder for `step` (rank 0, before the others write into it)."""
    root.mkdir(parents=True, exist_ok=True)
    tmp = partial_dir(root, step)
    if tmp.exists():
        remove_retired_checkpoint(tmp)
    tmp.mkdir()
    return tmp


_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


class CheckpointDiskFull(TRMError):
    """The filesystem under checkpoint_path filled up during a save; the partial folder was removed."""

    exit_code = exit_codes.DISK_FULL


class CheckpointWriteFailed(TRMError):
    """Another rank's checkpoint writer failed (its log has the error); this rank stops with it."""

    exit_code = 1  # what the failing rank exits with for an error other than a full disk


def disk_full_cause(err: BaseException) -> OSError | None:
    """The ENOSPC/EDQUOT OSError behind `err` (torch re-raises it as an inline_container RuntimeError)."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _DISK_FULL_ERRNOS:
            return current
        current = current.__cause__ or current.__context__
    return None


def checkpoint_bytes(info: CheckpointInfo) -> int:
    """Total size of a complete checkpoint's files, from its manifest."""
    return sum(int(meta["bytes"]) for meta in info.manifest.get("files", {}).values())


def disk_full_message(root: Path, step: int, needed: int, cause: OSError) -> str:
    """One line: which save failed, bytes needed and free, what is still intact, how to go on."""
    free = shutil.disk_usage(root).free if root.exists() else 0
    previous = find_complete(root, warn=False)
    intact = (
        f"the previous checkpoint {previous[-1].path} is intact and the same command resumes from it"
        if previous
        else "no earlier checkpoint exists, so a rerun starts from step 0"
    )
    return (
        f"checkpoint {root / f'step_{step}'} could not be written: {os.strerror(cause.errno or errno.ENOSPC)} "
        f"(needs about {needed:,} bytes, {free:,} bytes free under {root}); the partial save was removed and "
        f"{intact}. Free space there (or set a lower checkpoint.keep, or move checkpoint_path), then rerun."
    )


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
    except (OSError, ValueError) as err:
        raise ValueError(f"unreadable {MANIFEST}: {err}") from None
    files = manifest.get("files", {}) if isinstance(manifest, dict) else None
    if not isinstance(files, dict):
        raise ValueError(f"{MANIFEST} has no `files` object listing the checkpoint's files")
    for name, meta in files.items():
        if (
            not isinstance(meta, dict)
            or not isinstance(meta.get("bytes"), int)
            or not isinstance(meta.get("sha256"), str)
        ):
            raise ValueError(f"{MANIFEST}: files.{name} needs an integer `bytes` and a string `sha256`")
        path = folder / name
        if not path.is_file():
            raise ValueError(f"{name} is missing")
        if path.stat().st_size != meta["bytes"]:
            raise ValueError(f"{name} has {path.stat().st_size} bytes, {MANIFEST} says {meta['bytes']}")
        if verify_hashes and sha256_file(path) != meta["sha256"]:
            raise ValueError(f"{name} does not match its sha256 in {MANIFEST}")
    return manifest


def verified_manifest(folder: Path, use: str) -> dict[str, Any]:
    """The manifest of the checkpoint `folder` after checking the size and sha256 of every file it lists.

    What every command that loads a checkpoint for use (evaluate, package, adapt, publish, load_checkpoint=)
    calls first. A damaged or incomplete one raises TRMError (exit 2): one line naming the file."""
    try:
        return check_folder(folder, verify_hashes=True)
    except ValueError as why:
        raise TRMError(
            f"{use}: checkpoint {folder} is damaged or incomplete ({why}); nothing was written. Pick another "
            "step_N, or restore this one from a copy"
        ) from None


def load_verified(folder: Path, name: str, manifest: dict[str, Any], use: str) -> Any:
    """Load `folder/name` from bytes whose sha256 was just checked against `manifest` (the bytes loaded are
    the bytes verified: a file changed after `verified_manifest` still cannot slip through)."""
    data = (folder / name).read_bytes()
    if hashlib.sha256(data).hexdigest() != manifest["files"][name]["sha256"]:
        raise TRMError(
            f"{use}: checkpoint {folder / name} does not match its sha256 in {MANIFEST} (it changed while "
            "being read, or is damaged); nothing was written. Pick another step_N"
        )
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)


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


def kind_of(info: CheckpointInfo) -> str:
    """`eval` or `rolling` (checkpoints written before kinds existed count as rolling)."""
    return EVAL if info.manifest.get("kind") == EVAL else ROLLING


def metric_value(info: CheckpointInfo, metric: str) -> float | None:
    """The value of `metric` in the evaluation this checkpoint was written after (None: not recorded)."""
    value = (info.manifest.get("eval_metrics") or {}).get(metric)
    return None if value is None or value != value else float(value)  # NaN counts as missing


def best_of(complete: list[CheckpointInfo], metric: str, k: int = 1) -> list[CheckpointInfo]:
    """The `k` checkpoints with the highest `metric` (ties: the later step first), best first."""
    scored = [(v, info) for info in complete if (v := metric_value(info, metric)) is not None]
    scored.sort(key=lambda pair: (-pair[0], -pair[1].step))
    return [info for _, info in scored[:k]]


def retained(complete: list[CheckpointInfo], keep: int, keep_best: int, metric: str | None) -> set[int]:
    """Steps that retention keeps (keep=0: all): newest `keep` of each kind, best `keep_best`, the newest."""
    if keep <= 0 or not complete:
        return {info.step for info in complete}
    rolling = [i for i in complete if kind_of(i) == ROLLING]
    evals = [i for i in complete if kind_of(i) == EVAL]
    kept = {i.step for i in rolling[-keep:]} | {i.step for i in evals[-keep:]} | {complete[-1].step}
    if metric and keep_best > 0:
        kept |= {i.step for i in best_of(evals, metric, keep_best)}
    return kept


def prune(root: Path, keep: int, keep_best: int = 0, metric: str | None = None) -> list[Path]:
    """Delete complete checkpoints that retention (`retained`) does not keep, and stale temp folders."""
    removed: list[Path] = []
    for stale in [*root.glob(".step_*.partial"), *root.glob(".step_*.old")]:
        remove_retired_checkpoint(stale)
        removed.append(stale)
    complete = find_complete(root, warn=False)
    kept = retained(complete, keep, keep_best, metric)
    for info in complete:
        if info.step not in kept:
            remove_retired_checkpoint(info.path)
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
