"""The secret detector core: token formats and key names, shared by the repository scan (tools/secrets)
and by every command that stages files for others (`publish-checkpoint`, `package kaggle`).

`scan_folder` reads every file of a staged folder: JSON files key by key (a finding names the key path,
e.g. `config.json: project_name`), other files line by line (`README.md: line 12`), binary files (a
checkpoint's pickled config) as bytes. A finding never carries the value itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Vendor token formats (the value itself is the evidence). Group 1 is the secret.
TOKEN_PATTERNS: dict[str, re.Pattern[str]] = {
    "Hugging Face Token": re.compile(r"\b(hf_[A-Za-z0-9]{30,})\b"),
    "Prime Intellect Token": re.compile(r"\b(pit_[A-Za-z0-9]{24,})\b"),
    "Google API Key": re.compile(r"\b(AIza[0-9A-Za-z_\-]{35})(?![0-9A-Za-z_\-])"),
    "Bearer Token": re.compile(r"\bBearer\s+([A-Za-z0-9_\-.=]{24,})"),
    "GitHub Token": re.compile(
        r"\b((?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})\b"
    ),
    "AWS Access Key": re.compile(r"\b((?:AKIA|ASIA)[0-9A-Z]{16})\b"),
    "OpenAI Key": re.compile(r"\b(sk-(?:proj-)?[A-Za-z0-9_\-]{32,})\b"),
    "Slack Token": re.compile(r"\b(xox[abposr]-[A-Za-z0-9-]{10,})\b"),
    "Private Key": re.compile(r"(-----BEGIN [A-Z ]*PRIVATE KEY-----)"),
}
# A word that makes a neighbouring 40-hex string (or any value of a key so named) a credential.
KEY_WORD = re.compile(r"api[_-]?key|wandb|secret|token|passw(?:or)?d|auth|credential|access[_-]?key", re.I)
HEX40 = re.compile(r"(?<![0-9a-fA-F])([0-9a-f]{40})(?![0-9a-fA-F])")
# A value that only refers to a secret: a variable, a placeholder, a template.
REFERENCE = re.compile(r"^(?:\$|<|\{\{|%\(|\.\.\.|your[_-]|xxx|changeme|redacted|example)", re.I)
# Key names that hold a secret whatever its shape (a W&B key, a password): `api_key`, `HF_TOKEN`, `secret`.
SECRET_KEY = re.compile(
    r"(?:^|[_\-.])(?:api[_-]?key|apikey|token|secret|password|passwd|access[_-]?key)$", re.I
)
MIN_SECRET_LENGTH = 8
# In a binary file (a pickled checkpoint) each string is a run of printable bytes.
PRINTABLE_RUN = re.compile(rb"[\x20-\x7e]{16,}")
# Credentials a URL carries: a user and password before the host and a `?token=…`-like query parameter.
URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@'\"]+@")
URL_SECRET_PARAM = re.compile(
    r"(?i)([?&][^=&\s'\"]*(?:token|key|secret|passw|auth|signature)[^=&\s'\"]*=)[^&\s'\"]+"
)
REDACTED = "***"


@dataclass(frozen=True, order=True)
class Finding:
    """Where a secret-like value is (file and key or line) and what it looks like; never the value."""

    path: str
    where: str
    type: str

    def __str__(self) -> str:
        return f"{self.path}: {self.where} ({self.type})"


def in_text(text: str, *, loose: bool = True) -> Iterator[str]:
    """The types of the secrets in one line or string. `loose`: also a 40-hex run anywhere in a text that
    names a key word (a W&B key in a log line); off for a setting a person typed, where a Hub reference
    pinned to a commit (`hf://org/tokenizer-run@<40 hex>`) has both."""
    for name, pattern in TOKEN_PATTERNS.items():
        if pattern.search(text):
            yield name
    if loose and _loose_key(text):
        yield "W&B API Key"


def _loose_key(text: str) -> bool:
    """The loose rule: a key word and a 40-hex run in one text (a W&B key in a log line)."""
    return bool(KEY_WORD.search(text) and HEX40.search(text))


def redact(text: str, values: Iterable[str | None] = ()) -> str:
    """`text` (an error message about to be shown) with every secret in it replaced by `***`: the
    credentials of a URL, a vendor token (TOKEN_PATTERNS) and each of `values` (the token in use)."""
    for value in values:
        if value and len(value) >= MIN_SECRET_LENGTH:
            text = text.replace(value, REDACTED)
    text = URL_USERINFO.sub(rf"\1{REDACTED}@", text)
    text = URL_SECRET_PARAM.sub(rf"\1{REDACTED}", text)
    for pattern in TOKEN_PATTERNS.values():
        text = pattern.sub(lambda m: m.group(0).replace(m.group(1), REDACTED), text)
    return text


# `may_redact`'s quick scans: each pattern `redact_found` replaces with, as a superset that Python's re finds
# at the speed of a substring search (a leading \b dropped: the pattern then begins with its literal); the
# URL credentials follow a scheme's "://", and a 40-hex run is found in the text's bytes mapped to two classes.
_QUICK = tuple(
    re.compile(p.pattern.removeprefix(r"\b"), p.flags) for p in (*TOKEN_PATTERNS.values(), URL_SECRET_PARAM)
)
_HEX_CLASS = bytes(ord("h") if chr(c) in "0123456789abcdef" else ord(".") for c in range(256))


def may_redact(text: str) -> bool:
    """False only when `redact_found` would leave every line of `text` as it is: a few fast scans over a
    whole block of a log (tens of MB/s) instead of a dozen regular expressions per line (1-2 MB/s)."""
    if "://" in text or any(pattern.search(text) for pattern in _QUICK):
        return True
    return b"h" * 40 in text.encode("utf-8", "surrogateescape").translate(_HEX_CLASS)


def redact_found(text: str) -> str:
    """`text` (a log line, a recorded setting) with what `in_text` finds replaced by `***`: `redact`'s
    credentials and tokens and, where the loose rule holds, each 40-hex run but a Hub revision
    (`hf://org/tokenizer-run@<40 hex>` names a commit, not a key)."""
    shown = redact(text)
    if _loose_key(shown):
        shown = HEX40.sub(lambda m: m[0] if m.string[m.start() - 1 : m.start()] == "@" else REDACTED, shown)
    return shown


def redact_object(obj: Any, key: str = "") -> tuple[Any, int]:
    """(a JSON-like object with every secret-like string redacted, how many keys and values were): a value
    `redact_found` changes, else the whole value of a secret-named key (`in_value`, without the loose rule,
    which `redact_found` applied); a key `redact_found` changes (a token used as a key), made unique
    (`redacted_keys`)."""
    if isinstance(obj, dict):
        keys = redacted_keys(list(obj))
        pairs = [(keys[i], *redact_object(v, str(k))) for i, (k, v) in enumerate(obj.items())]
        changed = sum(shown != k for shown, k in zip(keys, obj, strict=True))
        return {k: v for k, v, _ in pairs}, changed + sum(n for _, _, n in pairs)
    if isinstance(obj, list | tuple):
        items = [redact_object(v, key) for v in obj]
        return [v for v, _ in items], sum(n for _, n in items)
    if isinstance(obj, str):
        shown = redact_found(obj)
        if shown == obj and in_value(key, obj, loose=False):
            shown = REDACTED
        return shown, int(shown != obj)
    return obj, 0


def redacted_keys(keys: list[Any]) -> list[Any]:
    """A mapping's keys, in order, with the secrets in each string key replaced (`redact_found`). Two keys
    that redact to the same text, or to a key the mapping already has, stay two entries: the later one
    gets ` (2)`, ` (3)`, … (the first free number), so no value is dropped by a merge."""
    shown = [redact_found(k) if isinstance(k, str) else k for k in keys]
    taken = {k for k, s in zip(keys, shown, strict=True) if s == k}
    out = []
    for k, s in zip(keys, shown, strict=True):
        if s != k:
            unique, n = s, 2
            while unique in taken:
                unique, n = f"{s} ({n})", n + 1
            taken.add(unique)
            s = unique
        out.append(s)
    return out


def in_value(key: str, value: str, *, loose: bool = True) -> list[str]:
    """The types of the secrets in a string `value` stored under the key `key` (`loose`: see in_text)."""
    found = list(in_text(value, loose=loose))
    if not found and HEX40.fullmatch(value.strip()) and KEY_WORD.search(key):
        found.append("W&B API Key")
    if (
        not found
        and SECRET_KEY.search(key)
        and len(value) >= MIN_SECRET_LENGTH
        and not REFERENCE.match(value)
    ):
        found.append("value of a secret-named key")
    return found


def in_object(obj: Any, path: str, where: str = "", key: str = "") -> Iterator[Finding]:
    """Findings in a JSON-like object, each naming its key path (`a.b[2].c`); a secret used as a key is a
    finding too, named by the path with `***` in its place (a finding never shows a secret)."""
    if isinstance(obj, dict):
        for k, shown in zip(obj, redacted_keys(list(obj)), strict=True):
            at = f"{where}.{shown}" if where else str(shown)
            for kind in in_text(k) if isinstance(k, str) else ():
                yield Finding(path, f"key name {at}", kind)
            yield from in_object(obj[k], path, at, str(k))
    elif isinstance(obj, list | tuple):
        for i, value in enumerate(obj):
            yield from in_object(value, path, f"{where}[{i}]", key)
    elif isinstance(obj, str):
        for kind in in_value(key, obj):
            yield Finding(path, f"key {where or '(top level)'}", kind)


def in_file(file: Path, rel: str) -> list[Finding]:
    """Findings in one file: JSON key by key, text line by line, other bytes as Latin-1 text."""
    data = file.read_bytes()
    if file.suffix == ".json":
        try:
            return sorted(set(in_object(json.loads(data), rel)))
        except ValueError:
            pass
    try:
        text = data.decode("utf-8")
        lines = text.splitlines()
        return sorted(
            {Finding(rel, f"line {n}", kind) for n, line in enumerate(lines, 1) for kind in in_text(line)}
        )
    except UnicodeDecodeError:
        runs = (m.group().decode("ascii") for m in PRINTABLE_RUN.finditer(data))
        return sorted({Finding(rel, "binary content", kind) for run in runs for kind in in_text(run)})


def scan_folder(root: Path, *, skip: tuple[str, ...] = ()) -> list[Finding]:
    """Every finding in the files below `root` (paths relative to it); `skip`: relative files or folders
    not read (third-party wheels)."""
    findings: list[Finding] = []
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = file.relative_to(root).as_posix()
        if any(rel == s or rel.startswith(f"{s}/") for s in skip):
            continue
        findings.extend(in_file(file, rel))
    return findings


def require_no_secrets(root: Path, what: str, *, skip: tuple[str, ...] = (), hint: str = "") -> None:
    """Raise TRMError (exit 2) naming each file and key of a secret-like value staged in `root`."""
    from trm.errors import TRMError

    findings = scan_folder(root, skip=skip)
    if findings:
        listed = "; ".join(str(f) for f in findings[:5]) + (
            f"; and {len(findings) - 5} more" if len(findings) > 5 else ""
        )
        raise TRMError(
            f"{what}: stopped, a secret-like value would be published ({listed}; values not shown). "
            f"Nothing was published. Remove it{hint}, rotate the key if it is real, and rerun"
        )
