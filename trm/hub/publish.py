"""`python -m trm publish-checkpoint RUN_DIR --repo ORG/NAME`: one checkpoint of a run, with what it takes
to use and trust it, as a Hugging Face Hub model repository.

The folder uploaded (and written as is by --dry-run):
  README.md              model card: the Hub's YAML metadata and how to evaluate it with trm-stack (trm.hub.card)
  checkpoint/            a complete trm step folder (state.pt with the model, EMA, config and progress, without
                         optimizer and loader state; manifest.json with the original facts; COMPLETE)
  config.json            the run's resolved config
  dataset/               the training dataset's manifest.json, identifiers.json (the puzzle-embedding rows,
                         in order) and test/dataset.json; dataset_<i>/ for each of several data_paths
  trm_provenance.json    step, how it was selected and by which metrics, dataset fingerprints, environment
                         (git sha, image digest or else the runtime lock, torch), hardware, wall clock and
                         cost from the launcher's records

The dataset given must be the one the checkpoint was trained on (its fingerprint is checked). The token is
the Hub library's own (HF_TOKEN, or `hf auth login`): never an argument, never written or printed.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trm
from trm.errors import TRMError
from trm.extras import install_hint
from trm.hub.redact import error_line, redact_library_logs
from trm.hub.ref import CHECKPOINT_DIR, DATASET_DIR, PROVENANCE, SCHEME, parse
from trm.io import atomic_directory, atomic_write_json, atomic_write_text, sha256_file
from trm.safe_remove import MARKER
from trm.training.checkpointing.layout import (
    COMPLETE,
    MANIFEST,
    STATE,
    CheckpointInfo,
    find_complete,
    load_verified,
    save_torch,
    verified_manifest,
)

log = logging.getLogger(__name__)

FORMAT = "trm-stack-hub-checkpoint"
FORMAT_VERSION = 1
CONFIG = "config.json"
CARD = "README.md"
# What evaluation and packaging read from state.pt; the optimizer and loader state only resume training.
KEPT_STATE = ("model", "ema", "config", "progress")
DATASET_FILES = ("manifest.json", "identifiers.json", "test/dataset.json")


@dataclass(frozen=True)
class Selection:
    """The checkpoint chosen from a run and why."""

    info: CheckpointInfo
    how: dict[str, Any]


def select(run_dir: Path, *, best: bool, step: int | None, metric: str | None) -> Selection:
    """--best (by the run's metric or `metric`), --step N, or the newest complete checkpoint."""
    from trm.training.checkpointing.best import best_checkpoint

    if best and step is not None:
        raise TRMError("--best and --step N each pick a checkpoint: pass one of them")
    if best:
        chosen = best_checkpoint(run_dir, metric)
        return Selection(chosen.info, {"by": "best", "metric": chosen.metric, "value": chosen.value})
    complete = find_complete(run_dir)
    if not complete:
        raise TRMError(
            f"{run_dir} holds no complete checkpoint (step_N/ with COMPLETE): pass the run's checkpoint_path"
        )
    if step is None:
        return Selection(complete[-1], {"by": "newest"})
    for info in complete:
        if info.step == step:
            return Selection(info, {"by": "step"})
    steps = ", ".join(str(i.step) for i in complete)
    raise TRMError(f"--step {step}: {run_dir} has no complete step_{step}/ (complete steps: {steps})")


def _dataset_records(data_paths: list[str], fingerprint: str | None, staged: Path) -> list[dict[str, Any]]:
    """Copy each dataset's manifest, identifiers and test metadata; check the fingerprint it trained on."""
    from trm.data.manifest import MANIFEST as DATASET_MANIFEST
    from trm.data.manifest import combined_fingerprint, read_with_files

    # A TRMError names a missing or broken dataset, or a copied file that differs from its manifest.
    copied = tuple(rel for rel in DATASET_FILES if rel != DATASET_MANIFEST)
    manifests = [read_with_files(p, copied, "dataset") for p in data_paths]
    combined = combined_fingerprint(manifests)
    if fingerprint is not None and combined != fingerprint:
        raise TRMError(
            f"data_paths {', '.join(data_paths)} have fingerprint {combined}, but the checkpoint was trained on "
            f"{fingerprint}: pass the dataset it was trained on with --data-path (rebuild it with the flags in "
            "its run's config)"
        )
    records = []
    for i, (path, manifest) in enumerate(zip(data_paths, manifests, strict=True)):
        name = DATASET_DIR if len(data_paths) == 1 else f"{DATASET_DIR}_{i}"
        for rel in DATASET_FILES:
            source = Path(path) / rel
            if not source.is_file():
                raise TRMError(f"{source}: missing; the dataset at {path} is incomplete, rebuild it")
            (staged / name / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, staged / name / rel)
        identifiers = json.loads((Path(path) / "identifiers.json").read_text(encoding="utf-8"))
        records.append(
            {
                "folder": name,
                "source_dir_name": Path(path).name,
                "fingerprint": manifest["fingerprint"],
                "manifest_sha256": sha256_file(Path(path) / "manifest.json"),
                "builder": manifest.get("builder"),
                "form": manifest.get("form"),
                "args": manifest.get("args"),
                "counts": manifest.get("counts"),
                "identifiers": {
                    "count": len(identifiers),
                    "sha256": sha256_file(Path(path) / "identifiers.json"),
                    "upstream_identical": bool((manifest.get("identifiers") or {}).get("upstream_identical")),
                },
            }
        )
    return records


def _slim_checkpoint(info: CheckpointInfo, state: dict[str, Any], dest: Path) -> None:
    """Write `dest` as a complete step folder holding only what evaluation reads from `state` (loaded from
    bytes verified against the source manifest, whose sha256 is recorded as `published_from.state_sha256`)."""
    dest.mkdir(parents=True)
    save_torch({k: state[k] for k in KEPT_STATE if k in state}, dest / STATE)
    facts = {k: v for k, v in info.manifest.items() if k not in ("files", "format_version")}
    manifest = {
        "format_version": info.manifest.get("format_version", 1),
        **facts,
        "published_from": {
            "step_dir": info.path.name,
            "kept_state": list(KEPT_STATE),
            "state_sha256": info.manifest["files"][STATE]["sha256"],
        },
        "files": {STATE: {"bytes": (dest / STATE).stat().st_size, "sha256": sha256_file(dest / STATE)}},
    }
    atomic_write_json(dest / MANIFEST, manifest)
    atomic_write_text(dest / COMPLETE, f"{info.step}\n")


def handoff_facts(run_dir: Path, handoff: Path | None) -> dict[str, Any] | None:
    """Hardware, wall clock and cost: the given handoff.json, else derived from the launcher's records
    (RUN_DIR/launch/, as `python -m trm handoff` does); None for a run the launcher did not start."""
    if handoff is not None:
        try:
            data = json.loads(handoff.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise TRMError(f"--handoff {handoff}: unreadable ({err}); pass a handoff.json") from None
    elif (run_dir / "launch").is_dir():
        from trm.launch.handoff.handoff import collect

        data = collect(run_dir)
    else:
        return None
    keys = (
        "run_name",
        "status",
        "gpus",
        "versions",
        "world_size",
        "wall_time",
        "cost_estimate_usd",
        "throughput",
    )
    return {k: data.get(k) for k in keys}


def runtime_lock(manifest: dict[str, Any]) -> dict[str, str] | None:
    """The hash-locked runtime requirements (docker/requirements/runtime-<cpu|cuXYZ>.txt, by the torch
    build that trained) of the commit that trained, read from this checkout when it is at that very commit
    (clean); None otherwise (the git sha still names it)."""
    from trm import gitinfo
    from trm.images.requirement_locks import runtime_lock as lock_path

    sha, torch_version = manifest.get("git_sha"), str(manifest.get("torch_version") or "")
    if not sha or sha.endswith("-dirty") or gitinfo.checkout_sha(gitinfo.PACKAGE_ROOT) != sha:
        return None
    group = torch_version.partition("+")[2] or "cpu"
    path = lock_path(gitinfo.PACKAGE_ROOT, group)
    if not path.is_file():
        return None
    return {"file": path.relative_to(gitinfo.PACKAGE_ROOT).as_posix(), "sha256": sha256_file(path)}


def _environment(manifest: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    run_json = {}
    if (run_dir / "run.json").is_file():
        try:
            run_json = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            run_json = {}
    return {
        "git_sha": manifest.get("git_sha"),
        "image_digest": manifest.get("image_digest"),
        "torch": manifest.get("torch_version"),
        "runtime_lock": None if manifest.get("image_digest") else runtime_lock(manifest),
        "versions": run_json.get("versions"),
        "published_with": {"trm_stack": trm.__version__},
    }


def stage(
    run_dir: Path,
    out_dir: Path,
    *,
    repo_id: str,
    best: bool = False,
    step: int | None = None,
    metric: str | None = None,
    data_paths: list[str] | None = None,
    handoff: Path | None = None,
    license_id: str = "mit",
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write the folder to upload into `out_dir` (atomically); returns its provenance record."""
    from trm.hub.card import render_card
    from trm.secrets import require_no_secrets

    parse(f"{SCHEME}{repo_id}")  # a malformed --repo stops before any work
    selection = select(run_dir, best=best, step=step, metric=metric)
    # Every file of the checkpoint is checked against its manifest before anything is staged; the weights
    # re-saved below come from the very bytes that were checked.
    manifest = verified_manifest(selection.info.path, "publish-checkpoint")
    info = CheckpointInfo(selection.info.step, selection.info.path, manifest)
    if STATE not in manifest.get("files", {}):
        raise TRMError(
            f"publish-checkpoint: {info.path}/{MANIFEST} does not list {STATE}; pick another step_N"
        )
    state = load_verified(info.path, STATE, manifest, "publish-checkpoint")
    config = state["config"]
    paths = list(data_paths or config.get("data_paths") or [])
    staging = {
        "kind": "hub-staging",
        "tool": "trm publish-checkpoint",
        "sources": [run_dir, info.path, *paths],
    }
    with atomic_directory(out_dir, overwrite=overwrite, flag="--out", **staging) as tmp:
        _slim_checkpoint(info, state, tmp / CHECKPOINT_DIR)
        atomic_write_json(tmp / CONFIG, config)
        datasets = _dataset_records(paths, info.manifest.get("dataset_fingerprint"), tmp)
        provenance = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "repo_id": repo_id,
            "run_name": info.manifest.get("run_name"),
            "step": info.step,
            "selected": selection.how,
            "eval_metrics": info.manifest.get("eval_metrics") or {},
            "best_metric": info.manifest.get("best_metric"),
            "dataset_fingerprint": info.manifest.get("dataset_fingerprint"),
            "datasets": datasets,
            "environment": _environment(info.manifest, run_dir),
            "hardware_and_cost": handoff_facts(run_dir, handoff),
        }
        atomic_write_json(tmp / PROVENANCE, provenance)
        atomic_write_text(tmp / CARD, render_card(provenance, config, license_id))
        hint = f" from the run's config (step_{info.step}/state.pt of {run_dir})"
        require_no_secrets(tmp, f"publish-checkpoint {run_dir}", hint=hint)
    return provenance


def upload(folder: Path, repo_id: str, *, private: bool, message: str) -> Any:
    """Create the repository if needed and upload `folder` as one commit; returns the CommitInfo."""
    try:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import HfHubHTTPError
    except ImportError:
        raise TRMError(f"publishing needs huggingface_hub: {install_hint('hub')}") from None
    api = HfApi()  # the token: HF_TOKEN or the Hub library's stored login
    redact_library_logs()
    try:
        api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        return api.upload_folder(
            repo_id=repo_id,
            repo_type="model",
            folder_path=str(folder),
            commit_message=message,
            ignore_patterns=[MARKER],  # the local creation marker (trm.safe_remove) stays local
        )
    except HfHubHTTPError as err:
        raise TRMError(
            f"hf://{repo_id}: the Hub refused the upload ({error_line(err)}); log in with "
            "`hf auth login` (or set HF_TOKEN) with write access to ORG"
        ) from None
