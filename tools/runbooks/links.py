"""Relative Markdown links of the documentation point at files that exist, and at headings that exist.

A link `[text](path)` or `[text](path#anchor)` (images too) outside code is resolved against the page's
folder: the path must exist (a file or a folder), and an anchor into a Markdown file must be one of its
headings' GitHub anchors (lowercase; punctuation dropped; spaces become `-`; a repeated heading gets
`-1`, `-2`, …). `#anchor` alone points into the page itself. Links with a scheme (https:, mailto:) are
not followed.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from tools.runbooks.pages import reference_pages, runbook_pages

_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_INLINE_CODE = re.compile(r"(`+).*?\1")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the text outside fenced code blocks, inline code removed."""
    lines, fenced = [], None
    for number, line in enumerate(text.splitlines(), 1):
        fence = _FENCE.match(line)
        if fence:
            fenced = None if fenced == fence.group(1) else (fenced or fence.group(1))
            continue
        if fenced is None:
            lines.append((number, _INLINE_CODE.sub("", line)))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor of a heading's text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = text.replace("`", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@functools.cache
def anchors(path: Path) -> frozenset[str]:
    """Every anchor a Markdown file defines: its headings' slugs and explicit <a name/id> anchors."""
    text = path.read_text(encoding="utf-8")
    seen: dict[str, int] = {}
    found = set(_HTML_ANCHOR.findall(text))
    fenced = None
    for line in text.splitlines():
        fence = _FENCE.match(line)
        if fence:
            fenced = None if fenced == fence.group(1) else (fenced or fence.group(1))
            continue
        match = _HEADING.match(line) if fenced is None else None
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def link_problems(page: Path, root: Path) -> list[str]:
    """The broken relative links of one Markdown page, each with its line and the fix."""
    where = page.relative_to(root) if page.is_relative_to(root) else page
    problems = []
    for number, line in prose_lines(page.read_text(encoding="utf-8")):
        for match in _LINK.finditer(line):
            target = match.group(1)
            if not target or _SCHEME.match(target):
                continue
            path_part, _, anchor = target.partition("#")
            dest = (page.parent / path_part).resolve() if path_part else page
            if not dest.exists():
                problems.append(
                    f"{where}:{number}: link {target!r} points to a file that does not exist; fix the path"
                )
            elif anchor and dest.is_file() and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(
                    f"{where}:{number}: link {target!r}: {dest.name} has no heading with the anchor #{anchor}; "
                    "fix the anchor"
                )
    return problems


def broken_links(root: str | Path = ".") -> list[str]:
    """Broken relative links of the READMEs, docs/ (not docs/gpu-runs/) and the runbooks."""
    root = Path(root).resolve()
    return [p for page in reference_pages(root) + runbook_pages(root) for p in link_problems(page, root)]
