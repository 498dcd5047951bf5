"""Checks that touch the accelerators: a collective all-reduce and a per-device matmul sanity test.

Both run on CPU as well (gloo / cpu tensors) so they are tested without a GPU; preflight runs them with
NCCL on CUDA devices.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import get_context

from trm.launch.host.nvidia_smi import smi_uuid


def free_port() -> int:
    """A TCP port that is free on localhost right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _allreduce_worker(
    rank: int, world_size: int, backend: str, port: int, queue, timeout_s: float, gpus: int
) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    try:
        if backend == "nccl":
            torch.cuda.set_device(rank % gpus)
            device = torch.device("cuda", rank % gpus)
        else:
            device = torch.device("cpu")
        dist.init_process_group(
            backend,
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
        tensor = torch.full((1 << 20,), float(rank + 1), device=device)
        dist.all_reduce(tensor)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        queue.put((rank, float(tensor[0].item()), float(tensor[-1].item()), None))
        dist.destroy_process_group()
    except Exception as err:  # reported to the parent, which turns it into a failed check
        queue.put((rank, None, None, f"{type(err).__name__}: {err}"))


@dataclass
class AllReduceResult:
    """Outcome of the all-reduce check."""

    ok: bool
    detail: str


def allreduce_check(
    world_size: int, *, backend: str = "nccl", timeout_s: float = 120.0, gpus: int | None = None
) -> AllReduceResult:
    """All-reduce 4 MiB across `world_size` local processes; every rank must see sum(1..world_size).

    With NCCL, rank r uses GPU r % `gpus` (default: one GPU per rank). Several ranks on one GPU need
    NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1; older NCCL refuses them ("Duplicate GPU detected").
    """
    gpus = gpus or world_size
    ctx = get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(
            target=_allreduce_worker, args=(r, world_size, backend, port, queue, timeout_s, gpus), daemon=True
        )
        for r in range(world_size)
    ]
    start = time.monotonic()
    for p in procs:
        p.start()
    results: dict[int, tuple[float | None, float | None, str | None]] = {}
    deadline = start + timeout_s + 60
    while len(results) < world_size and time.monotonic() < deadline:
        try:
            rank, first, last, err = queue.get(timeout=1.0)
            results[rank] = (first, last, err)
        except Exception:
            if all(not p.is_alive() for p in procs) and queue.empty():
                break
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
    elapsed = time.monotonic() - start
    expected = world_size * (world_size + 1) / 2
    errors = [f"rank {r}: {e}" for r, (_, _, e) in sorted(results.items()) if e]
    if errors:
        return AllReduceResult(False, "; ".join(errors))
    missing = sorted(set(range(world_size)) - set(results))
    if missing:
        codes = {r: procs[r].exitcode for r in missing}
        return AllReduceResult(
            False, f"ranks {missing} did not answer within {timeout_s:.0f} s (exit codes {codes})"
        )
    wrong = [r for r, (a, b, _) in results.items() if a != expected or b != expected]
    if wrong:
        return AllReduceResult(False, f"ranks {wrong} got a wrong sum (expected {expected:g})")
    return AllReduceResult(True, f"{backend} all-reduce over {world_size} rank(s) correct in {elapsed:.1f} s")


@contextmanager
def ieee_fp32_matmul() -> Iterator[None]:
    """fp32 CUDA matmuls in full IEEE precision (no TF32) inside the block; the previous setting after it.

    Uses the precision API of torch >= 2.9 (`torch.backends.cuda.matmul.fp32_precision`): the legacy
    `allow_tf32` flags warn there, and setting them is process-wide and never restored.
    """
    import torch

    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    matmul.fp32_precision = "ieee"
    try:
        yield
    finally:
        matmul.fp32_precision = before


@dataclass
class MatmulResult:
    """Outcome of the matmul check on one device (UUID logged)."""

    device: str
    uuid: str
    ok: bool
    max_rel_error: float
    tflops: float


def matmul_check(
    device_name: str, *, size: int = 1024, bench_size: int = 4096, repeats: int = 10
) -> MatmulResult:
    """fp32 matmul on `device_name` against a float64 CPU reference, plus a bf16 throughput sample."""
    import torch

    device = torch.device(device_name)
    uuid = "cpu"
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        uuid = smi_uuid(str(props.uuid), props.name) if hasattr(props, "uuid") else "unknown"
    gen = torch.Generator().manual_seed(1234)
    a = torch.randn(size, size, generator=gen, dtype=torch.float64)
    b = torch.randn(size, size, generator=gen, dtype=torch.float64)
    reference = a @ b
    with ieee_fp32_matmul():
        result = (a.float().to(device) @ b.float().to(device)).double().cpu()
    rel = float(((result - reference).abs().max() / reference.abs().max()).item())
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    x = torch.randn(bench_size, bench_size, device=device, dtype=dtype)
    y = torch.randn(bench_size, bench_size, device=device, dtype=dtype)
    _ = x @ y
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        _ = x @ y
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = max(time.perf_counter() - start, 1e-9)
    tflops = 2 * bench_size**3 * repeats / seconds / 1e12
    return MatmulResult(device_name, uuid, bool(rel < 1e-4) and rel == rel, rel, tflops)
