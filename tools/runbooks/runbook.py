"""Parse versioned runbooks: a YAML header between `---` lines, then Markdown with tagged shell blocks.

A runbook's commands live in fenced blocks whose info string is `<language> <tier>`:

- `bash cpu`   runs anywhere (laptop, CI): `nox -s runbooks` executes these, in order, for real;
- `bash gpu`   needs the GPU host (or the image on it): syntax- and reference-checked;
- `bash cloud` talks to a provider or a cluster (vastai, prime, kubectl): syntax- and reference-checked.

Blocks with any other info string (`text`, `yaml`, `console`) are documentation: never executed.

A shell block may name the environment it runs in with a third word, `env=<name>` (`tools.runbooks.journey`
lists them: `laptop`, `docker-host`, `image`, `vast-venv`); `bash gpu` blocks must. The journey checks
verify that every command a block uses exists there and that its variables were set before it.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import yaml

from trm.errors import TRMError

TIERS = ("cpu", "gpu", "cloud")
HEADER_KEYS = (
    "runbook",
    "title",
    "version",
    "date",
    "image_variant",
    "image",
    "image_digest",
    "procedure_sha256",
)


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced code block of a runbook."""

    path: Path
    line: int  # 1-based line of the opening fence
    language: str
    tier: str | None  # one of TIERS for executable shell blocks, else None
    code: str
    env: str | None  # `env=<name>` of the info string (tools.runbooks.journey.ENVIRONMENTS)
    end_line: int  # 1-based line of the closing fence

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


@dataclasses.dataclass(frozen=True)
class Runbook:
    """A parsed runbook file."""

    path: Path
    header: dict
    body: str
    body_line: int  # 1-based line where the body starts
    blocks: tuple[Block, ...]

    @property
    def name(self) -> str:
        return str(self.header["runbook"])

    @property
    def version(self) -> int:
        return int(self.header["version"])

    def blocks_of(self, tier: str) -> list[Block]:
        """The shell blocks of one tier, in document order."""
        return [b for b in self.blocks if b.tier == tier]


def procedure_hash(body: str) -> str:
    """sha256 of a runbook's procedure (its body, trailing whitespace of lines ignored)."""
    normalized = "\n".join(line.rstrip() for line in body.strip().splitlines()) + "\n"
    return hashlib.sha256(normalized.encode("utf-8")).hexdigest()


def split_header(text: str, path: Path) -> tuple[dict, str, int]:
    """Split `text` into (header mapping, body, first body line)."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise TRMError(f"{path}: a runbook starts with a `---` YAML header ({', '.join(HEADER_KEYS)}).")
    for end in range(1, len(lines)):
        if lines[end].strip() == "---":
            break
    else:
        raise TRMError(f"{path}: the YAML header is not closed by a `---` line.")
    try:
        header = yaml.safe_load("".join(lines[1:end])) or {}
    except yaml.YAMLError as err:
        raise TRMError(f"{path}: the YAML header does not parse ({err}); fix its syntax.") from err
    if not isinstance(header, dict):
        raise TRMError(f"{path}: the YAML header must be a mapping of {', '.join(HEADER_KEYS)}.")
    missing = [key for key in HEADER_KEYS if key not in header]
    if missing:
        raise TRMError(f"{path}: header is missing {', '.join(missing)}; add them (see runbooks/README.md).")
    return header, "".join(lines[end + 1 :]), end + 2


def parse_blocks(body: str, path: Path, first_line: int = 1) -> tuple[Block, ...]:
    """Fenced code blocks of a Markdown body (CommonMark, by markdown-it-py); shell blocks must carry a
    known tier."""
    from markdown_it import MarkdownIt  # the dev extra; the GPU kit's hosts collect tests without it

    lines = body.splitlines()
    blocks: list[Block] = []
    for token in MarkdownIt("commonmark").parse(body):
        if token.type != "fence" or token.map is None:
            continue
        start, end = token.map
        where = f"{path}:{first_line + start}"
        closing = lines[end - 1].lstrip(" >").rstrip() if end - 1 > start else ""  # also in a quote
        if not closing.startswith(token.markup) or closing.strip(token.markup[0]):
            # CommonMark closes an unclosed fence at the end of the document (or of its list item).
            raise TRMError(f"{where}: code block is never closed; add a closing {token.markup}.")
        words = token.info.split()
        language = words[0] if words else ""
        tier = words[1] if len(words) > 1 else None
        env = next((w.split("=", 1)[1] for w in words[2:] if w.startswith("env=")), None)
        if language in ("bash", "sh", "shell"):
            if tier not in TIERS:
                raise TRMError(
                    f"{where}: shell block tagged {token.info.strip()!r}; tag it `bash cpu`, `bash gpu` "
                    "or `bash cloud` (use `text` for output that is not a command)."
                )
        else:
            tier = None
        code = token.content if token.content.endswith("\n") else token.content + "\n"
        blocks.append(Block(path, first_line + start, language, tier, code, env, first_line + end - 1))
    return tuple(blocks)


def load_runbook(path: str | Path) -> Runbook:
    """Read and parse one runbook file."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    header, body, body_line = split_header(text, path)
    return Runbook(path, header, body, body_line, parse_blocks(body, path, body_line))


def runbook_paths(root: str | Path) -> list[Path]:
    """Every runbook under `root` (`runbooks/v*/NN-name.md`), in procedure order."""
    root = Path(root)
    paths = sorted(root.glob("v*/*.md"), key=lambda p: (p.parent.name, p.name))
    if not paths:
        raise TRMError(f"no runbooks under {root}/v*/; run from the repository root.")
    return paths


def load_all(root: str | Path) -> list[Runbook]:
    """Parse every runbook; names must be unique."""
    books = [load_runbook(p) for p in runbook_paths(root)]
    seen: dict[str, Path] = {}
    for book in books:
        if book.name in seen:
            raise TRMError(f"{book.path}: runbook name {book.name!r} is already used by {seen[book.name]}.")
        seen[book.name] = book.path
    return books


def render_header(header: dict) -> str:
    """The header block in canonical key order."""
    ordered = {key: header[key] for key in HEADER_KEYS}
    ordered.update({k: v for k, v in header.items() if k not in ordered})
    dumped = yaml.safe_dump(ordered, sort_keys=False, default_flow_style=False, width=200, allow_unicode=True)
    return f"---\n{dumped}---\n"
