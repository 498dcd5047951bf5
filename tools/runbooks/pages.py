"""Which Markdown files are the repository's documentation, for every check that reads them (measured
figures, links, documented commands): the READMEs, the reference pages under docs/ and the runbooks.
docs/gpu-runs/ is left out: those are records of GPU runs as they happened, never rewritten."""

from __future__ import annotations

from pathlib import Path

READMES = ("README.md", "docker/README.md", "jobs/README.md", "runbooks/README.md")
DOCS_DIR = Path("docs")
RECORDS_DIR = DOCS_DIR / "gpu-runs"


def reference_pages(root: str | Path = ".") -> list[Path]:
    """The READMEs that exist and every docs/**/*.md outside docs/gpu-runs/, README.md first."""
    root = Path(root)
    readmes = [root / r for r in READMES if (root / r).is_file()]
    records = root / RECORDS_DIR
    docs = sorted(p for p in (root / DOCS_DIR).rglob("*.md") if not p.is_relative_to(records))
    return readmes + docs


def runbook_pages(root: str | Path = ".") -> list[Path]:
    """The versioned runbooks, runbooks/v*/*.md."""
    return sorted(Path(root, "runbooks").glob("v*/*.md"))
