"""`python -m trm preflight`: check the host before a run; each failure prints its fix."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from trm.io import atomic_write_json
from trm.launch.host.preflight import GIB, PreflightContext, print_report, run_preflight


def run(args: argparse.Namespace) -> int:
    # Number CUDA devices like nvidia-smi does, so each matmul check is logged with the right UUID.
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    mode = "cpu" if args.cpu else ("gpu" if args.gpu else "auto")
    ctx = PreflightContext.from_env(shm_path=Path(args.shm_path), disk_path=Path(args.checkpoint_dir))
    report = run_preflight(
        ctx,
        mode=mode,
        num_gpus=args.num_gpus,
        checkpoint_bytes=int(args.checkpoint_gb * GIB),
        keep=args.keep,
        keep_best=args.keep_best,
        collectives=not args.no_collectives,
    )
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print_report(report)
    if args.report:
        atomic_write_json(args.report, report.to_dict())
    return report.exit_code


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Check this host before training. Each check prints what it found and, on failure, the fix. "
        "Without nvidia-smi (or with --cpu) GPU checks are skipped and the report says so. The GPUs checked "
        "are nvidia-smi's less those CUDA_VISIBLE_DEVICES hides (what torch sees). Exit 0: passed; "
        "2: a configuration error (the same on any machine); 76: only faults of this node's hardware "
        "(a GPU computing wrong results, a failed NCCL all-reduce, nvidia-smi not answering): run elsewhere."
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--cpu", action="store_true", help="CPU mode: skip every GPU check")
    group.add_argument("--gpu", action="store_true", help="require GPUs (fail when nvidia-smi is missing)")
    parser.add_argument(
        "--num-gpus", type=int, default=None, help="GPUs to check (default: all visible ones)"
    )
    parser.add_argument("--checkpoint-dir", default=".", help="where checkpoints go (free-disk check)")
    parser.add_argument(
        "--checkpoint-gb", type=float, default=6.0, help="expected size of one checkpoint (6)"
    )
    parser.add_argument("--keep", type=int, default=3, help="checkpoints kept (default: 3)")
    parser.add_argument(
        "--keep-best",
        type=int,
        default=None,
        help="best evaluation checkpoints kept (default: checkpoint.keep_best's default, 1; a subset run "
        "keeps at least best.top_k)",
    )
    parser.add_argument("--shm-path", default="/dev/shm", help=argparse.SUPPRESS)
    parser.add_argument("--no-collectives", action="store_true", help="skip the NCCL all-reduce and matmul")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--report", type=Path, default=None, help="also write the JSON report to this file")
    parser.set_defaults(func=run)
