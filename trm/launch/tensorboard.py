"""`python -m trm tensorboard RUN_DIR`: serve a run's TensorBoard events on this host, with the port-forward
commands that bring them to a laptop (the trainer writes the events with `tensorboard=true`)."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

from trm.errors import TRMError
from trm.training.metrics_log import TENSORBOARD_DIR


def events_dir(run_dir: Path) -> Path:
    """The run's event files; a clear error when the run wrote none."""
    if not run_dir.is_dir():
        raise TRMError(
            f"run directory {run_dir} does not exist; pass the trainer's checkpoint_path (CHECKPOINT_DIR/RUN_NAME)"
        )
    events = run_dir / TENSORBOARD_DIR
    if not any(events.glob("events.out.tfevents.*")):
        raise TRMError(
            f"no TensorBoard events in {events}: the trainer writes them with tensorboard=true "
            '(launcher: TRAIN_OVERRIDES="tensorboard=true", same RUN_NAME; it resumes and logs from then on)'
        )
    return events


def forward_hint(port: int) -> str:
    """How to open the server from a laptop: an SSH tunnel (VM) or kubectl port-forward (Kubernetes)."""
    return "\n".join(
        [
            "open it from your laptop:",
            f"  ssh -N -L {port}:127.0.0.1:{port} user@gpu-host       # VM; then http://localhost:{port}",
            "  POD=$(kubectl get pods -l job-name=<job> -o name | head -n 1)",
            f'  kubectl port-forward "$POD" {port}:{port}              # Kubernetes; then http://localhost:{port}',
        ]
    )


def start(logdir: Path, host: str, port: int) -> tuple[Any, str]:
    """Start TensorBoard's server in this process (a background thread); returns (server, url)."""
    try:
        from tensorboard import program
    except ImportError:
        raise TRMError(
            "TensorBoard is not installed here: pip install 'trm-stack[tensorboard]' (the trm images have it)"
        ) from None
    board = program.TensorBoard()
    board.configure(
        argv=[
            None,
            "--logdir",
            str(logdir),
            "--host",
            host,
            "--port",
            str(port),
            "--reload_interval",
            "30",
            "--load_fast",
            "false",
        ]
    )
    try:
        url = board.launch()
    except program.TensorBoardServerException as err:
        raise TRMError(
            f"TensorBoard could not listen on {host}:{port} ({err.msg}); pick another --port"
        ) from None
    return board, url


def serve(run_dir: Path, host: str, port: int) -> int:
    """Serve until SIGINT/SIGTERM; returns 0."""
    logdir = events_dir(run_dir)
    _, url = start(logdir, host, port)
    print(f"TensorBoard: {url} (events: {logdir}); Ctrl-C stops it", flush=True)
    print(forward_hint(port), flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    return 0
