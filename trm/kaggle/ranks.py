"""Rank processes of `infer --ranks N`: one per GPU (or N on CPU), started and awaited independently.

Not torchrun: torchrun's agent stops every rank as soon as one exits with an error or is killed, and the
ranks here share nothing but files, so one rank's failure must not cost the others their work. Each rank
is a plain process with its own CUDA_VISIBLE_DEVICES (one GPU, seen as cuda:0) and without torchrun's
variables (each is a world of one); its output goes to its log file. `wait_ranks` waits for all of them
until a deadline and then stops the ones still running (SIGTERM, then SIGKILL after `grace` seconds).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from trm.errors import TRMError

# torchrun's variables: a rank that inherited them would join a process group (trm.distributed.initialize).
TORCHRUN_ENV = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
)
POLL_SECONDS = 0.2


def gpu_devices(environ: Mapping[str, str]) -> list[str]:
    """The CUDA_VISIBLE_DEVICES id of every GPU this process may use (nvidia-smi's, less what the caller's
    own CUDA_VISIBLE_DEVICES hides); torch's count when nvidia-smi is missing."""
    from trm.experiments.placement import detect_gpus, visible_devices

    devices = visible_devices(detect_gpus(environ))
    if devices:
        return devices
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    listed = [d.strip() for d in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return listed[:count] if listed else [str(i) for i in range(count)]


def resolve_ranks(ranks: str, device: str, gpus: Sequence[str]) -> int:
    """`--ranks auto` → one per visible GPU (1 without one, or on --device cpu); a number is checked against
    the GPUs when the ranks use CUDA."""
    on_gpu = device != "cpu" and bool(gpus)
    if ranks == "auto":
        return len(gpus) if on_gpu else 1
    try:
        count = int(ranks)
    except ValueError:
        raise TRMError(f"--ranks {ranks!r}: give a number of ranks or auto (one per visible GPU)") from None
    if count < 1:
        raise TRMError(f"--ranks {count}: must be at least 1 (or auto)")
    if device.startswith("cuda") and count > len(gpus):
        raise TRMError(
            f"--ranks {count}: only {len(gpus)} CUDA GPU(s) visible; use --ranks {max(len(gpus), 1)} or auto"
        )
    return count


def rank_environment(environ: Mapping[str, str], gpu: str | None) -> dict[str, str]:
    """The environment of one rank: the caller's without torchrun's variables, with its one GPU (if any)."""
    env = {k: v for k, v in environ.items() if k not in TORCHRUN_ENV}
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    return env


@dataclass
class RankProcess:
    rank: int
    process: subprocess.Popen[bytes]
    log: Path
    outcome: str = "running"
    """running, then: exit 0 | exit N | killed by SIGNAME | out of time (stopped at the deadline)."""

    @property
    def ok(self) -> bool:
        return self.outcome == "exit 0"


def start_rank(rank: int, command: list[str], env: dict[str, str], log: Path) -> RankProcess:
    """Start one rank with its stdout and stderr in `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    return RankProcess(rank, process, log)


def _describe(returncode: int) -> str:
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-returncode).name}"
        return f"killed by signal {-returncode}"
    return f"exit {returncode}"


def wait_ranks(ranks: list[RankProcess], deadline: float, grace: float) -> list[RankProcess]:
    """Wait until every rank exits or the wall-clock `deadline` (time.time()) passes; then SIGTERM the
    ranks still running and SIGKILL them `grace` seconds later. Sets each rank's `outcome`."""
    while time.time() < deadline and any(r.process.poll() is None for r in ranks):
        time.sleep(POLL_SECONDS)
    late = [r for r in ranks if r.process.poll() is None]
    for r in late:
        r.outcome = "out of time (stopped at the deadline)"
        with contextlib.suppress(ProcessLookupError):
            r.process.send_signal(signal.SIGTERM)
    stop = time.time() + grace
    for r in late:
        try:
            r.process.wait(timeout=max(stop - time.time(), 0.0))
        except subprocess.TimeoutExpired:
            r.process.kill()
            r.process.wait()
    for r in ranks:
        if r not in late:
            r.outcome = _describe(int(r.process.returncode))
    return ranks


def pid_record(ranks: list[RankProcess]) -> dict[str, object]:
    """What `ranks.json` says while the ranks run (their process ids and logs), and after (outcomes)."""
    return {
        "coordinator_pid": os.getpid(),
        "ranks": [
            {"rank": r.rank, "pid": r.process.pid, "log": r.log.name, "outcome": r.outcome} for r in ranks
        ],
    }
