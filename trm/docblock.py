"""Generated blocks of documentation: the text between a BEGIN and an END marker, rewritten by a command."""

from __future__ import annotations

from pathlib import Path

from trm.errors import TRMError


def replace_block(text: str, block: str, path: Path | str, begin: str, end: str) -> str:
    """`text` with what lies between the markers replaced by `block`; TRMError naming `path` when the
    markers are not there once each, in order."""
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise TRMError(f"{path} must contain the markers once, in order:\n{begin}\n{end}")
    head, rest = text.split(begin)
    _, tail = rest.split(end)
    return f"{head}{begin}\n{block}\n{end}{tail}"


def block_of(text: str, path: Path | str, begin: str, end: str) -> str:
    """What lies between the markers (stripped), as `replace_block` writes it."""
    replace_block(text, "", path, begin, end)  # the same checks
    return text.split(begin, 1)[1].split(end, 1)[0].strip()
