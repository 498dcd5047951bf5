"""`python -m trm select-config`: the hardware tier and batch layout for this host (or a recorded one)."""

from __future__ import annotations

import argparse
import json
import sys

from trm.errors import TRMError
from trm.launch.hardware import HardwarePlan, select_plan
from trm.launch.nvidia_smi import NvidiaSmiMissing, query_gpus


def parse_compile(value: str) -> bool | None:
    """auto|true|false -> None|True|False."""
    table = {"auto": None, "true": True, "1": True, "false": False, "0": False}
    if value.lower() not in table:
        raise TRMError(
            f"compile must be auto, true or false (got {value!r}); set COMPILE / --compile to one of them"
        )
    return table[value.lower()]


def plan_from_args(args: argparse.Namespace) -> HardwarePlan:
    """Detect GPUs (none when --cpu or when nvidia-smi is absent) and resolve the plan."""
    gpus = []
    if not args.cpu and args.num_gpus != 0:
        try:
            gpus = query_gpus()
        except NvidiaSmiMissing:
            if args.num_gpus:
                raise
    return select_plan(
        gpus,
        num_gpus=args.num_gpus,
        nnodes=args.nnodes,
        global_batch_size=args.global_batch_size,
        micro_batch_size=args.micro_batch_size,
        compile_override=parse_compile(args.compile),
        cpu_procs=args.cpu_procs,
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

    from trm.commands.launch import ensure_writable
    from trm.launch.probe import run_probe
    from trm.launch.runner import Launch, LaunchFailed, resolve
    from trm.launch.settings import LaunchSettings
    from trm.launch.supervisor import Console

    environ = dict(os.environ)
    settings = LaunchSettings.from_env(environ)
    plan = resolve(settings, environ)
    ensure_writable(settings)
    # Progress goes to stderr so that `--json` output on stdout stays parseable.
    launch = Launch(plan, environ, Console(settings.launch_dir / "launch.log", sys.stderr))
    launch.supervisor.install_signal_handlers()
    try:
        launch.data()
        micro = run_probe(launch)
    except LaunchFailed as err:
        print(f"error: {err}")
        return err.code
    record = json.loads((settings.launch_dir / "probe.json").read_text())
    print(
        json.dumps(record, indent=2)
        if args.json
        else f"micro-batch {micro} fits; record: {settings.launch_dir / 'probe.json'}"
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


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "select-config",
        help="pick micro-batch / accumulation / compile for this host from the hardware table",
        description="Detect GPUs with nvidia-smi and resolve the hardware tier; global_batch_size stays fixed.",
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
