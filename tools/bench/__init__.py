"""Benchmarks, run as `nox -s bench -- <name> [args]` (module `tools.bench.<name>`); never timed tests."""


def cuda_missing(device: str, bench: str) -> bool:
    """True (after one line on stderr saying so) when `device` asks for CUDA and torch sees none."""
    if not device.startswith("cuda"):
        return False
    import sys

    import torch

    if torch.cuda.is_available():
        return False
    print(f"{bench}: --device {device} but torch sees no CUDA device; use --device cpu", file=sys.stderr)
    return True
