"""Scan the repository for secret-like strings (API keys, W&B keys, cloud keys, private keys, tokens).

A finding is reported with file, line and rule, never with the secret itself. Deliberate examples are
allowed by listing `<path> <rule> <sha256 of the matched text>` in `.secrets-allowlist` (the hash, not
the text, so the allowlist is no secret either); `python -m trm scan-secrets --print-allowlist` prints
the lines for the current findings.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import re
import subprocess
from pathlib import Path

from trm.errors import TRMError

ALLOWLIST = ".secrets-allowlist"
_KEYWORD = r"(?:api[_-]?key|apikey|secret|token|passw(?:or)?d|auth|credential|wandb|access[_-]?key)"
# A value that is clearly not a secret: a variable, a placeholder, a command substitution, empty.
_PLACEHOLDER = re.compile(
    r"^(?:\$|<|\{\{|%\(|\.\.\.|…|your[_-]|xxx|changeme|redacted|none$|null$|true$|false$|example)", re.I
)

RULES: dict[str, re.Pattern[str]] = {
    "private-key": re.compile(
        r"-----BEGIN (?:RSA |EC |DSA |OPENSSH |ENCRYPTED |PGP )?PRIVATE KEY(?: BLOCK)?-----"
    ),
    "aws-access-key-id": re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA)[0-9A-Z]{16}\b"),
    "aws-secret-access-key": re.compile(
        r"aws_?secret_?access_?key\s*[:=]\s*['\"]?([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])", re.I
    ),
    "github-token": re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{60,})\b"),
    "gitlab-token": re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}\b"),
    "huggingface-token": re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"),
    "openai-style-key": re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{32,}\b"),
    "slack-token": re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b"),
    "google-api-key": re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"),
    "vastai-or-bearer-token": re.compile(r"\bBearer\s+([A-Za-z0-9_\-.=]{24,})"),
    # W&B API keys are 40 lowercase hex characters (newer ones carry a prefix before them). A 40-hex
    # string is also what a git SHA-1 looks like, so it counts only next to a key-like word.
    # The key may sit on the next line (a Kubernetes env entry: `- name: WANDB_API_KEY` / `value: …`).
    "wandb-key": re.compile(
        rf"{_KEYWORD}[^\n]{{0,40}}?(?:\n[^\n]{{0,40}}?)?(?<![0-9a-f])([0-9a-f]{{40}})(?![0-9a-f])", re.I
    ),
    "wandb-netrc": re.compile(r"machine\s+api\.wandb\.ai\s+login\s+\S+\s+password\s+(\S+)"),
    # ~/.kaggle/kaggle.json: {"username": "…", "key": "<32 hex>"}
    "kaggle-key": re.compile(r"[\"']key[\"']\s*:\s*[\"']([0-9a-f]{32})[\"']"),
    # A Kubernetes Secret manifest with values: Secrets are created on the cluster, never committed.
    "kubernetes-secret-data": re.compile(
        r"(?m)^kind:\s*Secret\s*$(?:\n(?!---).*)*?\n(?:string)?[dD]ata:\s*\n\s+[\w.-]+:\s*(\S+)"
    ),
    "assigned-secret": re.compile(
        rf"\b[A-Za-z0-9_]*{_KEYWORD}[A-Za-z0-9_]*['\"]?\s*[:=]\s*['\"]?([A-Za-z0-9_\-+/=.]{{20,}})", re.I
    ),
}
# Cheap substring pre-checks: a rule's regex runs only on text containing one of its anchors
# (lower-cased text for the keyword rules), which keeps a scan of the shipped ARC JSON fast.
_KEYWORD_ANCHORS = ("key", "secret", "token", "passw", "auth", "credential", "wandb")
_ANCHORS: dict[str, tuple[str, ...]] = {
    "private-key": ("PRIVATE KEY",),
    "aws-access-key-id": ("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA", "ANVA"),
    "github-token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    "gitlab-token": ("glpat-",),
    "huggingface-token": ("hf_",),
    "openai-style-key": ("sk-",),
    "slack-token": ("xox",),
    "google-api-key": ("AIza",),
    "vastai-or-bearer-token": ("Bearer",),
    "wandb-netrc": ("wandb.ai",),
    "kaggle-key": ("key",),
    "kubernetes-secret-data": ("Secret",),
}
_VALUE_GROUP_RULES = {"aws-secret-access-key", "vastai-or-bearer-token", "wandb-key", "wandb-netrc"}


@dataclasses.dataclass(frozen=True)
class Finding:
    """One secret-like string: where it is and which rule matched (the text itself is only hashed)."""

    path: str
    line: int
    rule: str
    fingerprint: str  # sha256 of the matched text

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.rule} (sha256 {self.fingerprint[:12]}…)"

    @property
    def allow_line(self) -> str:
        return f"{self.path} {self.rule} {self.fingerprint}"


def _looks_like_value(text: str) -> bool:
    """An assigned value that is a real-looking secret: mixed, not a placeholder, not a path or word."""
    if _PLACEHOLDER.match(text) or ("/" in text.strip("/") and not re.search(r"[0-9]", text)):
        return False
    has_digit = bool(re.search(r"[0-9]", text))
    has_alpha = bool(re.search(r"[A-Za-z]", text))
    if not (has_digit and has_alpha):
        return False
    if re.fullmatch(r"[a-z_\-.]+[0-9]*[a-z_\-.]*", text):  # snake_case identifiers, file names
        return False
    return not re.fullmatch(r"(?:[a-z]+[_\-.])+[a-z0-9]+", text)


def scan_text(text: str, path: str) -> list[Finding]:
    """Findings in one file's text."""
    findings: list[Finding] = []
    seen: set[tuple[int, str]] = set()
    lowered = text.lower()
    for rule, pattern in RULES.items():
        anchors = _ANCHORS.get(rule)
        haystack = text if anchors else lowered
        if not any(anchor in haystack for anchor in anchors or _KEYWORD_ANCHORS):
            continue
        for match in pattern.finditer(text):
            value = match.group(1) if match.groups() and match.group(1) else match.group(0)
            if rule == "assigned-secret" and not _looks_like_value(value):
                continue
            if rule in _VALUE_GROUP_RULES and _PLACEHOLDER.match(value):
                continue
            line = text.count("\n", 0, match.start()) + 1
            key = (line, value)
            if key in seen:
                continue
            seen.add(key)
            digest = hashlib.sha256(value.encode("utf-8")).hexdigest()
            findings.append(Finding(path, line, rule, digest))
    return findings


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


def read_allowlist(root: str | Path) -> set[tuple[str, str, str]]:
    """Entries `(path glob, rule, sha256)` of `.secrets-allowlist` (`#` comments allowed)."""
    path = Path(root) / ALLOWLIST
    if not path.exists():
        return set()
    entries = set()
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 3 or not re.fullmatch(r"[0-9a-f]{64}", parts[2]) or parts[1] not in RULES:
            raise TRMError(
                f"{path}:{number}: expected `<path glob> <rule> <sha256>` with a rule from "
                f"{', '.join(RULES)}; print valid lines with `python -m trm scan-secrets --print-allowlist`."
            )
        entries.add((parts[0], parts[1], parts[2]))
    return entries


def _allowed(finding: Finding, allow: set[tuple[str, str, str]]) -> bool:
    return any(
        rule == finding.rule and digest == finding.fingerprint and fnmatch.fnmatch(finding.path, glob)
        for glob, rule, digest in allow
    )


def scan_repo(root: str | Path, *, max_bytes: int = 20_000_000) -> list[Finding]:
    """Every non-allowlisted finding in the repository's files (binary files are skipped)."""
    root = Path(root)
    allow = read_allowlist(root)
    findings = []
    for rel in repo_files(root):
        path = root / rel
        if not path.is_file() or path.is_symlink() or path.stat().st_size > max_bytes:
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue
        text = data.decode("utf-8", errors="replace")
        findings += [f for f in scan_text(text, rel) if not _allowed(f, allow)]
    return findings
