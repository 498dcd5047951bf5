"""The host parts: `facts` (versions and GPU facts), `kit` (the GPU kit installed offline) and `imports`
(what the check and training import)."""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import platform
import re
import sys
from pathlib import Path
from typing import Any

from tools.gpu.check.core import NOT_WANTED, Context, Outcome, run_command, tail

TORCH_SUPPORTED = ((2, 10), (2, 13))  # the host torch versions the check (and training) accept, inclusive
KIT_LIMIT_S = 180


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def torch_supported(version: str) -> bool:
    """Whether a torch version string (e.g. "2.11.0+cu130") is within TORCH_SUPPORTED."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return bool(match) and TORCH_SUPPORTED[0] <= (int(match[1]), int(match[2])) <= TORCH_SUPPORTED[1]


def facts(ctx: Context) -> Outcome:
    import torch

    from trm.launch.host.nvidia_smi import query_driver_cuda, query_gpus
    from trm.training.checkpointing.layout import git_sha

    low, high = (".".join(map(str, v)) for v in TORCH_SUPPORTED)
    data: dict[str, Any] = {
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "torch": torch.__version__,
        "torch_location": str(Path(torch.__file__).parent),
        "torch_supported": f"{low}–{high}",
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "triton": _version("triton"),
        "adam_atan2": _version("adam-atan2") or _version("adam_atan2"),
        "trm_git_sha": git_sha(),
        "platform": platform.platform(),
        "cuda_available": torch.cuda.is_available(),
    }
    problems = []
    try:
        driver, cuda = query_driver_cuda()
        data["driver"], data["driver_cuda"] = driver, cuda
        data["nvidia_smi"] = [g.to_dict() for g in query_gpus()]
    except Exception as exc:  # recorded; CUDA's own view below decides
        problems.append(f"nvidia-smi: {exc}")
    if torch.cuda.is_available():
        with contextlib.suppress(Exception):
            nccl = torch.cuda.nccl.version()
            data["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        data["cuda_devices"] = [
            {
                "index": i,
                "name": p.name,
                "total_memory_mib": p.total_memory // 2**20,
                "capability": f"{p.major}.{p.minor}",
                "multiprocessors": p.multi_processor_count,
            }
            for i, p in ((i, torch.cuda.get_device_properties(i)) for i in range(torch.cuda.device_count()))
        ]
    devices = data.get("cuda_devices", [])
    where = (
        f"{len(devices)} CUDA device(s): {', '.join(d['name'] for d in devices)}"
        if devices
        else "no CUDA device"
    )
    summary = f"torch {torch.__version__} (this Python's own, used as it is); {where}"
    summary += "".join(f"; {p}" for p in problems)
    if not torch_supported(torch.__version__):
        return Outcome("fail", f"{summary}; torch outside the supported {low}–{high}", data)
    return Outcome("pass", summary, data)


# What the check and a training run import, beyond torch (the GPU kit provides what the host lacks).
REQUIRED_IMPORTS = (
    "numpy",
    "hydra",
    "omegaconf",
    "yaml",
    "tqdm",
    "pytest",
    "trm.train",
    "trm.eval",
    "tools.bench.model",
)


def imports(ctx: Context) -> Outcome:
    probe = (
        "import importlib, json, sys\n"
        "missing = {}\n"
        f"for name in {list(REQUIRED_IMPORTS)!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as err:\n"
        "        missing[name] = f'{type(err).__name__}: {err}'\n"
        "print(json.dumps(missing))\n"
    )
    code, output = run_command(
        [ctx.python, "-c", probe], ctx, timeout_s=ctx.limit(120), log_name="imports.log"
    )
    lines = output.strip().splitlines()
    missing = json.loads(lines[-1]) if code == 0 and lines else {"(probe)": f"exit {code}"}
    if missing:
        names = ", ".join(missing)
        return Outcome(
            "fail",
            f"cannot import {names}: install the GPU kit (`make gpu-kit`, then pip install --no-index "
            "--find-links build/gpu-kit -r build/gpu-kit/requirements.txt)",
            {"missing": missing},
            tail(output),
        )
    return Outcome("pass", f"{len(REQUIRED_IMPORTS)} modules import: {', '.join(REQUIRED_IMPORTS)}")


def kit_install(ctx: Context) -> Outcome:
    """pip install the GPU kit offline into this Python (adds what it lacks, keeps what it has)."""
    requirements = ctx.kit / "requirements.txt"
    if not requirements.is_file():
        return Outcome("skip", f"no kit at {ctx.kit} (no requirements.txt): this Python's own packages are used",
                       skipped=NOT_WANTED)  # fmt: skip
    cmd = [
        ctx.python,
        "-m",
        "pip",
        "install",
        "--no-index",
        "--find-links",
        str(ctx.kit),
        "-r",
        str(requirements),
    ]
    limit = ctx.limit(KIT_LIMIT_S)
    code, output = run_command(cmd, ctx, timeout_s=limit, log_name="kit.log")
    if code is None:
        return Outcome("error", f"pip timed out after {limit:.0f} s", output=tail(output))
    if code != 0:
        return Outcome("fail", f"pip install --no-index from {ctx.kit} exited {code}", output=tail(output))
    return Outcome("pass", f"the kit installed offline from {ctx.kit}", {"command": cmd}, tail(output))
