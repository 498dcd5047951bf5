"""SDPA backend micro-benchmark at the paper's attention shape: which kernel PyTorch's scaled_dot_product_attention
can use here, and what one forward + backward costs with each.

    nox -s bench -- sdpa [--device cuda|cpu] [--batch 192] [--repeats 10] [--json]

The paper config's attention (tools.bench.model's paper config): head dim 64 (hidden 512, 8 heads), sequence
916 (900 grid cells + 16 puzzle-embedding positions), not causal, bf16 on CUDA (fp32 on CPU). Each backend
(cuDNN, flash, memory-efficient, math) is forced alone with torch.nn.attention.sdpa_kernel; one that cannot
run this shape, dtype or device is reported with PyTorch's reason instead of a time. On CPU only the math
backend exists: the run there checks the harness, its times say nothing about a GPU. Times are measured
(median of `--repeats` after one warm-up), per forward + backward of one attention call.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

from tools.bench import cuda_missing

HEAD_DIM, HEADS, SEQ = 64, 8, 916  # the paper shape
PAPER_BATCH = 192  # one rank's share of the paper's 4 x 192 (tools.bench.model)
BACKENDS = ("cudnn", "flash", "efficient", "math")


def _sdpa_backend(name: str) -> Any:
    from torch.nn.attention import SDPBackend

    return {
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "math": SDPBackend.MATH,
    }[name]


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_backend(name: str, *, device: Any, batch: int, seq: int, repeats: int) -> dict[str, Any]:
    """{"ms": median forward+backward ms, ...} or {"unsupported": why} for one forced backend."""
    import torch
    from torch.nn.attention import sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    if device.type != "cuda" and name != "math":
        return {"unsupported": f"{name} runs on CUDA only"}
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    gen = torch.Generator(device=device).manual_seed(0)
    q, k, v = (
        torch.randn(batch, HEADS, seq, HEAD_DIM, device=device, dtype=dtype, generator=gen).requires_grad_()
        for _ in range(3)
    )
    grad = torch.randn(batch, HEADS, seq, HEAD_DIM, device=device, dtype=dtype, generator=gen)
    times = []
    try:
        with sdpa_kernel(_sdpa_backend(name)):
            for i in range(repeats + 1):  # the first one warms up
                _sync(device)
                start = time.perf_counter()
                out = scaled_dot_product_attention(q, k, v)
                out.backward(grad)
                _sync(device)
                if i:
                    times.append(time.perf_counter() - start)
                q.grad = k.grad = v.grad = None
    except RuntimeError as err:  # "No available kernel" and its reasons (shape, dtype, arch)
        return {"unsupported": " ".join(str(err).split())[:300]}
    return {"ms": round(statistics.median(times) * 1e3, 3), "repeats": repeats, "dtype": str(dtype)}


def run(device_name: str, batch: int, repeats: int, seq: int = SEQ) -> dict[str, Any]:
    import torch

    device = torch.device(device_name)
    results = {
        name: time_backend(name, device=device, batch=batch, seq=seq, repeats=repeats) for name in BACKENDS
    }
    timed = {n: r["ms"] for n, r in results.items() if "ms" in r}
    return {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "shape": {"batch": batch, "heads": HEADS, "seq": seq, "head_dim": HEAD_DIM},
        "measured": True,
        "backends": results,
        "fastest": min(timed, key=timed.__getitem__) if timed else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nox -s bench -- sdpa", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (the math backend only)")
    parser.add_argument("--batch", type=int, default=PAPER_BATCH, help=f"rows (default {PAPER_BATCH})")
    parser.add_argument("--seq", type=int, default=SEQ, help=f"sequence length (default {SEQ}, the paper's)")
    parser.add_argument("--repeats", type=int, default=10, help="timed calls per backend (default 10)")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args(argv)
    if args.batch < 1 or args.repeats < 1 or args.seq < 1:
        parser.error("--batch, --seq and --repeats must be positive")
    if cuda_missing(args.device, "sdpa bench"):
        return 2
    result = run(args.device, args.batch, args.repeats, args.seq)
    shape = result["shape"]
    print(
        f"SDPA forward+backward, batch {shape['batch']} x {shape['heads']} heads x seq {shape['seq']} x head dim "
        f"{shape['head_dim']} on {result['device']} (measured, median of {args.repeats})"
    )
    for name, r in result["backends"].items():
        print(f"  {name:10s} " + (f"{r['ms']:9.3f} ms" if "ms" in r else f"unsupported: {r['unsupported']}"))
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
