"""detect-secrets plugins for the token formats this project handles that detect-secrets lacks.

detect-secrets loads this file by path (`file://tools/secrets/detectors.py` in `.secrets.baseline`); the
token formats and key words come from `trm.secrets`, the detector core that `publish-checkpoint` and
`package kaggle` also scan staged files with (run detect-secrets from the project venv). Its own plugins already cover private keys, AWS, GitHub, GitLab, Slack,
OpenAI, JWTs, keyword assignments (`api_key=…`, `password: …`) and quoted high-entropy strings; these add
Hugging Face, Prime Intellect, Google API keys, W&B keys (unquoted 40 hex next to a key-like word),
`Authorization: Bearer` values and the data of a Kubernetes `Secret` manifest.
"""

from __future__ import annotations

import re
from collections.abc import Generator
from pathlib import Path
from typing import Any

from detect_secrets.core.potential_secret import PotentialSecret
from detect_secrets.plugins.base import BasePlugin, RegexBasedDetector
from detect_secrets.plugins.keyword import DENYLIST as KEYWORDS
from detect_secrets.util.code_snippet import CodeSnippet

from trm.secrets import HEX40 as _HEX40
from trm.secrets import KEY_WORD as _KEY_WORD
from trm.secrets import REFERENCE as _REFERENCE
from trm.secrets import TOKEN_PATTERNS

# What a line needs before any plugin can find a secret in it: a run of 16 token characters (every token
# format and high-entropy string is longer), a keyword of the keyword plugin (short passwords), a
# `user:pass@` URL or a PEM header (a `kind: Secret` line holds a keyword).
_SECRET_SHAPE = re.compile(
    r"[A-Za-z0-9+/=_\-.~]{16}|" + "|".join(KEYWORDS) + r"|://[^\s/]+:[^\s/]+@|PRIVATE KEY",
    re.I,
)


def is_line_without_secret_shape(line: str) -> bool:
    """detect-secrets line filter: True (skip the line) when no plugin could match it; a cheap first pass."""
    return _SECRET_SHAPE.search(line) is None


class HuggingFaceTokenDetector(RegexBasedDetector):
    """Hugging Face access tokens: `hf_` and 30+ letters or digits."""

    secret_type = "Hugging Face Token"  # pragma: allowlist secret
    denylist = (TOKEN_PATTERNS[secret_type],)


class PrimeIntellectTokenDetector(RegexBasedDetector):
    """Prime Intellect API tokens (`PI_TOKEN`): `pit_` and 24+ letters or digits."""

    secret_type = "Prime Intellect Token"  # pragma: allowlist secret
    denylist = (TOKEN_PATTERNS[secret_type],)


class GoogleApiKeyDetector(RegexBasedDetector):
    """Google API keys: `AIza` and 35 characters."""

    secret_type = "Google API Key"  # pragma: allowlist secret
    denylist = (TOKEN_PATTERNS[secret_type],)


class BearerTokenDetector(RegexBasedDetector):
    """`Authorization: Bearer <token>` values (cloud GPU provider APIs), not `$VARIABLE` references."""

    secret_type = "Bearer Token"  # pragma: allowlist secret
    denylist = (TOKEN_PATTERNS[secret_type],)


class WandbApiKeyDetector(BasePlugin):
    """W&B API keys: 40 lowercase hex characters (a git SHA-1 looks the same, so only next to a key-like
    word on the same line or the line above, as in a Kubernetes `- name: WANDB_API_KEY` / `value: …`
    entry or a `.netrc` `password` line)."""

    secret_type = "W&B API Key"  # pragma: allowlist secret

    def analyze_string(self, string: str) -> Generator[str, None, None]:
        if _KEY_WORD.search(string):
            yield from (m.group(1) for m in _HEX40.finditer(string))

    def analyze_line(
        self,
        filename: str,
        line: str,
        line_number: int = 0,
        context: CodeSnippet | None = None,
        **kwargs: Any,
    ) -> set[PotentialSecret]:
        previous = context.previous_line if context is not None else ""
        keyed = _KEY_WORD.search(line) or _KEY_WORD.search(previous)
        found = {m.group(1) for m in _HEX40.finditer(line)} if keyed else set()
        return {PotentialSecret(self.secret_type, filename, key, line_number) for key in found}


class KubernetesSecretDataDetector(BasePlugin):
    """Values under `data:` / `stringData:` of a manifest of `kind: Secret` (Secrets are created on the
    cluster from a secret store, never committed). Found from the `kind` line, in the file itself: the
    YAML transformer detect-secrets applies first drops the `data:` keys and the indentation."""

    secret_type = "Kubernetes Secret Data"  # pragma: allowlist secret

    def analyze_string(self, string: str) -> Generator[str, None, None]:
        yield from ()  # needs the lines after the `kind` line: see analyze_line

    def analyze_line(
        self, filename: str, line: str, line_number: int = 0, **kwargs: Any
    ) -> set[PotentialSecret]:
        if not re.fullmatch(r"kind:\s*[\"']?Secret[\"']?\s*", line.strip()):
            return set()
        try:
            following = (
                Path(filename).read_text(encoding="utf-8", errors="replace").splitlines()[line_number:]
            )
        except OSError:
            return set()
        found, in_data = set(), False
        for number, text in enumerate(following, start=line_number + 1):
            if text.strip() == "---":
                break
            entry = re.match(r"\s+[\w.-]+:\s*(\S+)", text)
            if re.fullmatch(r"(?:string)?[dD]ata:\s*", text):
                in_data = True
            elif in_data and entry is None:
                in_data = False
            elif in_data and entry is not None and not _REFERENCE.match(entry.group(1)):
                found.add(PotentialSecret(self.secret_type, filename, entry.group(1), number))
        return found
