"""`python -m trm tensorboard RUN_DIR`: serve a run's TensorBoard events on this host, with the port-forward
commands that bring them to a laptop (the trainer writes the events with `tensorboard=true`)."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

from trm.errors import TRMError
from trm.extras import install_hint
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
            "(the launcher's default where tensorboard is installed; else TENSORBOARD=1, same RUN_NAME: it resumes "
            "and logs from then on; before the first logged step there are none yet)"
        )
    return events


LOOPBACK = "127.0.0.1"


def forward_hint(port: int, host: str = LOOPBACK) -> str:
    """How to open the server from a laptop: an SSH tunnel (VM) or kubectl port-forward (Kubernetes); a
    server on every interface (inside a container) is for a port published on the host's loopback only."""
    exposed = []
    if host != LOOPBACK:
        exposed = [
            f"listening on {host}: inside a container, publish it on the host's loopback only "
            f"(docker run -p {LOOPBACK}:{port}:{port}); never on a host's public address",
        ]
    return "\n".join(
        [
            *exposed,
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
        raise TRMError(f"TensorBoard is not installed here: {install_hint('tensorboard')}") from None
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
    print(forward_hint(port, host), flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    return 0
