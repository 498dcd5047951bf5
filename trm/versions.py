"""Versions of trm-stack and of the libraries a run depends on, collected in one place.

`python -m trm version`, the image entrypoint's banner, the preflight report (and through it the handoff)
and the trainer's run record all show this one dictionary.
"""

from __future__ import annotations

import platform


def collect_versions() -> dict[str, str | None]:
    """Versions that matter for reproducing a run; no GPU work beyond asking CUDA whether it is there."""
    import torch

    import trm

    cuda = torch.cuda.is_available()
    return {
        "trm": trm.__version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": str(cuda),
        "nccl": _nccl_version() if cuda else None,
    }


def _nccl_version() -> str | None:
    import torch

    try:
        return ".".join(str(part) for part in torch.cuda.nccl.version())
    except Exception:  # a CUDA build without NCCL, or a driver that refuses the query
        return None
