"""The handoff bundle's copies with their secrets taken out.

The bundle is synced and published, and what it copies was written by code that does not know that: a
token a user's code printed into train.log, a credential an older launcher recorded in plan.json (now refused
at input; handoff.json carries plan.json's launch settings). The bundle is made at the end of a run, so a
secret is redacted rather than refused: each copy gets `***` in its place (trm.secrets' detectors), the
bundle records which files and how many lines or values, never the values, and the run's own files are
left as they are.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from trm.io import atomic_write_json
from trm.secrets import may_redact, redact_found, redact_object

BLOCK_CHARS = 1 << 18  # characters of whole lines scanned at once


def copy_redacted(src: Path, dst: Path) -> int:
    """Copy `src` to `dst` with its secrets replaced by `***`; the number of lines (a text file) or string
    values (a JSON file) that held one. Every byte not redacted is copied as it is (a log's stray non-UTF-8
    byte too)."""
    if src.suffix == ".json":
        try:
            data = json.loads(src.read_bytes())
        except ValueError:  # not JSON after all: redacted line by line below
            pass
        else:
            shown, count = redact_object(data)
            if count:
                atomic_write_json(dst, shown)
            else:  # as it is: its lines are not read as log lines (a key word and a commit id on one)
                shutil.copyfile(src, dst)
            return count
    count = 0
    with (
        open(src, encoding="utf-8", errors="surrogateescape", newline="") as fin,
        open(dst, "w", encoding="utf-8", errors="surrogateescape", newline="") as fout,
    ):
        # A multi-day train.log is hundreds of MB: blocks of whole lines that hold nothing to redact (nearly
        # all) are copied after one scan per pattern; only a block with a candidate is redacted line by line.
        while lines := fin.readlines(BLOCK_CHARS):
            block = "".join(lines)
            if not may_redact(block):
                fout.write(block)
                continue
            for line in lines:
                shown = redact_found(line)
                count += shown != line
                fout.write(shown)
    return count


def redaction_line(redacted: dict[str, int]) -> str:
    """run.info's line: which copies had secrets replaced, or that none had."""
    if not redacted:
        return "none found in the copies"
    listed = ", ".join(f"{name} ({count})" for name, count in sorted(redacted.items()))
    return f"replaced by *** in {listed}; the run's own files are unchanged"
