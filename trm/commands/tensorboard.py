"""`python -m trm tensorboard RUN_DIR`: serve a run's TensorBoard events, with the port-forward hint."""

from __future__ import annotations

import argparse
from pathlib import Path


def run(args: argparse.Namespace) -> int:
    from trm.launch.handoff.tensorboard import serve

    return serve(Path(args.run_dir), args.host, args.port)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Serve RUN_DIR/tensorboard (written by the trainer with tensorboard=true) on HOST:PORT until Ctrl-C, "
        "and print the ssh -L / kubectl port-forward commands that open it from a laptop."
    )
    parser.add_argument("run_dir", help="the run directory (CHECKPOINT_DIR/RUN_NAME)")
    parser.add_argument("--port", type=int, default=6006, help="port to listen on (default 6006)")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: reach it through the port-forward, not the internet); "
        "0.0.0.0 only inside a container started with -p 127.0.0.1:PORT:PORT (the host's loopback)",
    )
    parser.set_defaults(func=run)
