"""Build a report directory: report.md and its PNG plots, published as a whole (a reader never sees half)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from trm.errors import TRMError
from trm.io import atomic_directory, atomic_write_bytes, atomic_write_text
from trm.report import plots
from trm.report.collect import RunRecord, read_batch, read_run_dirs
from trm.report.markdown import render

REPORT = "report.md"


@dataclass
class Report:
    """What was written, with the figures (for callers and tests that read back the plotted data)."""

    out: Path
    records: list[RunRecord]
    figures: dict[str, Any] = field(default_factory=dict)
    """PNG file name -> its matplotlib Figure."""


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "x"


def figures(records: Sequence[RunRecord]) -> list[tuple[str, str, Any]]:
    """(title, PNG name, Figure) of every plot the runs have data for, in report order."""
    found = [
        ("Training loss", "train_loss.png", plots.loss_figure(records)),
        ("Eval metrics", "eval_metrics.png", plots.eval_figure(records)),
    ]
    for suite in sorted({r.suite for r in records}):
        runs = [r for r in records if r.suite == suite]
        keys = plots.scaling_keys(runs)
        for key in keys if len(keys) <= plots.MAX_SCALING_KEYS else []:
            found.append(
                (f"{suite}: {key}", f"scaling_{_slug(suite)}_{_slug(key)}.png", plots.scaling_figure(runs, key, suite))
            )  # fmt: skip
    found.append(("Steps per second and wall time", "timing.png", plots.timing_figure(records)))
    return [(title, name, fig) for title, name, fig in found if fig is not None]


def batch_summary(batch: dict[str, Any]) -> dict[str, Any]:
    """The facts of the batch object that report.md prints: id, times, exit code and host name."""
    summary = {
        k: batch[k] for k in ("id", "started", "ended", "exit_code") if isinstance(batch.get(k), str | int)
    }
    host = batch.get("host")
    host = host.get("hostname") if isinstance(host, dict) else host
    return {**summary, "host": host} if isinstance(host, str) else summary


def _check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / REPORT).exists())):
        raise TRMError(
            f"--out {out} exists and is not a report directory (no {REPORT} in it); the report replaces "
            "its directory as a whole: pass a new or an earlier report's directory"
        )


def write_report(
    records: list[RunRecord], out: Path, *, source: str, batch: dict[str, Any] | None = None
) -> Report:
    """Write `out/report.md` and the plots (replacing an earlier report in `out`)."""
    if not records:
        raise TRMError("no runs to report: pass run directories or a batch_results.json with runs")
    _check_out(out)
    records = sorted(records, key=lambda r: (r.suite, r.name))
    report = Report(out=out, records=records)
    made = figures(records)
    with atomic_directory(out, overwrite=True, kind="report", tool="trm report", flag="--out") as tmp:
        for _title, name, fig in tqdm(made, desc="plotting", unit="plot", disable=None, leave=False):
            atomic_write_bytes(tmp / name, plots.png_bytes(fig))
            report.figures[name] = fig
        text = render(records, [(title, name) for title, name, _ in made], source, batch_summary(batch or {}))
        atomic_write_text(tmp / REPORT, text)
    return report


def report_runs(run_dirs: Sequence[Path], out: Path) -> Report:
    """The report of run directories (their differing config keys are the swept variables)."""
    return write_report(
        read_run_dirs(run_dirs),
        out,
        source="the run directory" if len(run_dirs) == 1 else f"{len(run_dirs)} run directories",
    )


def report_batch(batch_json: Path, out: Path) -> Report:
    """The report of a batch runner's batch_results.json (failed runs included, without curves)."""
    batch, records = read_batch(batch_json)
    return write_report(records, out, source=f"batch results {batch_json.name}", batch=batch)
