"""`python -m trm.launch.supervision.worker --exit-dir D -- CMD …`: run one rank's trainer and record its exit code.

torchrun reports only "a child failed" (exit 1), so the launcher cannot tell a trainer that saved and
asked to be restarted (exit 75) from a crash. Each rank runs under this wrapper, which forwards
SIGTERM/SIGINT/SIGUSR1 to the trainer, writes `D/rank_<RANK>.json` with the trainer's exit code, and exits
with the same code. Standard library and trm.exit_codes only, so it adds no start-up time.

With `--saved-exits-zero` a trainer that saved and exited 75 is recorded as 75 but the wrapper exits 0:
torchrun then ends quietly instead of printing its ChildFailedError traceback under the launcher's own
lines, and the launcher still reads 75 from the record. Only 75: the trainer exits it after the collective
save completed on every rank, so no peer is left waiting; any other failure stays non-zero, so torchrun
still stops the other ranks.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from trm.exit_codes import SAVED_RETRY

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


def record(exit_dir: Path, rank: str, code: int, started: float) -> None:
    """Write rank_<rank>.json atomically (temp file + rename)."""
    exit_dir.mkdir(parents=True, exist_ok=True)
    target = exit_dir / f"rank_{rank}.json"
    tmp = exit_dir / f".rank_{rank}.json.{os.getpid()}.tmp"
    payload = {
        "rank": int(rank),
        "exit_code": code,
        "pid": os.getpid(),
        "seconds": round(time.time() - started, 3),
    }
    with open(tmp, "w") as f:
        json.dump(payload, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)


def main(argv: list[str] | None = None) -> int:
    """Run the command, forward signals, record and return its exit code."""
    parser = argparse.ArgumentParser(prog="python -m trm.launch.supervision.worker")
    parser.add_argument("--exit-dir", type=Path, required=True)
    parser.add_argument("--saved-exits-zero", action="store_true", help="exit 0 when the trainer exits 75")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the trainer command after --")
    rank = os.environ.get("RANK", "0")
    started = time.time()
    child = subprocess.Popen(command)

    def forward(signum: int, _frame: object) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    while True:
        try:
            code = child.wait()
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries, kept for old kernels
            continue
    record(args.exit_dir, rank, code, started)
    if args.saved_exits_zero and code == SAVED_RETRY:
        return 0
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
