"""The check's report: report.json and its human half, report.md, written atomically."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from trm.io import atomic_write_json, atomic_write_text


def render_markdown(report: dict[str, Any]) -> str:
    """The human half of the report."""
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(report["started_unix"]))
    lines = [
        f"# GPU acceptance: {report.get('status', 'running').upper()}"
        + (f" ({report['status_reason']})" if report.get("status_reason") else ""),
        "",
        f"Host `{report['host']}`, {when}"
        + (f", {report['seconds']} s" if "seconds" in report else " (in progress)")
        + f"; profile {report['profile']}, budget {report['budget_s']:g} s, planned on one H100"
        f" {report['planned_h100_s']} s, required parts {report['planned_required_h100_s']} s"
        f" ({'fits' if report['plan_fits_budget'] else 'does NOT fit'})",
        "",
        "| part | status | planned s (H100) | seconds | summary |",
        "| --- | --- | --- | --- | --- |",
    ]
    for p in report["parts"]:
        summary = p["summary"].replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {p['name']} | {p['status']} | {p['planned_s']} | {p['seconds']} | {summary} |")
    for p in report["parts"]:
        lines += ["", f"## {p['name']}: {p['status']}", "", p["what"], ""]
        if p["data"]:
            lines += ["```json", json.dumps(p["data"], indent=2, default=str), "```", ""]
        if p["output"]:
            lines += [
                "<details><summary>output (tail)</summary>",
                "",
                "```",
                p["output"],
                "```",
                "</details>",
            ]
    return "\n".join(lines) + "\n"


def write_report(report: dict[str, Any], out: Path) -> None:
    """report.json and report.md, each written atomically."""
    atomic_write_json(out / "report.json", report)
    atomic_write_text(out / "report.md", render_markdown(report))
