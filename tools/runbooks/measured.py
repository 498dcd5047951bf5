"""Measured figures (durations, sizes, rates) that the docs state, rendered from one table.

`runbooks/measured.toml` holds one table per figure: `value` (what the docs print), `how` (the command
and machine that measured it) and `date`. In a Markdown file a figure is written as
`<!-- measured:KEY -->VALUE<!-- /measured -->`; `python -m tools.runbooks measured --write` renders every
marker from the table, and `runbooks check` fails on a marker whose text is not the table's value
(stale), on an unknown key, and on a table entry without `value`/`how`/`date`.
"""

from __future__ import annotations

import datetime
import re
import tomllib
from pathlib import Path

from tools.runbooks.pages import reference_pages, runbook_pages
from trm.errors import TRMError
from trm.io import atomic_write_text

TABLE = Path("runbooks/measured.toml")
_MARKER = re.compile(r"<!-- measured:(?P<key>[a-z0-9_]+) -->(?P<text>.*?)<!-- /measured -->", re.S)
FIELDS = ("value", "how", "date")


def load_table(root: Path) -> dict[str, dict]:
    path = root / TABLE
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TRMError(f"{path} is missing: the measured figures the docs render live there") from None
    except tomllib.TOMLDecodeError as err:
        raise TRMError(f"{path}: not valid TOML ({err}); fix the file") from None
    for key, entry in data.items():
        if not isinstance(entry, dict) or any(
            not isinstance(entry.get(f), (str, datetime.date)) for f in FIELDS
        ):
            raise TRMError(
                f"{path}: [{key}] needs string `value`, `how` (what measured it) and `date`; add them"
            )
    return data


def doc_paths(root: Path) -> list[Path]:
    """Every page that may carry a marker: the READMEs, docs/ (not docs/gpu-runs/) and the runbooks."""
    return reference_pages(root) + runbook_pages(root)


def render(text: str, table: dict[str, dict], where: str) -> str:
    def sub(match: re.Match) -> str:
        key = match["key"]
        if key not in table:
            raise TRMError(f"{where}: measured:{key} is not in {TABLE}; add it there (value, how, date)")
        return f"<!-- measured:{key} -->{table[key]['value']}<!-- /measured -->"

    return _MARKER.sub(sub, text)


def stale(root: str | Path = ".") -> list[str]:
    """Markers whose text differs from the table, or name a key it lacks."""
    root = Path(root)
    table = load_table(root) if (root / TABLE).exists() else {}
    problems = []
    for path in doc_paths(root):
        text = path.read_text(encoding="utf-8")
        for match in _MARKER.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            key = match["key"]
            if key not in table:
                problems.append(
                    f"{path}:{line}: measured:{key} is not in {TABLE}; add it there (value, how, date)"
                )
            elif match["text"] != table[key]["value"]:
                problems.append(
                    f"{path}:{line}: measured:{key} says {match['text']!r}, {TABLE} says {table[key]['value']!r}; "
                    "run `python -m tools.runbooks measured --write`"
                )
    return problems


def write(root: str | Path = ".") -> list[Path]:
    """Render every marker from the table; returns the files that changed."""
    root = Path(root)
    table = load_table(root)
    changed = []
    for path in doc_paths(root):
        text = path.read_text(encoding="utf-8")
        new = render(text, table, str(path))
        if new != text:
            atomic_write_text(path, new)
            changed.append(path)
    return changed
