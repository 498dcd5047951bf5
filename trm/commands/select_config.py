"""`python -m trm select-config`: the hardware tier and batch layout for this host (or a recorded one)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trm.launch.host.hardware import BatchLayout


def plan_from_args(args: argparse.Namespace) -> BatchLayout:
    """Detect GPUs (none when --cpu or when nvidia-smi is absent) and resolve the plan."""
    from trm.compile_setting import parse_compile
    from trm.launch.config.variables import DEFAULT_RECIPE
    from trm.launch.host.hardware import select_layout, workload_of
    from trm.launch.host.nvidia_smi import NvidiaSmiMissing, query_gpus
    from trm.training.recipes import get_recipe

    task = args.task or DEFAULT_RECIPE  # --arch alone: that architecture on the launcher's default task
    gpus = []
    if not args.cpu and args.num_gpus != 0:
        try:
            gpus = query_gpus()
        except NvidiaSmiMissing:
            if args.num_gpus:
                raise
    return select_layout(
        gpus,
        num_gpus=args.num_gpus,
        nnodes=args.nnodes,
        global_batch_size=args.global_batch_size
        or (get_recipe(task).global_batch_size if args.task else None),
        micro_batch_size=args.micro_batch_size,
        compile_override=parse_compile(args.compile, source="--compile"),
        cpu_procs=args.cpu_procs,
        workload=workload_of(task, args.arch) if args.task or args.arch else None,
    )


def run(args: argparse.Namespace) -> int:
    if args.probe:
        return run_probe_command(args)
    plan = plan_from_args(args)
    print(json.dumps(plan.to_dict(), indent=2) if args.json else plan.describe())
    return 0


def run_probe_command(args: argparse.Namespace) -> int:
    """--probe: resolve the launch plan from the environment (as train_prod.sh does), verify the dataset
    (building it if missing) and probe; the record lands in <run dir>/launch/probe.json."""
    import os

    from trm.launch.launcher.runner import probe_configured_launch
    from trm.launch.plan.plan import LaunchFailed

    try:
        # Progress goes to stderr so that `--json` output on stdout stays parseable.
        micro, record = probe_configured_launch(dict(os.environ), sys.stderr)
    except LaunchFailed as err:
        print(f"error: {err}")
        return err.code
    print(
        json.dumps(json.loads(record.read_text()), indent=2)
        if args.json
        else f"micro-batch {micro} fits; record: {record}"
    )
    return 0


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags shared by every command that resolves a hardware plan."""
    parser.add_argument(
        "--num-gpus", type=int, default=None, help="GPUs per node to use (default: all; 0 = CPU)"
    )
    parser.add_argument("--nnodes", type=int, default=1, help="number of nodes (default: 1)")
    parser.add_argument(
        "--global-batch-size",
        type=int,
        default=None,
        help="default: the trainer's (`python -m trm.train --help`)",
    )
    parser.add_argument("--micro-batch-size", type=int, default=None, help="force the per-GPU micro-batch")
    parser.add_argument("--compile", default="auto", help="auto (the tier's choice), true or false")
    parser.add_argument("--cpu", action="store_true", help="plan for CPU even when GPUs are present")
    parser.add_argument("--cpu-procs", type=int, default=1, help="processes in CPU mode (default: 1)")
    parser.add_argument(
        "--task",
        default=None,
        help="size the micro-batch for this recipe's sequence (TASK=: arc2, sudoku-att, maze, ...; default: "
        "trm on ARC, the table's reference)",
    )
    parser.add_argument(
        "--arch",
        default=None,
        help="size for this architecture (arch=: trm, urm, hrm, ...; default: the task's)",
    )


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Detect GPUs with nvidia-smi and resolve the hardware tier; global_batch_size stays fixed."
    )
    add_plan_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.add_argument(
        "--probe",
        action="store_true",
        help="GPU host: train PROBE_STEPS steps of the launch configured by the environment (TASK, NUM_GPUS, … as "
        "for train_prod.sh), record peak memory and step time, halve the micro-batch on out-of-memory",
    )
    parser.set_defaults(func=run)
