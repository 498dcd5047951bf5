"""Benchmark: activation memory of one training step per batch row (the saved tensors autograd keeps).

    python -m tools.bench.memory                        # TRM's paper config, bf16, on CPU: no GPU needed
    python -m tools.bench.memory --arch urm             # any registered architecture (its paper config)
    TRM_UPSTREAM=<checkout> python -m tools.bench.memory   # upstream's model beside ours (urm: TRM_URM)

What a micro-batch costs in GPU memory is mostly what the forward keeps for the backward. That is the
same tensors on any device in eager mode (PyTorch's CPU and CUDA flash-attention kernels both keep q, k,
v, the output and the log-sum-exp), so it is measured on CPU: one ACT step at batch 1 and at batch 2,
every distinct storage saved for backward counted once; the difference is the cost of one row, the rest
is fixed. torch.compile may keep less (its partitioner recomputes cheap element-wise ops). The hardware
table's micro-batches (trm/launch/host/hardware.toml) are checked against this figure.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable

import torch
from torch import nn

from tools.bench.model import CONFIGS, build_ours, build_reference, depth_keys, make_batch, reference_env
from trm.errors import TRMError
from trm.model import TRMConfig
from trm.model.registry import ARCHS


def saved_bytes(head: nn.Module, config: TRMConfig) -> int:
    """Bytes of the distinct storages autograd saves during one training-mode ACT step of `head`."""
    batch = make_batch(config, torch.device("cpu"))
    head.train()
    carry = head.initial_carry(batch)
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        head(carry, batch)
    return sum(storages.values())


def per_row_bytes(build: Callable[[TRMConfig], nn.Module], config: TRMConfig) -> tuple[int, int]:
    """(bytes per batch row, fixed bytes) of saved activations, from batch 1 and batch 2."""
    sizes = []
    for rows in (1, 2):
        torch.manual_seed(0)
        sized = dataclasses.replace(config, batch_size=rows)
        sizes.append(saved_bytes(build(sized), sized))
    per_row = sizes[1] - sizes[0]
    return per_row, sizes[0] - per_row


def main(argv: list[str] | None = None) -> int:
    """Print MB per row and fixed MB for ours (and upstream with TRM_UPSTREAM)."""
    parser = argparse.ArgumentParser(prog="python -m tools.bench.memory", description=__doc__.splitlines()[0])
    parser.add_argument("--arch", choices=sorted(ARCHS), default="trm", help="architecture (default: trm)")
    parser.add_argument("--config", choices=sorted(CONFIGS), default="paper")
    parser.add_argument(
        "--upstream", default=None, help="reference checkout [$TRM_UPSTREAM; for --arch urm $TRM_URM]"
    )
    args = parser.parse_args(argv)
    arch = args.arch
    reference = args.upstream or os.environ.get(reference_env(arch))
    config = CONFIGS[args.config](arch)
    cpu = torch.device("cpu")
    builders: list[tuple[str, Callable[[TRMConfig], nn.Module]]] = [("ours", lambda c: build_ours(c, cpu))]
    if reference:
        builders.append(("upstream", lambda c: build_reference(arch, c, cpu, reference)))
    layers = depth_keys(arch, config)
    print(
        f"arch={arch} config={args.config} seq={config.total_seq_len} hidden={config.hidden_size} {layers} "
        f"dtype={config.forward_dtype} (eager, saved tensors)"
    )
    try:
        results = {name: per_row_bytes(build, config) for name, build in builders}
    except TRMError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    for name, (row, fixed) in results.items():
        print(f"{name:9s} {row / 2**20:8.1f} MB per row  {fixed / 2**20:7.1f} MB fixed")
    if "upstream" in results:
        print(f"upstream / ours per row: {results['upstream'][0] / results['ours'][0]:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
