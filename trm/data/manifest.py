"""`manifest.json`: the last file of every dataset dir; proves the build finished and pins its content."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from trm.errors import TRMError
from trm.io import atomic_write_json, sha256_file

MANIFEST = "manifest.json"
FORMAT = "trm-stack-dataset"
FORMAT_VERSION = 1
# Files above this size are only size-checked when a loader opens the dataset; `trm data verify` hashes all.
QUICK_HASH_LIMIT = 256 << 20


def rebuild_hint(dataset_dir: str | Path, manifest: dict[str, Any] | None = None) -> str:
    """The commands that fix a missing or broken dataset. A dataset `import-upstream` adopted (its manifest
    says so) cannot be rebuilt in place by us, and a second import refuses its existing manifest: it is
    rebuilt by its own builder into a new folder, which is then imported."""
    record = manifest if isinstance(manifest, dict) else {}
    args = record.get("args")
    if isinstance(args, dict) and args.get("imported") is True:
        return (
            f"it was imported from a build by {record.get('builder', 'upstream TinyRecursiveModels or URM')}: "
            "rebuild it with that builder and the same flags into a new folder, run "
            "`python -m trm data import-upstream NEW_FOLDER`, and point data_paths at NEW_FOLDER"
        )
    return (
        "rebuild it with the command that built it, "
        f"`python -m trm data build-arc --output-dir {dataset_dir} --overwrite …` "
        "(or build-sudoku / build-maze) with the same flags as before, "
        f"or, for a directory built by upstream TinyRecursiveModels, run `python -m trm data import-upstream {dataset_dir}`"
    )


def fingerprint(files: dict[str, dict[str, Any]], args: dict[str, Any]) -> str:
    """sha256 over every file's sha256 (sorted by path) and the build arguments."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(f"{name}\x00{files[name]['sha256']}\n".encode())
    h.update(json.dumps(args, sort_keys=True).encode())
    return h.hexdigest()


def combined_fingerprint(manifests: list[dict[str, Any]]) -> str:
    """The fingerprint of several datasets trained on together (data_paths): one's own, else a hash of all."""
    if len(manifests) == 1:
        return manifests[0]["fingerprint"]
    return hashlib.sha256("\n".join(m["fingerprint"] for m in manifests).encode()).hexdigest()


def describe_files(root: Path, known: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """{relative path: {bytes, sha256}} for every file under root except the manifest."""
    known = known or {}
    files = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if rel == MANIFEST:
            continue
        files[rel] = {"bytes": path.stat().st_size, "sha256": known.get(rel) or sha256_file(path)}
    return files


def write_manifest(
    root: Path,
    *,
    form: str,
    builder: str,
    args: dict[str, Any],
    inputs: dict[str, str],
    counts: dict[str, dict[str, int]],
    known_hashes: dict[str, str] | None = None,
    identifiers: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Describe every file under `root` and write `manifest.json` (call last, after all other files).

    `identifiers` (from `identifiers_provenance`) says whether `identifiers.json` is upstream's.
    """
    files = describe_files(root, known_hashes)
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "form": form,
        "builder": builder,
        "args": args,
        "inputs": inputs,
        "counts": counts,
        "files": files,
        "fingerprint": fingerprint(files, args),
        "identifiers": identifiers or identifiers_provenance(upstream_identical=False),
    }
    atomic_write_json(root / MANIFEST, manifest)
    return manifest


def identifiers_provenance(*, upstream_identical: bool) -> dict[str, Any]:
    """The manifest's `identifiers` entry: whether `identifiers.json` (which TRM's puzzle embedding is
    indexed by) is exactly what upstream's builder writes for the same task files and flags."""
    return {"upstream_identical": upstream_identical}


def has_upstream_identifiers(manifest: dict[str, Any]) -> bool:
    """True for datasets whose identifiers are upstream's: built by a builder that reproduces upstream's, or
    imported from upstream's own output. Datasets from older trm-stack builders (no entry) are not."""
    entry = manifest.get("identifiers")
    return isinstance(entry, dict) and entry.get("upstream_identical") is True


def require_upstream_identifiers(
    data_paths: list[str] | list[Path], rows: int, checkpoint: str | Path
) -> None:
    """Stop unless an upstream checkpoint's puzzle embedding fits these datasets' identifiers.

    Upstream indexes the embedding by position in `identifiers.json`, and its checkpoints record nothing
    about the data, so the evidence is: every dataset's identifiers are upstream's (manifest entry above)
    and their total equals the checkpoint's row count (which differs for other subsets, --num-aug or
    --seed in practice).
    """
    total = 0
    for path in data_paths:
        manifest = read_manifest(path)
        if not has_upstream_identifiers(manifest):
            raise TRMError(
                f"{path}: its identifiers.json is not the one upstream's builder writes (dataset built by "
                f"{manifest.get('builder', 'an unknown builder')}), so the upstream checkpoint {checkpoint} "
                "would look up the wrong puzzle-embedding rows; rebuild it with this trm-stack, which "
                f"reproduces upstream's builder (`python -m trm data build-arc --output-dir {path} --overwrite` "
                "with the same flags), or use upstream's own build via `python -m trm data import-upstream DIR`"
            )
        counted = manifest.get("counts", {}).get("identifiers", {}).get("total")
        total += counted if isinstance(counted, int) else len(_identifier_list(Path(path)))
    if total != rows:
        raise TRMError(
            f"{checkpoint}: its puzzle embedding has {rows} rows but data_paths "
            f"{', '.join(str(p) for p in data_paths)} hold {total} identifiers, so the checkpoint was trained on "
            "other data (other --subsets, --num-aug or --seed); build the dataset with the flags it was trained "
            "with and pass that"
        )


def _identifier_list(root: Path) -> list[Any]:
    try:
        return json.loads((root / "identifiers.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise TRMError(f"{root / 'identifiers.json'}: unreadable ({err}); {rebuild_hint(root)}") from None


def read_manifest(dataset_dir: str | Path) -> dict[str, Any]:
    """Parse `manifest.json` and check its structure (no file checks)."""
    root = Path(dataset_dir)
    path = root / MANIFEST
    if not root.is_dir():
        raise TRMError(
            f"{root}: dataset directory not found; build it with `python -m trm data build-arc --output-dir {root}`"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TRMError(
            f"{path}: missing, so the dataset is incomplete or was not built by trm-stack; {rebuild_hint(root)}"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise TRMError(f"{path}: unreadable ({err}); {rebuild_hint(root)}") from None
    required = ("format", "form", "files", "fingerprint", "args")
    if (
        not isinstance(manifest, dict)
        or manifest.get("format") != FORMAT
        or any(k not in manifest for k in required)
    ):
        raise TRMError(f"{path}: not a trm-stack dataset manifest; {rebuild_hint(root)}")
    _check_types(path, manifest, root)
    if manifest.get("format_version") != FORMAT_VERSION:
        raise TRMError(
            f"{path}: format_version {manifest.get('format_version')} is not {FORMAT_VERSION}; {rebuild_hint(root)}"
        )
    if fingerprint(manifest["files"], manifest["args"]) != manifest["fingerprint"]:
        raise TRMError(
            f"{path}: fingerprint does not match the listed files (edited manifest); {rebuild_hint(root)}"
        )
    return manifest


# The types of the manifest's keys readers use (`counts` and `identifiers` only when present).
KEY_TYPES = {"format": str, "form": str, "files": dict, "fingerprint": str, "args": dict, "counts": dict}


def _check_types(path: Path, manifest: dict[str, Any], root: Path) -> None:
    """One line naming the key whose value has the wrong type (an edited or foreign manifest)."""
    for key, kind in KEY_TYPES.items():
        if key in manifest and not isinstance(manifest[key], kind):
            raise TRMError(
                f"{path}: key `{key}` is a {type(manifest[key]).__name__}, not a {kind.__name__} "
                f"(edited manifest); {rebuild_hint(root)}"
            )
    for rel, info in manifest["files"].items():
        if (
            not isinstance(info, dict)
            or type(info.get("bytes")) is not int
            or not isinstance(info.get("sha256"), str)
        ):
            raise TRMError(
                f"{path}: files.{rel} needs an integer `bytes` and a string `sha256` (edited manifest); "
                f"{rebuild_hint(root)}"
            )


def listed_files(dataset_dir: Path) -> list[str] | None:
    """The files a trm-stack dataset's manifest lists (with the manifest itself), or None when `dataset_dir`
    holds no such manifest: what `trm.safe_remove` lets a rebuild with --overwrite replace."""
    try:
        manifest = json.loads((Path(dataset_dir) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if (
        not isinstance(manifest, dict)
        or manifest.get("format") != FORMAT
        or not isinstance(manifest.get("files"), dict)
    ):
        return None
    return [MANIFEST, *manifest["files"]]


def check_files(dataset_dir: str | Path, manifest: dict[str, Any], *, full: bool) -> list[str]:
    """Problems with the files listed in the manifest: missing, wrong size, or (hashed ones) wrong sha256."""
    root = Path(dataset_dir)
    problems = []
    for rel, info in manifest["files"].items():
        path = root / rel
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            problems.append(f"{path}: missing")
            continue
        if size != info["bytes"]:
            problems.append(f"{path}: {size} bytes, manifest says {info['bytes']} (truncated or replaced)")
        elif (full or size <= QUICK_HASH_LIMIT) and sha256_file(path) != info["sha256"]:
            problems.append(f"{path}: sha256 differs from the manifest (file was modified)")
    return problems


def read_with_files(dataset_dir: str | Path, rels: tuple[str, ...], flag: str) -> dict[str, Any]:
    """The manifest of `dataset_dir` after checking just the files `rels` that a command copies or reads out
    of it (all hashed; a published `dataset/` folder holds only these and the manifest): TRMError naming
    `flag`, the file and the fix when one is missing, unlisted, or differs from its listing."""
    manifest = read_manifest(dataset_dir)
    root = Path(dataset_dir)
    unlisted = [rel for rel in rels if rel not in manifest["files"]]
    problems = [f"{root / rel}: not listed in {root / MANIFEST}" for rel in unlisted]
    problems += check_files(
        root, {"files": {r: manifest["files"][r] for r in rels if r not in unlisted}}, full=True
    )
    if problems:
        raise TRMError(
            f"{flag} {dataset_dir}: {problems[0]}, so it is not the dataset its manifest describes; nothing was "
            f"written. Pass the dataset the checkpoint was trained on, or {rebuild_hint(dataset_dir, manifest)}"
        )
    return manifest


def count_problems(manifest: dict[str, Any], split: str, found: dict[str, int]) -> list[str]:
    """The manifest's counts of `split` (which its fingerprint does not cover) that differ from `found`,
    what the split's arrays hold ({"examples": …, "groups": …})."""
    counts = manifest.get("counts", {}).get(split)
    if not isinstance(counts, dict):
        return []
    return [
        f"manifest.json counts {split}.{key}={counts[key]!r} but the arrays hold {value}"
        for key, value in found.items()
        if key in counts and counts[key] != value
    ]


def read_verified_manifest(dataset_dir: str | Path, *, full: bool = False) -> dict[str, Any]:
    """The dataset's manifest after checking every listed file (sizes; sha256 of files ≤256 MB, all if `full`).

    Raises TRMError naming the bad file and the rebuild command.
    """
    manifest = read_manifest(dataset_dir)
    problems = check_files(dataset_dir, manifest, full=full)
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise TRMError(
            f"{dataset_dir}: dataset does not match its manifest: {shown}; {rebuild_hint(dataset_dir, manifest)}"
        )
    return manifest
