"""The check's report folder (--out): what a run may write over there, and a fresh work/ for every run.

A run writes `report.json`, `report.md` and `work/` (each part's log, its datasets, run folders and
workspaces) into --out. It replaces a report only when the file there is one the check wrote, so a user's
file of that name is never overwritten. An earlier run's `work/` is moved aside to `work.earlier-N/` (kept,
never deleted) instead of being reused: a part would otherwise find the earlier run's dataset (which
`trm data build-arc` refuses to replace), resume the earlier run's checkpoints, or report its probe.json as
this run's. A `work/` carries the creation marker of trm.safe_remove from its start (kind WORK_KIND); one
without it, in a folder holding no report of the check, is a user's: refused untouched."""

from __future__ import annotations

import json
import os
from pathlib import Path

from trm.errors import TRMError
from trm.safe_remove import check_file_replaceable, clear_killed_marker, read_marker, write_marker

REPORT_JSON, REPORT_MD, WORK = "report.json", "report.md", "work"
MARKDOWN_TITLE = "# GPU acceptance"  # report.render_markdown's first line
WORK_KIND = "gpu-check-work"


def is_report_json(path: Path) -> bool:
    """Whether `path` holds a report.json the check wrote (its parts and its plan)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(record, dict) and isinstance(record.get("parts"), list) and "planned_h100_s" in record


def is_report_md(path: Path) -> bool:
    """Whether `path` holds a report.md the check wrote (its title line)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.readline().startswith(MARKDOWN_TITLE)
    except (OSError, UnicodeDecodeError):
        return False


def _holds_something(path: Path) -> bool:
    """Whether `path` is there and is not an empty folder."""
    return path.is_symlink() or (path.exists() and (not path.is_dir() or any(path.iterdir())))


def check_out(out: Path) -> None:
    """Raise TRMError (one line, exit 2) when a run may not write into `out`; checked before any part runs."""
    if out.exists() and not out.is_dir():
        raise TRMError(f"--out {out}: refusing to write the report there: it is a file, not a folder")
    for name, ours in ((REPORT_JSON, is_report_json), (REPORT_MD, is_report_md)):
        check_file_replaceable(out / name, flag="--out", ours=ours, what="a GPU check report", example=name)
    work = out / WORK
    clear_killed_marker(work)  # a check killed while it marked its new work/ left only the marker's temp
    if not _holds_something(work):
        return
    if (read_marker(work) or {}).get("kind") != WORK_KIND and not is_report_json(out / REPORT_JSON):
        raise TRMError(
            f"--out {out}: refusing to use {work}: it holds no marker of the check and {out} no report of it, so "
            "the check did not write it; nothing was changed. Choose a new or empty folder (or move it yourself)"
        )


def fresh_work(out: Path) -> tuple[Path, Path | None]:
    """An empty `out/work/` for this run: an earlier run's is moved aside to the first free
    `work.earlier-N/` (after `check_out` allowed it). Returns (work, where the earlier one went or None)."""
    work = out / WORK
    moved = None
    if _holds_something(work):  # an empty work/ is reused
        n = 1
        while (out / f"{WORK}.earlier-{n}").exists() or (out / f"{WORK}.earlier-{n}").is_symlink():
            n += 1
        moved = out / f"{WORK}.earlier-{n}"
        os.rename(work, moved)
    work.mkdir(exist_ok=True)
    write_marker(work, tool="tools.gpu.check", kind=WORK_KIND, scratch=True)
    return work, moved
