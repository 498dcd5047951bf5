"""Install the CPU build of torch into the developer venv (`make venv`), whatever the machine.

PyPI's default Linux x86_64 torch wheel is the CUDA build: ~0.9 GB plus several GB of nvidia-* wheels.
The CPU build lives on PyTorch's own index (`+cpu` local version, ~190 MB). This module asks that index
first, with a short probe so an unreachable index costs a second, not pip's retries; when it cannot be
reached it falls back to the plain pin from the configured index (a local mirror or wheel directory that
holds the CPU wheel, as in CI; on PyPI itself that is the CUDA build, and a warning says so).

Standard library only: it runs with the fresh venv's interpreter before anything is installed
(`.venv/bin/python -m trm.devtorch` from the repository root).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
DEFAULT_VERSION = "2.13.0"
PROBE_TIMEOUT_S = 5.0


def probe_index(url: str, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether `url/torch/` answers within `timeout` seconds (DNS failure, refusal, timeout: False)."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/torch/", timeout=timeout) as response:
            return 200 <= response.status < 400
    except (urllib.error.URLError, OSError, ValueError):
        return False


def installed_torch(python: str) -> str | None:
    """The torch version `python` already has (e.g. '2.13.0+cpu'), or None."""
    proc = subprocess.run(
        [python, "-c", "import torch, sys; sys.stdout.write(torch.__version__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


@dataclass(frozen=True)
class TorchInstall:
    """What `make venv` does about torch: the pip arguments (None: nothing to do) and why."""

    pip_args: list[str] | None
    reason: str
    warning: str = ""


def plan_install(
    version: str,
    installed: str | None,
    cpu_index_reachable: Callable[[], bool],
    *,
    index: str = CPU_INDEX,
    platform: str = sys.platform,
) -> TorchInstall:
    """Decide how to get torch `version` as a CPU build.

    macOS and Windows wheels on PyPI are CPU builds already; on Linux the `+cpu` build comes from
    `index` when it answers (`cpu_index_reachable` is only called when that matters), else the plain pin
    from the configured index with a warning.
    """
    if (
        installed is not None
        and installed.split("+")[0] == version
        and (installed.endswith("+cpu") or platform != "linux")
    ):
        return TorchInstall(None, f"torch {installed} (CPU build) is already installed")
    if platform != "linux":
        return TorchInstall(
            ["install", f"torch=={version}"], f"PyPI's torch {version} for {platform} is a CPU build"
        )
    if cpu_index_reachable():
        # The `+cpu` local version only exists on the CPU index, so pip cannot pick PyPI's CUDA build; the
        # configured index stays as an extra index for torch's own dependencies (filelock, sympy, …).
        return TorchInstall(
            ["install", "--extra-index-url", index, f"torch=={version}+cpu"],
            f"torch {version}+cpu from {index} (~190 MB)",
        )
    return TorchInstall(
        ["install", f"torch=={version}"],
        f"{index} is unreachable: torch=={version} from the configured index",
        warning=(
            f"if that index is PyPI this is the CUDA build (~0.9 GB plus several GB of nvidia-* wheels); "
            f"to get the CPU build, make {index} reachable or point PIP_FIND_LINKS at a directory holding "
            f"torch-{version}+cpu, then `rm -rf .venv && make venv`"
        ),
    )


def main(
    argv: Sequence[str] | None = None,
    probe: Callable[[str], bool] = probe_index,
    run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
    installed: Callable[[str], str | None] = installed_torch,
) -> int:
    parser = argparse.ArgumentParser(prog="python -m trm.devtorch", description=__doc__.splitlines()[0])
    parser.add_argument("--version", default=DEFAULT_VERSION, help="torch version (default %(default)s)")
    parser.add_argument("--index", default=CPU_INDEX, help="PyTorch CPU wheel index (default %(default)s)")
    parser.add_argument("--python", default=sys.executable, help="interpreter of the venv to install into")
    parser.add_argument(
        "--uv",
        default=None,
        metavar="PATH",
        help="install with this uv (`uv pip install --python …`: parallel downloads and unpacking, far faster "
        "than pip for the CUDA build's GB of wheels) instead of the venv's pip",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the decision and the pip command only")
    args = parser.parse_args(argv)

    plan = plan_install(args.version, installed(args.python), lambda: probe(args.index), index=args.index)
    print(f"devtorch: {plan.reason}", flush=True)
    if plan.warning:
        print(f"devtorch: warning: {plan.warning}", file=sys.stderr, flush=True)
    if plan.pip_args is None:
        return 0
    if args.uv:
        cmd = [args.uv, "pip", *plan.pip_args, "--python", args.python, "-q"]
    else:
        cmd = [args.python, "-m", "pip", *plan.pip_args, "-q"]
    print("devtorch: $ " + " ".join(cmd), flush=True)
    if args.dry_run:
        return 0
    return run(cmd, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
