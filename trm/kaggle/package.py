"""`python -m trm package kaggle`: a checkpoint → an offline Kaggle dataset folder (see `trm.kaggle.bundle`)."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any

import torch

import trm
from trm.adapt.rows import mean_trained_row
from trm.errors import TRMError
from trm.io import atomic_directory, atomic_write_json, atomic_write_text
from trm.kaggle import bundle as B
from trm.kaggle.readme import render_readme
from trm.model.upstream import PUZZLE_EMB_KEY
from trm.safe_remove import check_replaceable

log = logging.getLogger(__name__)
KIND = "kaggle-bundle"  # the kind of output in the bundle's creation marker (trm.safe_remove)

# Dataset facts inference needs; ARC's values (as `python -m trm data build-arc` writes them) when no dataset
# folder is at hand.
ARC_DATASET = {"pad_id": 0, "ignore_label_id": 0, "blank_identifier_id": 0, "vocab_size": 12, "seq_len": 900}


def _dataset_facts(
    data_path: Path | None, fingerprint: str | None
) -> tuple[dict[str, Any], list[str] | None]:
    """(dataset metadata needed at inference, identifier strings) from a dataset folder, or ARC defaults.
    The two files read must match the folder's manifest, and the manifest the dataset the checkpoint was
    trained on (`fingerprint`, from its manifest; None: not known)."""
    from trm.data.manifest import combined_fingerprint, read_with_files

    if data_path is None:
        return dict(ARC_DATASET), None
    meta_path = data_path / "test" / "dataset.json"
    ids_path = data_path / B.IDENTIFIERS
    manifest = read_with_files(data_path, ("test/dataset.json", B.IDENTIFIERS), "--data-path")
    if fingerprint is not None and combined_fingerprint([manifest]) != fingerprint:
        raise TRMError(
            f"--data-path {data_path}: dataset fingerprint {manifest['fingerprint']}, but the checkpoint was "
            f"trained on {fingerprint}; its identifiers would name the wrong rows. Pass the dataset the "
            "checkpoint was trained on, or --no-identifiers"
        )
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        identifiers = json.loads(ids_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise TRMError(
            f"--data-path {data_path}: cannot read {meta_path.name} / {ids_path.name} ({err}); pass the dataset "
            "folder the checkpoint was trained on (built by `python -m trm data build-arc`), or --no-identifiers"
        ) from None
    facts = {k: meta[k] for k in ARC_DATASET}
    facts["num_puzzle_identifiers"] = meta["num_puzzle_identifiers"]
    return facts, identifiers


def _with_unseen_row(
    weights: dict[str, torch.Tensor], keep_table: bool, blank_id: int
) -> tuple[dict[str, torch.Tensor], int]:
    """Append the mean trained row (for unseen tasks) to the puzzle table; without keep_table, keep only
    the blank row and that mean row. Returns (weights, index of the mean row)."""
    table = weights.get(PUZZLE_EMB_KEY)
    if table is None:
        return weights, 0
    mean = mean_trained_row(table, blank_id)
    base = table if keep_table else table[blank_id : blank_id + 1]
    weights = dict(weights)
    weights[PUZZLE_EMB_KEY] = torch.cat([base, mean]).contiguous()
    return weights, len(base)


def newest_in_run_dir(path: Path) -> Path:
    """A run directory (holding step_N/ folders) stands for its newest complete checkpoint."""
    from trm.training.checkpointing.layout import COMPLETE, find_complete

    if not path.is_dir() or (path / COMPLETE).exists():
        return path
    found = find_complete(path)
    if not found:
        return path
    log.info("%s is a run directory: packaging its newest complete checkpoint %s", path, found[-1].path)
    return found[-1].path


def _resolve(checkpoint: Path, overrides: list[str], use: str) -> tuple[Any, int, bool]:
    from trm.training.standalone_eval import resolve_config

    return resolve_config(checkpoint, overrides, use=use)


@dataclasses.dataclass(frozen=True)
class WheelOptions:
    """The offline wheelhouse of the bundle (`wheels=False`: none)."""

    wheels: bool = True
    python_version: str = "3.11"
    platforms: tuple[str, ...] | None = None
    include_torch: bool = False
    progress: bool = True


@dataclasses.dataclass(frozen=True)
class _Identifiers:
    """The dataset facts inference needs and the puzzle identifiers shipped with the bundle (or None)."""

    facts: dict[str, Any]
    names: list[str] | None
    trained_rows: int


def _identifiers(
    checkpoint: Path,
    kind: str,
    cfg: Any,
    weights: dict[str, torch.Tensor],
    data_path: str | Path | None,
    wanted: bool,
    fingerprint: str | None = None,
) -> _Identifiers:
    """The identifier strings of the puzzle table's rows (from the run's dataset), checked against it and
    against `fingerprint`, the dataset the checkpoint's manifest says it trained on."""
    from trm.data.manifest import require_upstream_identifiers
    from trm.training.checkpointing.initial_weights import UPSTREAM_KIND

    table = weights.get(PUZZLE_EMB_KEY)
    wanted = wanted and table is not None  # without a puzzle table identifiers change nothing
    if data_path is None and wanted and len(cfg.data_paths) == 1 and Path(cfg.data_paths[0]).is_dir():
        data_path = cfg.data_paths[0]
    facts, names = _dataset_facts(Path(data_path) if data_path is not None and wanted else None, fingerprint)
    rows = int(table.shape[0]) if table is not None else 1
    if names is not None and len(names) != rows:
        raise TRMError(
            f"--data-path {data_path}: {len(names)} identifiers, but the checkpoint's puzzle table has {rows} "
            "rows; pass the dataset the checkpoint was trained on, or --no-identifiers"
        )
    if names is not None and kind == UPSTREAM_KIND:  # rows must be upstream's identifiers, not just as many
        require_upstream_identifiers([str(data_path)], rows, checkpoint)
    return _Identifiers(facts, names, rows)


def _fitted_model_config(
    checkpoint: Path, cfg: Any, arch_name: str, weights: dict[str, torch.Tensor], facts: dict[str, Any]
) -> Any:
    """The inference model's config; the weights must load into it exactly (checked on the meta device)."""
    from trm.model.registry import build_model, model_config

    table = weights.get(PUZZLE_EMB_KEY)
    model_cfg = model_config(
        cfg.arch,
        batch_size=1,
        seq_len=facts["seq_len"],
        vocab_size=facts["vocab_size"],
        num_puzzle_identifiers=int(table.shape[0]) if table is not None else 1,
        forward_dtype="bfloat16" if cfg.arch.forward_dtype == "auto" else cfg.arch.forward_dtype,
    )
    with torch.device("meta"):
        model = build_model(model_cfg)
    try:
        model.load_state_dict(weights, strict=True, assign=True)
    except RuntimeError as err:
        raise TRMError(
            f"{checkpoint}: weights do not fit the architecture ({str(err).splitlines()[0]}); pass the "
            f"run's arch overrides, e.g. `arch={arch_name} arch.hidden_size=…`"
        ) from None
    return model_cfg


def _bundle_config(
    checkpoint: Path,
    cfg: Any,
    arch_name: str,
    model_cfg: Any,
    ids: _Identifiers,
    unseen_id: int,
    source: dict[str, Any],
) -> dict[str, Any]:
    """The bundle's `config.json`: architecture, dataset facts, identifier rule, training config, provenance."""
    from trm.training.config import as_dict

    return {
        "format": B.FORMAT,
        "format_version": B.FORMAT_VERSION,
        "arch_name": arch_name,
        "arch": B.arch_fields(model_cfg),
        "loss_type": cfg.arch.loss.loss_type,
        "dataset": ids.facts,
        "identifiers": {
            "shipped": ids.names is not None,
            "trained_rows": ids.trained_rows,
            "unseen_id": unseen_id,
            "unseen_rule": "mean of the trained puzzle-embedding rows (blank row excluded)",
        },
        "train": as_dict(cfg),  # what adaptation at inference (trm.kaggle.adapt) trains with
        "source": {"checkpoint": checkpoint.name, **source},
        "created": {"trm_stack": trm.__version__, "torch": torch.__version__, "unix_time": time.time()},
    }


def _write_bundle(
    out_dir: Path,
    weights: dict[str, torch.Tensor],
    config: dict[str, Any],
    names: list[str] | None,
    wheel_options: WheelOptions,
    overwrite: bool,
    hub_source: dict[str, Any] | None = None,
    sources: tuple[Path, ...] = (),
    out_name: str = "OUT_DIR",
) -> dict[str, Any]:
    """Weights, config, identifiers, wheelhouse, README and manifest, published atomically after the
    secret scan found nothing in them (the wheel files aside; the wheelhouse's requirements.txt is read).
    `out_name`: see package_kaggle."""
    from trm.secrets import require_no_secrets

    opts = wheel_options
    staging = {"kind": KIND, "tool": "trm package kaggle", "sources": sources}
    with atomic_directory(out_dir, overwrite=overwrite, flag=out_name, **staging) as tmp:
        with open(tmp / B.WEIGHTS, "wb") as f:
            torch.save({k: v.contiguous() for k, v in weights.items()}, f)
        atomic_write_json(tmp / B.CONFIG, config)
        if names is not None:
            atomic_write_text(tmp / B.IDENTIFIERS, json.dumps(names) + "\n")
        pins: dict[str, str] = {}
        if opts.wheels:
            from trm.kaggle.wheelhouse import DEFAULT_PLATFORMS, build_wheelhouse

            pins = build_wheelhouse(
                tmp / B.WHEELS,
                python_version=opts.python_version,
                platforms=opts.platforms or DEFAULT_PLATFORMS,
                include_torch=opts.include_torch,
                progress=opts.progress,
            )
        readme = render_readme(config, pins, opts.python_version, opts.include_torch, opts.wheels)
        atomic_write_text(tmp / B.README, readme)
        manifest = {
            "format": B.FORMAT,
            "format_version": B.FORMAT_VERSION,
            "python_version": opts.python_version if opts.wheels else None,
            "torch_in_wheelhouse": opts.include_torch if opts.wheels else None,
            "files": B.file_entries(tmp),
            **({"hub_source": hub_source} if hub_source else {}),
        }
        atomic_write_json(tmp / B.MANIFEST, manifest)
        hint = f" from the run's config ({config['source']['checkpoint']})"
        require_no_secrets(tmp, f"{out_name} {out_dir}", skip=B.wheel_files(tmp, B.WHEELS), hint=hint)
        for path in tmp.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        tmp.chmod(0o755)
    return manifest


def package_kaggle(
    checkpoint: str | Path,
    out_dir: str | Path,
    *,
    overrides: list[str] | None = None,
    data_path: str | Path | None = None,
    identifiers: bool = True,
    wheels: bool = True,
    python_version: str = "3.11",
    platforms: tuple[str, ...] | None = None,
    include_torch: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    out_name: str = "OUT_DIR",
    use: str = "package kaggle",
) -> dict[str, Any]:
    """Write the bundle for `checkpoint` (our step_N/ folder, an upstream step_N file, or an
    hf://ORG/NAME[/DIR][@REVISION] holding either; see trm.hub.ref) to `out_dir`. `out_name`: what the
    caller's user calls `out_dir` (an argument, a flag), named by every refusal about it (replacing it,
    a secret in it); `use`: the command the user ran, named by a damaged checkpoint's error."""
    from trm.hub.ref import BUNDLE, DATASET_DIR, OURS, resolve
    from trm.model.registry import spec_of
    from trm.training.checkpointing.initial_weights import read_checkpoint_weights
    from trm.training.checkpointing.layout import MANIFEST as CKPT_MANIFEST

    found = resolve(checkpoint)  # the commit of a Hub checkpoint is recorded in config.json and manifest.json
    if found.layout == BUNDLE:
        raise TRMError(f"{checkpoint} is already a Kaggle bundle: pass it to `python -m trm infer --weights`")
    overrides = [*found.overrides, *(overrides or [])]
    published = found.path.parent / DATASET_DIR  # our published layout ships the dataset's identifiers
    if data_path is None and found.layout == OURS and published.is_dir():
        data_path = published
    checkpoint, out_dir = newest_in_run_dir(found.path), Path(out_dir)
    sources = (found.path, checkpoint)
    check_replaceable(out_dir, kind=KIND, sources=sources, flag=out_name)  # before any work
    if out_dir.exists() and not overwrite:
        raise TRMError(f"{out_name} {out_dir} already exists: choose another {out_name} or pass --overwrite")
    # The run's config and weights.
    cfg, step, ours = _resolve(checkpoint, list(overrides or []), use)
    arch_name = spec_of(cfg.arch).name
    weights, kind = read_checkpoint_weights(str(checkpoint), arch_name)
    ckpt_manifest = json.loads((checkpoint / CKPT_MANIFEST).read_text(encoding="utf-8")) if ours else {}
    trained_on = ckpt_manifest.get("dataset_fingerprint")
    ids = _identifiers(checkpoint, kind, cfg, weights, data_path, identifiers, trained_on)
    # The puzzle table gains the row unseen tasks use (and loses the trained rows without identifiers).
    weights, unseen_id = _with_unseen_row(weights, ids.names is not None, ids.facts["blank_identifier_id"])
    model_cfg = _fitted_model_config(checkpoint, cfg, arch_name, weights, ids.facts)
    source = {
        "kind": kind,
        "step": step,
        "dataset_fingerprint": ckpt_manifest.get("dataset_fingerprint"),
        "git_sha": ckpt_manifest.get("git_sha"),
        **({"hub": found.source} if found.source else {}),
    }
    config = _bundle_config(checkpoint, cfg, arch_name, model_cfg, ids, unseen_id, source)
    wheel_options = WheelOptions(wheels, python_version, platforms, include_torch, progress)
    return _write_bundle(
        out_dir, weights, config, ids.names, wheel_options, overwrite, found.source, sources, out_name
    )


def local_bundle(weights: str | Path, progress: bool = True) -> tuple[Path, dict[str, Any] | None]:
    """(bundle folder, Hub source or None) for `--weights`: a local bundle as is; an hf:// bundle from the
    Hub cache; an hf:// checkpoint (ours or upstream's) packaged once, without a wheelhouse, into
    $XDG_CACHE_HOME/trm-stack/hub-bundles/ (keyed by repository, folder and commit)."""
    import os

    from trm.hub.ref import BUNDLE, resolve

    found = resolve(weights)
    if found.source is None or found.layout == BUNDLE:
        return found.path, found.source
    src = found.source
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trm-stack" / "hub-bundles"
    key = f"{src['hub_repo'].replace('/', '--')}--{src['path_in_repo'].replace('/', '--')}@{src['commit']}"
    out = cache / key
    if (out / B.MANIFEST).is_file():
        try:
            B.read_config(out)  # verified against its manifest; the caller's load checks it again
            return out, src
        except TRMError as err:  # damaged since: packaged again (replaced only if trm-stack wrote it all)
            log.warning("the cached bundle is damaged (%s): packaging it again", err)
    log.info("packaging %s into %s (no wheelhouse)", src["reference"], out)
    package_kaggle(
        weights, out, wheels=False, overwrite=True, progress=progress,
        out_name=f"the packaged copy of --weights {weights}, cached at", use="infer",
    )  # fmt: skip
    return out, src
