"""`python -m trm report RUN_DIR… | --batch batch_results.json --out DIR`: compare runs in report.md + plots."""

from __future__ import annotations

import argparse
from pathlib import Path


def run(args: argparse.Namespace) -> int:
    from trm.report.build import report_batch, report_runs

    if (args.batch is not None) == bool(args.run_dirs):
        from trm.errors import TRMError

        raise TRMError("pass run directories (RUN_DIR …) or --batch batch_results.json, one of the two")
    report = (
        report_batch(args.batch, args.out) if args.batch is not None else report_runs(args.run_dirs, args.out)
    )
    print(f"report: {report.out / 'report.md'} ({len(report.records)} runs, {len(report.figures)} plots)")
    for name in sorted(report.figures):
        print(f"  {report.out / name}")
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Compare training runs: writes DIR/report.md (a table of runs, the paper's numbers against the "
        "achieved ones with 95 % Wilson intervals) and PNG plots (training loss and eval metrics vs step, "
        "final/best metric vs each swept variable, steps/s and wall time). The same inputs give the same "
        "report.md. DIR is replaced as a whole."
    )
    parser.add_argument(
        "run_dirs",
        nargs="*",
        type=Path,
        metavar="RUN_DIR",
        help="run directories (the trainer's checkpoint_path); config keys that differ between them are "
        "the swept variables",
    )
    parser.add_argument(
        "--batch",
        type=Path,
        default=None,
        metavar="BATCH_RESULTS_JSON",
        help="a batch runner's batch_results.json (its runs' run_dir give the curves; failed runs are listed)",
    )
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="the report directory")
    parser.set_defaults(func=run)
