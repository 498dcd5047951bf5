"""The Kaggle bundle: a folder with the model weights, `config.json`, optional identifiers and a manifest.

Layout of a bundle (one Kaggle dataset):
  model.pt          state dict of `TinyRecursiveModel` (EMA weights when the checkpoint had them)
  config.json       everything needed to rebuild the model and its inputs (see `bundle_config`)
  identifiers.json  optional: the training dataset's identifier strings, so seen tasks reuse trained rows
  wheels/           offline wheelhouse (requirements.txt + wheels), absent with --no-wheels
  README.md         how to use it on Kaggle
  manifest.json     sha256 and size of every file above (written last)

Puzzle embedding of tasks the model never saw: the packager appends one row, the mean of the trained rows
(blank row 0 excluded), at index `identifiers.unseen_id`. Every augmentation of an unseen task uses it —
the same choice as upstream's mean-row resize when a checkpoint meets another identifier count.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trm.errors import TRMError
from trm.io import sha256_file

if TYPE_CHECKING:  # torch is imported where a model is loaded: reading and checking a bundle needs none
    import torch

FORMAT = "trm-kaggle-bundle"
FORMAT_VERSION = 1
WEIGHTS = "model.pt"
CONFIG = "config.json"
IDENTIFIERS = "identifiers.json"
MANIFEST = "manifest.json"
README = "README.md"
WHEELS = "wheels"


def wheel_files(root: Path, folder: str) -> tuple[str, ...]:
    """The `.whl` files of `root/folder`, relative to `root`: what the secret scan leaves unread (third-party
    code, gigabytes with torch). Every other file there (requirements.txt, dataset-metadata.json) is scanned."""
    return tuple(f"{folder}/{p.name}" for p in sorted((root / folder).glob("*.whl")))


@dataclass
class Bundle:
    """A verified bundle loaded for inference."""

    path: Path
    config: dict[str, Any]
    model: Any  # TinyRecursiveModel, eval mode, on the requested device
    identifiers: list[str] | None

    @property
    def unseen_id(self) -> int:
        """Embedding row used for every augmentation of a task absent from `identifiers`."""
        return int(self.config["identifiers"]["unseen_id"])


def file_entries(root: Path) -> dict[str, dict[str, Any]]:
    """`{relative path: {bytes, sha256}}` of every file below `root` except the manifest."""
    return {
        p.relative_to(root).as_posix(): {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }


def read_config(root: Path) -> dict[str, Any]:
    """`config.json` of a bundle after checking the manifest's sha256 of the files inference reads."""
    root = Path(root)
    fix = f"re-run `python -m trm package kaggle CHECKPOINT {root}` or re-download the dataset"
    try:
        manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
    except FileNotFoundError:
        raise TRMError(
            f"{root}: no {MANIFEST}; --weights must be a folder written by `python -m trm package kaggle`"
        ) from None
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise TRMError(f"{root}/{MANIFEST}: unreadable ({err}); {fix}") from None
    if not isinstance(files, dict):
        raise TRMError(f"{root}/{MANIFEST}: `files` is not an object; {fix}")
    for name in (CONFIG, WEIGHTS, IDENTIFIERS):
        meta = files.get(name)
        path = root / name
        if meta is None:
            if name == IDENTIFIERS:
                continue
            raise TRMError(f"{root}/{MANIFEST} does not list {name}; {fix}")
        if not isinstance(meta, dict) or not isinstance(meta.get("sha256"), str):
            raise TRMError(f"{root}/{MANIFEST}: files.{name}.sha256 is not a string; {fix}")
        if not path.is_file() or sha256_file(path) != meta["sha256"]:
            raise TRMError(f"{path}: missing or its sha256 differs from {MANIFEST} (damaged copy); {fix}")
    try:
        config = json.loads((root / CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise TRMError(f"{root}/{CONFIG}: not readable JSON ({err}); {fix}") from None
    if not isinstance(config, dict):
        raise TRMError(f"{root}/{CONFIG}: not a JSON object; {fix}")
    if config.get("format") != FORMAT or config.get("format_version") != FORMAT_VERSION:
        raise TRMError(
            f"{root}/{CONFIG}: format {config.get('format')!r} v{config.get('format_version')} is not "
            f"{FORMAT} v{FORMAT_VERSION}; repackage it with this trm-stack version"
        )
    _check_config_keys(root, config, fix)
    return config


# The keys of config.json inference reads, with the type each must have.
REQUIRED_CONFIG = {"arch": dict, "dataset": dict, "identifiers": dict, "identifiers.unseen_id": int}


def _check_config_keys(root: Path, config: dict[str, Any], fix: str) -> None:
    for key, kind in REQUIRED_CONFIG.items():
        value: Any = config
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is None or not isinstance(value, kind) or isinstance(value, bool):
            what = "missing" if value is None else f"a {type(value).__name__}, not a {kind.__name__}"
            raise TRMError(f"{root}/{CONFIG}: key `{key}` is {what}; {fix}")


def model_config(config: dict[str, Any], *, batch_size: int, forward_dtype: str, early_halt: bool) -> Any:
    """The model config of a bundle for inference with the given batch size, dtype and halting rule.

    `arch_name` picks the architecture (bundles written before it existed hold TRM)."""
    from trm.model.registry import get_spec

    arch = dict(config["arch"])
    arch.update(batch_size=batch_size, forward_dtype=forward_dtype, eval_early_halt=early_halt)
    return get_spec(config.get("arch_name", "trm")).config.from_dict(arch)


def load_bundle(
    root: str | Path,
    device: torch.device,
    *,
    batch_size: int = 1,
    forward_dtype: str | None = None,
    early_halt: bool = False,
) -> Bundle:
    """Verify and load a bundle; forward_dtype None = bfloat16 on CUDA, float32 on CPU."""
    import torch

    from trm.model.registry import build_model

    root = Path(root)
    config = read_config(root)
    dtype = forward_dtype or ("bfloat16" if device.type == "cuda" else "float32")
    try:
        cfg = model_config(config, batch_size=batch_size, forward_dtype=dtype, early_halt=early_halt)
    except (TypeError, ValueError, KeyError) as err:
        raise TRMError(
            f"{root}/{CONFIG}: key `arch` does not describe a model ({err}); repackage it with "
            "`python -m trm package kaggle`"
        ) from None
    with torch.device(device):
        model = build_model(cfg)
    weights = torch.load(root / WEIGHTS, map_location=device, weights_only=True)
    try:
        model.load_state_dict(weights, strict=True)
    except RuntimeError as err:
        raise TRMError(
            f"{root}/{WEIGHTS} does not fit {root}/{CONFIG} ({str(err).splitlines()[0]}); repackage it"
        ) from None
    model.eval()
    identifiers = None
    if (root / IDENTIFIERS).is_file():
        identifiers = json.loads((root / IDENTIFIERS).read_text(encoding="utf-8"))
    return Bundle(path=root, config=config, model=model, identifiers=identifiers)


def arch_fields(model_cfg: Any) -> dict[str, Any]:
    """Model-config fields to store (batch_size is chosen at inference)."""
    values = dataclasses.asdict(model_cfg)
    values.pop("batch_size")
    return values
