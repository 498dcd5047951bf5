"""Scan the repository for secrets with detect-secrets (keyword, entropy and vendor-token plugins).

The plugins are detect-secrets' own plus `tools/secrets/detectors.py` (the token formats it lacks:
Hugging Face, Prime Intellect, Google, W&B, Bearer, Kubernetes Secret data). Files scanned: tracked
and untracked-but-not-ignored files of the work tree, except those whose bytes match the `SHA256SUMS`
beside them (the shipped ARC data: pinned third-party files, checked by the dataset builder).

A deliberate example (a test fixture's hash, a placeholder that looks random) is recorded in the
audited `.secrets.baseline` at the repository root: `python -m tools.secrets --update-baseline`
adds the current findings, then `detect-secrets audit .secrets.baseline` marks each one real or not.
A finding fails the scan unless the baseline holds it marked `"is_secret": false`. Findings name the
file, line and type, never the secret itself.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from trm.errors import TRMError
from trm.io import atomic_write_text

BASELINE = ".secrets.baseline"
DETECTORS_FILE = Path(__file__).with_name("detectors.py")
CHECKSUM_FILE = "SHA256SUMS"
# detect-secrets' plugins that apply to this repository (the ones for services it never uses, such as
# Twilio or Square, are left out: fewer regexes per line).
BUILTIN_PLUGINS = (
    "ArtifactoryDetector",
    "AWSKeyDetector",
    "AzureStorageKeyDetector",
    "BasicAuthDetector",
    "DiscordBotTokenDetector",
    "GitHubTokenDetector",
    "GitLabTokenDetector",
    "JwtTokenDetector",
    "KeywordDetector",
    "NpmDetector",
    "OpenAIDetector",
    "PrivateKeyDetector",
    "PypiTokenDetector",
    "SendGridDetector",
    "SlackDetector",
    "StripeDetector",
    "TelegramBotTokenDetector",
)
ENTROPY_PLUGINS = (
    {"name": "Base64HighEntropyString", "limit": 4.5},
    {"name": "HexHighEntropyString", "limit": 3.0},
)
PROJECT_PLUGINS = (
    "BearerTokenDetector",
    "GoogleApiKeyDetector",
    "HuggingFaceTokenDetector",
    "KubernetesSecretDataDetector",
    "PrimeIntellectTokenDetector",
    "WandbApiKeyDetector",
)
# detect-secrets' default filters plus its heuristics against false positives (UUIDs, `$VAR`, templates).
FILTERS = (
    "detect_secrets.filters.allowlist.is_line_allowlisted",
    "detect_secrets.filters.heuristic.is_indirect_reference",
    "detect_secrets.filters.heuristic.is_likely_id_string",
    "detect_secrets.filters.heuristic.is_lock_file",
    "detect_secrets.filters.heuristic.is_not_alphanumeric_string",
    "detect_secrets.filters.heuristic.is_potential_uuid",
    "detect_secrets.filters.heuristic.is_prefixed_with_dollar_sign",
    "detect_secrets.filters.heuristic.is_sequential_string",
    "detect_secrets.filters.heuristic.is_swagger_file",
    "detect_secrets.filters.heuristic.is_templated_secret",
)


@dataclasses.dataclass(frozen=True, order=True)
class Finding:
    """One secret-like string: where it is and what it looks like (the text itself is only hashed)."""

    path: str
    line: int
    type: str
    hashed_secret: str  # sha1, as detect-secrets stores it
    audited: bool = False  # in the baseline, but not (yet) marked a false positive

    def __str__(self) -> str:
        state = "in the baseline, not audited as a false positive" if self.audited else "new"
        return f"{self.path}:{self.line}: {self.type} ({state})"


def plugin_settings(detectors: str) -> dict[str, Any]:
    """detect-secrets settings: plugins and filters; `detectors` is the path written for the project's file."""
    return {
        "plugins_used": [
            *({"name": name} for name in BUILTIN_PLUGINS),
            *ENTROPY_PLUGINS,
            *({"name": name, "path": f"file://{detectors}"} for name in PROJECT_PLUGINS),
        ],
        "filters_used": [
            {"path": f"file://{detectors}::is_line_without_secret_shape"},
            *({"path": path} for path in FILTERS),
        ],
    }


@contextmanager
def _detect_secrets() -> Iterator[Any]:
    """detect-secrets configured with this project's plugins; TRMError when it is not installed."""
    try:
        from detect_secrets.settings import transient_settings
    except ImportError:
        raise TRMError(
            "scan-secrets needs detect-secrets (a dev dependency): pip install -e '.[dev]'"
        ) from None
    with transient_settings(plugin_settings(str(DETECTORS_FILE))) as settings:
        yield settings


def repo_files(root: str | Path) -> list[str]:
    """Tracked and untracked-but-not-ignored files of the git work tree at `root`."""
    proc = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise TRMError(
            f"{root} is not a git work tree ({proc.stderr.strip()}); run the scan from the repository."
        )
    return sorted(p for p in proc.stdout.split("\0") if p)


def _pinned(root: Path, files: list[str]) -> set[str]:
    """Files whose sha256 matches the `SHA256SUMS` in their directory (pinned data, not edited by hand)."""
    pinned: set[str] = set()
    for sums in (f for f in files if Path(f).name == CHECKSUM_FILE):
        folder = Path(sums).parent
        for line in (root / sums).read_text(encoding="utf-8").splitlines():
            digest, _, name = line.partition("  ")
            rel = (folder / name.strip().lstrip("*")).as_posix()
            path = root / rel
            if name and path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == digest.strip():
                pinned.add(rel)
    return pinned


def files_to_scan(root: str | Path) -> list[str]:
    """The repository's text files minus pinned data, symlinks and the baseline itself."""
    root = Path(root)
    files = repo_files(root)
    skip = _pinned(root, files) | {BASELINE}
    return [f for f in files if f not in skip and (root / f).is_file() and not (root / f).is_symlink()]


def _scan(root: Path) -> Any:
    from detect_secrets import SecretsCollection

    secrets = SecretsCollection(root=str(root))
    files = files_to_scan(root)
    if len(files) < 50:  # a process pool costs more than it saves on a few files
        for name in files:
            secrets.scan_file(name)
    else:
        secrets.scan_files(*files, num_processors=max(1, min(4, os.cpu_count() or 1)))
    # detect-secrets records the path it opened (absolute under `root`); the baseline wants the relative one.
    for rel in list(secrets.files):
        found = secrets[rel]
        for secret in found:
            secret.filename = rel
        secrets[rel] = set(found)  # rehashed: the filename is part of a finding's identity
    return secrets


def _read_baseline(root: Path) -> dict[str, Any]:
    path = root / BASELINE
    if not path.exists():
        return {"results": {}}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data.get("results"), dict):
            raise ValueError("no `results` object")
    except ValueError as err:
        raise TRMError(
            f"{path} is not a detect-secrets baseline ({err}); restore it from git or rewrite it with "
            "`python -m tools.secrets --update-baseline`."
        ) from None
    return data


def _false_positives(baseline: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (path, entry["type"], entry["hashed_secret"])
        for path, entries in baseline["results"].items()
        for entry in entries
        if entry.get("is_secret") is False
    }


def _recorded(baseline: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (path, entry["type"], entry["hashed_secret"])
        for path, entries in baseline["results"].items()
        for entry in entries
    }


def scan_repo(root: str | Path) -> list[Finding]:
    """Every finding in the repository that the baseline does not hold as an audited false positive."""
    root = Path(root).resolve()
    baseline = _read_baseline(root)
    allowed, recorded = _false_positives(baseline), _recorded(baseline)
    with _detect_secrets():
        secrets = _scan(root)
    findings = []
    for path, secret in secrets:
        key = (path, secret.type, secret.secret_hash)
        if key not in allowed:
            findings.append(
                Finding(path, secret.line_number, secret.type, secret.secret_hash, key in recorded)
            )
    return sorted(findings)


def _carry_marks_of_moved_files(secrets: Any, old: dict[str, Any], root: Path) -> None:
    """A file moved (`git mv`): its audited entries follow it, matched by type and hash, when the old path is
    gone; detect-secrets' own merge matches by path only."""
    gone: dict[tuple[str, str], bool] = {
        (entry["type"], entry["hashed_secret"]): entry["is_secret"]
        for path, entries in old["results"].items()
        if not (root / path).exists()
        for entry in entries
        if "is_secret" in entry
    }
    for _path, secret in secrets:
        mark = gone.get((secret.type, secret.secret_hash))
        if secret.is_secret is None and mark is not None:
            secret.is_secret = mark


def update_baseline(root: str | Path) -> Path:
    """Rewrite `.secrets.baseline` with the current findings, keeping the audit marks of known ones (also
    of files that moved)."""
    root = Path(root).resolve()
    old = _read_baseline(root)
    with _detect_secrets():
        from detect_secrets import SecretsCollection
        from detect_secrets.core import baseline as ds_baseline

        secrets = _scan(root)
        secrets.merge(SecretsCollection.load_from_baseline(old))
        _carry_marks_of_moved_files(secrets, old, root)
        output = ds_baseline.format_for_output(secrets)
    output.pop("generated_at", None)  # no timestamp: an unchanged scan leaves the file unchanged
    # The repository-relative path of the project's plugins, so `detect-secrets audit` works from the root.
    output.update(plugin_settings(DETECTORS_FILE.relative_to(Path(__file__).parents[2]).as_posix()))
    path = root / BASELINE
    atomic_write_text(path, json.dumps(output, indent=2) + "\n")  # a torn baseline would fail every scan
    return path
