"""`hf://ORG/NAME[/DIR][@REVISION]`: a checkpoint on the Hugging Face Hub, downloaded into the Hub's own
cache (`snapshot_download`: models--ORG--NAME/snapshots/<commit>/, refs/<branch>) and resolved to a path
that `trm.eval`, `python -m trm package kaggle` and `python -m trm infer` read like a local one.

Layouts recognised under DIR (the repository root without one):
  ours      `checkpoint/` is a complete trm step folder (what `python -m trm publish-checkpoint` uploads)
  upstream  `step_N` weight files (the form of the ARC Prize team's TRM repository, e.g.
            hf://arcprize/trm_arc_prize_verification/arc_v1_public); the newest N is used (name one with
            DIR/step_N to download only it), and the architecture comes from the `all_config.yaml` next
            to it when present
  bundle    a Kaggle bundle (`config.json` of format trm-kaggle-bundle), for `python -m trm infer`

The commit the revision resolved to is returned in `source`, for what the callers write (evaluation
metrics, the bundle manifest). HF_HUB_OFFLINE=1 resolves from the cache alone; the token is the Hub
library's own (HF_TOKEN or `hf auth login`), never an argument.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trm.errors import TRMError
from trm.extras import install_hint
from trm.hub.redact import error_line, redact_library_logs
from trm.hub.verify import verify_cached

SCHEME = "hf://"
# Our published layout (python -m trm publish-checkpoint).
CHECKPOINT_DIR = "checkpoint"
DATASET_DIR = "dataset"  # the training dataset's manifest.json, identifiers.json, test/dataset.json
PROVENANCE = "trm_provenance.json"
UPSTREAM_CONFIG = "all_config.yaml"
UPSTREAM_STEP_RE = re.compile(r"^step_(\d+)$")
OURS, UPSTREAM, BUNDLE = "trm", "upstream", "bundle"
_REPO_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class HubRef:
    """A parsed `hf://` reference."""

    repo_id: str
    subdir: str
    revision: str | None

    def __str__(self) -> str:
        path = f"/{self.subdir}" if self.subdir else ""
        return f"{SCHEME}{self.repo_id}{path}" + (f"@{self.revision}" if self.revision else "")


@dataclass(frozen=True)
class Resolved:
    """What a reference (or a plain path) stands for: a local path, its layout, config overrides that the
    layout implies (upstream's architecture), and where it came from (None for a local path)."""

    path: Path
    layout: str | None
    overrides: list[str] = field(default_factory=list)
    source: dict[str, Any] | None = None


def is_hub_ref(text: str | Path) -> bool:
    """Whether `text` is an `hf://` reference rather than a path."""
    return str(text).startswith(SCHEME)


def refuse_best(target: str | Path, best: bool) -> None:
    """`--best` ranks the checkpoints of a local run directory; an hf:// checkpoint is one already."""
    if best and is_hub_ref(target):
        raise TRMError(f"--best picks a checkpoint of a local run directory; drop it for {target}")


def parse(text: str) -> HubRef:
    """`hf://ORG/NAME[/DIR][@REVISION]` -> HubRef; a malformed one is a TRMError naming the form."""
    body = text[len(SCHEME) :] if text.startswith(SCHEME) else text
    where, _, revision = body.partition("@") if "@" in body else (body, "", "")
    parts = [p for p in where.split("/") if p]
    if len(parts) < 2 or not all(_REPO_PART.match(p) for p in parts) or any(p in (".", "..") for p in parts):
        raise TRMError(
            f"{text!r}: not a Hub reference; write hf://ORG/NAME[/DIR][@REVISION], e.g. "
            "hf://my-org/trm-arc1@main or hf://arcprize/trm_arc_prize_verification/arc_v1_public"
        )
    if "@" in body and not revision:
        raise TRMError(f"{text!r}: empty revision after '@'; name a branch, tag or commit, or drop the '@'")
    return HubRef(f"{parts[0]}/{parts[1]}", "/".join(parts[2:]), revision or None)


def _patterns(ref: HubRef) -> list[str]:
    """What to download: the files of the layouts under DIR (never the whole repository of a DIR-less
    reference: upstream's repositories hold several multi-GB checkpoints), or one named step_N file."""
    parent, _, last = ref.subdir.rpartition("/")
    if UPSTREAM_STEP_RE.match(last):  # hf://ORG/NAME/DIR/step_N names one upstream file
        return [ref.subdir, f"{parent}/{UPSTREAM_CONFIG}" if parent else UPSTREAM_CONFIG]
    prefix = f"{ref.subdir}/" if ref.subdir else ""
    names = (
        f"{CHECKPOINT_DIR}/*",
        f"{DATASET_DIR}/*",
        "wheels/*",
        "step_*",
        "*.json",
        "*.yaml",
        "*.md",
        "model.pt",
    )
    return [prefix + name for name in names]


def download(ref: HubRef, cache_dir: str | Path | None = None) -> Path:
    """The snapshot folder of `ref` in the Hub cache, holding the files `_patterns` selects."""
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
    except ImportError:
        raise TRMError(
            f"{ref}: reading from the Hugging Face Hub needs huggingface_hub: {install_hint('hub')}"
        ) from None
    redact_library_logs()
    try:
        folder = snapshot_download(
            ref.repo_id, revision=ref.revision, allow_patterns=_patterns(ref), cache_dir=cache_dir
        )
    except LocalEntryNotFoundError as err:
        raise TRMError(
            f"{ref}: not in the local Hub cache and the Hub cannot be reached ({error_line(err)}); "
            "download it once online (unset HF_HUB_OFFLINE), or check the name and revision"
        ) from None
    except HfHubHTTPError as err:
        raise TRMError(
            f"{ref}: the Hub refused ({error_line(err)}); check ORG/NAME and the revision, and for a "
            "private repository log in (`hf auth login` or HF_TOKEN)"
        ) from None
    return Path(folder)


def detect_layout(folder: Path, where: str) -> tuple[str, Path]:
    """(layout, path to hand on) of a downloaded folder; a TRMError saying what was found otherwise."""
    if (folder / CHECKPOINT_DIR / "COMPLETE").is_file():
        return OURS, folder / CHECKPOINT_DIR
    steps = sorted(
        (int(m.group(1)), p)
        for p in (folder.iterdir() if folder.is_dir() else ())
        if p.is_file() and (m := UPSTREAM_STEP_RE.match(p.name))
    )
    if steps:
        return UPSTREAM, steps[-1][1]
    config = folder / "config.json"
    if config.is_file():
        try:
            is_bundle = json.loads(config.read_text(encoding="utf-8")).get("format") == "trm-kaggle-bundle"
        except (OSError, ValueError, AttributeError):
            is_bundle = False
        if is_bundle:
            return BUNDLE, folder
    found = sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir()) if folder.is_dir() else []
    raise TRMError(
        f"{where}: holds no checkpoint: expected {CHECKPOINT_DIR}/ (published by `python -m trm "
        "publish-checkpoint`), upstream step_N files, or a Kaggle bundle; found "
        f"{', '.join(found[:12]) or 'nothing'}. Name the folder that holds one: hf://ORG/NAME/DIR"
    )


def upstream_overrides(config_file: Path) -> list[str]:
    """`arch=…` and `arch.*=…` overrides from upstream's `all_config.yaml` (keys our schema knows)."""
    from omegaconf import OmegaConf

    from trm.model.registry import get_spec
    from trm.training.config import schema_keys

    try:
        arch = OmegaConf.to_container(OmegaConf.load(config_file)).get("arch")  # type: ignore[union-attr]
    except Exception as err:
        raise TRMError(f"{config_file}: unreadable upstream config ({err})") from None
    if not isinstance(arch, dict) or "name" not in arch:
        raise TRMError(f"{config_file}: no `arch` section with a `name`; not an upstream all_config.yaml")
    name = get_spec(str(arch["name"])).name
    known = schema_keys(name)
    out = [f"arch={name}"]

    def walk(prefix: str, values: dict[str, Any]) -> None:
        for key, value in values.items():
            dotted = f"{prefix}.{key}"
            if isinstance(value, dict):
                walk(dotted, value)
            elif dotted in known and value is not None:
                out.append(f"{dotted}={json.dumps(value) if isinstance(value, str) else value}")

    walk("arch", {k: v for k, v in arch.items() if k != "name"})
    return out


def _read_files(layout: str, path: Path, folder: Path) -> list[Path]:
    """The files of a resolved snapshot that need the cache's check before they are read: upstream's step
    file and its config; of a bundle, every file; of our layout, every file but those its checkpoint's
    manifest lists by sha256, which the load checks against that manifest (`verified_manifest`), so a
    multi-GB checkpoint is hashed once, not twice (the manifest itself is checked here)."""
    if layout == UPSTREAM:
        return [path, *([folder / UPSTREAM_CONFIG] if (folder / UPSTREAM_CONFIG).exists() else [])]
    covered = _listed_by_checkpoint_manifest(path) if layout == OURS else set()
    return sorted(p for p in folder.rglob("*") if p.is_file() and p not in covered)


def _listed_by_checkpoint_manifest(checkpoint: Path) -> set[Path]:
    """The files of our checkpoint folder its `manifest.json` lists with a sha256 (none when unreadable:
    then every file gets the cache's check)."""
    from trm.training.checkpointing.layout import MANIFEST

    try:
        files = json.loads((checkpoint / MANIFEST).read_text(encoding="utf-8")).get("files")
    except (OSError, ValueError, AttributeError):
        return set()
    if not isinstance(files, dict):
        return set()
    return {checkpoint / rel for rel, meta in files.items() if isinstance(meta, dict) and "sha256" in meta}


def resolve(target: str | Path, cache_dir: str | Path | None = None) -> Resolved:
    """A local path as is; an `hf://` reference downloaded and resolved (see the module docstring)."""
    if not is_hub_ref(target):
        return Resolved(Path(target), None)
    ref = parse(str(target))
    snapshot = download(ref, cache_dir)
    named = snapshot / ref.subdir if ref.subdir else snapshot
    if UPSTREAM_STEP_RE.match(named.name) and named.is_file():
        layout, path, folder = UPSTREAM, named, named.parent
    elif named.is_dir():
        folder = named
        layout, path = detect_layout(folder, str(ref))
    else:
        raise TRMError(f"{ref}: the repository has no {ref.subdir!r} at this revision")
    verify_cached(_read_files(layout, path, folder), str(ref))
    overrides: list[str] = []
    if layout == UPSTREAM and (folder / UPSTREAM_CONFIG).is_file():
        overrides = upstream_overrides(folder / UPSTREAM_CONFIG)
    source = {
        "hub_repo": ref.repo_id,
        "revision": ref.revision or "main",
        "commit": snapshot.name,
        "path_in_repo": path.relative_to(snapshot).as_posix(),
        "layout": layout,
        "reference": f"{SCHEME}{ref.repo_id}{'/' + ref.subdir if ref.subdir else ''}@{snapshot.name}",
    }
    return Resolved(path, layout, overrides, source)


def default_output_dir(source: dict[str, Any] | None) -> Path:
    """Where results of a Hub checkpoint go without --output-dir: never inside the Hub cache."""
    assert source is not None
    return Path("hub-evals") / f"{source['hub_repo'].replace('/', '--')}@{source['commit'][:12]}"
