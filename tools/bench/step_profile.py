"""Where one training step's time goes: torch.profiler over a few steps of our model, split into matmul,
attention, elementwise, other and idle.

    nox -s bench -- step_profile [--config paper|tiny] [--device cuda|cpu] [--steps 3] [--compile] [--json]

The step is tools.bench.model's (our loss head, forward + backward + our PyTorch AdamATan2, the carry
kept across steps).
On CUDA the split is of GPU kernel time (each kernel's own time, by its name), and idle is the profiled wall
time the GPU spent in no kernel; on CPU it is of the aten operators' own CPU time, and idle is the wall time
outside them (Python, the profiler). All figures are measured, in ms per step.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import time
from typing import Any

from tools.bench import cuda_missing

CATEGORIES = ("matmul", "attention", "elementwise", "other")
# Kernel and operator names, tried in this order (attention kernels may contain "gemm" in their names,
# collectives "reduce").
_PATTERNS = (
    ("other", re.compile(r"nccl|c10d::|Memcpy|Memset", re.I)),  # communication and transfers
    ("attention", re.compile(r"attention|flash|fmha|sdpa|scaled_dot_product|_attn|mha", re.I)),
    ("matmul", re.compile(r"gemm|cutlass|xmma|nvjet|cublas|aten::(mm|addmm|bmm|matmul|linear)\b|sm\d+_.*_(tn|nt|nn|tt)\b", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|triton_(poi|red|per)|reduce|copy|fill|cat\b|index|norm|softmax|"
                               r"aten::(add|sub|mul|div|neg|silu|sigmoid|rsqrt|pow|mean|sum|exp|log|where|clamp|"
                               r"copy_|to|_to_copy|cat|fill_|zero_|zeros_like|ones_like|atan2|sqrt|lerp|"
                               r"embedding|gather|scatter|index\w*|cross_entropy\w*|log_softmax|_log_softmax\w*|"
                               r"nll_loss\w*|rms_norm|_fused_rms_norm\w*)\b", re.I)),
)  # fmt: skip


def classify(name: str) -> str:
    """The category of a kernel or aten operator name."""
    for category, pattern in _PATTERNS:
        if pattern.search(name):
            return category
    return "other"


@dataclasses.dataclass
class Breakdown:
    device: str
    steps: int
    wall_ms: float  # per step
    ms: dict[str, float]  # per step, per category, plus "idle"
    top: list[tuple[str, str, float]]  # (category, name, ms per step) of the largest entries

    def to_dict(self) -> dict[str, Any]:
        shares = {k: round(v / self.wall_ms, 4) if self.wall_ms else None for k, v in self.ms.items()}
        return {"device": self.device, "steps": self.steps, "wall_ms_per_step": round(self.wall_ms, 3),
                "ms_per_step": {k: round(v, 3) for k, v in self.ms.items()}, "share_of_wall": shares,
                "top": [list(t) for t in self.top], "measured": True}  # fmt: skip


def _own_time_us(event: Any, cuda: bool) -> float:
    if cuda:
        return float(getattr(event, "self_device_time_total", getattr(event, "self_cuda_time_total", 0.0)))
    return float(event.self_cpu_time_total)


def breakdown(events: Any, *, cuda: bool, wall_s: float, steps: int, device: str) -> Breakdown:
    """Sum the profiler's averaged events (`prof.key_averages()`) by category."""
    totals = dict.fromkeys(CATEGORIES, 0.0)
    entries = []
    for event in events:
        if cuda and getattr(getattr(event, "device_type", None), "name", "") != "CUDA":
            continue  # on CUDA: the kernels alone (a CPU operator's own device time is its kernels' again)
        if not cuda and not event.key.startswith("aten::"):
            continue  # on CPU: aten operators only (their self times do not overlap)
        us = _own_time_us(event, cuda)
        if us <= 0:
            continue
        category = classify(event.key)
        totals[category] += us / 1e3 / steps
        entries.append((category, event.key[:120], round(us / 1e3 / steps, 3)))
    wall_ms = wall_s * 1e3 / steps
    busy = sum(totals.values())
    totals["idle"] = max(wall_ms - busy, 0.0)
    top = sorted(entries, key=lambda e: -e[2])[:12]
    return Breakdown(device=device, steps=steps, wall_ms=wall_ms, ms=totals, top=top)


def profile(
    config_name: str, device_name: str, steps: int, warmup: int, compiled: bool, batch: int | None
) -> Breakdown:
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from tools.bench.model import CONFIGS, Runner, build_ours

    device = torch.device(device_name)
    config = CONFIGS[config_name]()
    if batch is not None:
        config = dataclasses.replace(config, batch_size=batch)
    torch.manual_seed(0)
    runner = Runner("ours", build_ours(config, device), config, device, compiled)
    for _ in range(warmup):
        runner.step()
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with torch_profile(activities=activities) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            runner.step()
        wall = time.perf_counter() - start
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    return breakdown(prof.key_averages(), cuda=cuda, wall_s=wall, steps=steps, device=name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nox -s bench -- step_profile", description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=("paper", "tiny"), default="paper")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--steps", type=int, default=3, help="profiled steps (default 3)")
    parser.add_argument("--warmup", type=int, default=2, help="unprofiled steps first (default 2; compiles)")
    parser.add_argument("--batch", type=int, default=None, help="rows per step (default: the config's)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the step (as training does)")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 0 or (args.batch is not None and args.batch < 1):
        parser.error("--steps and --batch must be positive, --warmup not negative")
    if cuda_missing(args.device, "step_profile"):
        return 2
    result = profile(args.config, args.device, args.steps, args.warmup, args.compile, args.batch)
    print(f"{args.config} step on {result.device}{' (compiled)' if args.compile else ''}: "
          f"{result.wall_ms:.1f} ms per step (measured over {result.steps} profiled steps)")  # fmt: skip
    for category, ms in result.ms.items():
        print(f"  {category:12s} {ms:9.2f} ms  {ms / result.wall_ms:6.1%}")
    if args.json:
        print(json.dumps(result.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
