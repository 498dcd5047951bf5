"""Benchmark: one training step (ACT forward, backward, AdamATan2 step) of an architecture, ours vs its reference.

    python -m tools.bench.model                      # TRM, tiny CPU config, eager and compiled
    python -m tools.bench.model --arch urm           # any registered architecture (see --help)
    python -m tools.bench.model --compile-mode max-autotune-no-cudagraphs   # a torch.compile mode vs default
    TRM_UPSTREAM=<checkout> python -m tools.bench.model --arch hrm   # also time upstream's model in the same run
    TRM_URM=<checkout> python -m tools.bench.model --arch urm        # URM: the reference is the URM checkout

The references are imported from their checkouts; they need `pydantic` and `einops` importable (URM's
FlashAttention call is served by torch's SDPA, see tools.bench.urm_reference). Both models are stepped with
our AdamATan2 (the references' optimizer is a CUDA-only extension), so the ratio compares models.

Compile time is the first compiled step of each model from an empty compiler cache, measured
`--compile-repeats` times (ours and the reference interleaved, each after `torch._dynamo.reset()` in a
fresh Inductor cache; one throw-away compile first pays the process's one-time start-up), with the graphs
and graph breaks it made. Without the fresh cache the second model reuses the first one's generated kernels
(same source, same cache key) and its compile looks cheaper than it is.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from trm.compile_setting import MODES, torch_compile_mode
from trm.errors import TRMError
from trm.model import ACTLossHead, TinyRecursiveModel, TRMConfig
from trm.model.config import swiglu_intermediate
from trm.model.registry import ARCHS, get_spec
from trm.optim import AdamATan2
from trm.training.recipes import get_recipe
from trm.training.throughput import peak_flops as gpu_peak_flops

# The tiny CPU model of each architecture besides TRM (whose tiny model is the bench-tiny recipe's): hidden
# 64, 4 heads, no puzzle embedding, fp32, the fewest layers and cycles that still run every code path.
TINY_ARCHS: dict[str, dict[str, Any]] = {
    "trm_singlez": dict(L_layers=1, H_cycles=2, L_cycles=1, puzzle_emb_len=0),
    "trm_hier6": dict(L_layers=1, H_cycles=2, L_cycles=1, puzzle_emb_len=0),
    "hrm": dict(H_layers=1, L_layers=1, H_cycles=2, L_cycles=1),
    "transformers_baseline": dict(H_layers=2, H_cycles=1),
    "urm": dict(num_layers=2, loops=4, H_cycles=2, L_cycles=1, conv_dtype="float32"),
}
TINY_COMMON = dict(hidden_size=64, num_heads=4, puzzle_emb_ndim=0, forward_dtype="float32")
TINY_BATCH = 32
PAPER_BATCH = 192  # the arc2 recipe's global batch of 768 on 4 ranks


def tiny_config(arch: str = "trm") -> Any:
    """The tiny CPU model of `arch` at a batch of 32. TRM: the bench-tiny recipe (the reference CPU
    measurements; upstream: 1.6 steps/s eager)."""
    if arch == "trm":
        recipe = get_recipe("bench-tiny")
        return recipe.model_config(
            batch_size=recipe.global_batch_size, seq_len=900, vocab_size=12, num_puzzle_identifiers=1
        )
    sizes = dict(batch_size=TINY_BATCH, seq_len=900, vocab_size=12, num_puzzle_identifiers=1)
    return get_spec(arch).config(**sizes, **TINY_COMMON, **TINY_ARCHS[arch])


def paper_config(arch: str = "trm") -> Any:
    """One rank's share (192) of a 4-rank ARC run, bf16. TRM: the arc2 recipe's model; the others: their
    schema's defaults, which are the reference's config/arch file."""
    if arch == "trm":
        recipe = get_recipe("arc2").with_changes(arch={"forward_dtype": "bfloat16"})
        return recipe.model_config(
            batch_size=recipe.global_batch_size // 4, seq_len=900, vocab_size=12, num_puzzle_identifiers=1000
        )
    from trm.model.registry import model_config

    schema = get_spec(arch).schema()
    schema = dataclasses.replace(schema, puzzle_emb_ndim=schema.hidden_size)  # the schema's `${.hidden_size}`
    return model_config(
        schema, batch_size=PAPER_BATCH, seq_len=900, vocab_size=12, num_puzzle_identifiers=1000,
        forward_dtype="bfloat16",
    )  # fmt: skip


CONFIGS = {"tiny": tiny_config, "paper": paper_config}
# The depth keys printed in the header line, where an architecture has them.
LAYER_KEYS = ("loops", "H_cycles", "L_cycles", "H_layers", "L_layers", "num_layers")


def step_flops(config: TRMConfig) -> float:
    """Matmul FLOPs of one training step (forward of all cycles, backward of the last one)."""
    b, s, d = config.batch_size, config.total_seq_len, config.hidden_size
    inter = swiglu_intermediate(d, config.expansion)
    mix = 2 * b * s * d * 4 * d + 4 * b * s * s * d  # qkv + out projections, scores + weighted sum
    block = mix + 2 * b * s * d * 3 * inter
    per_application = config.L_layers * block
    with_grad = config.L_cycles + 1
    without_grad = (config.H_cycles - 1) * (config.L_cycles + 1)
    heads = 2 * b * s * d * config.vocab_size * 3
    return per_application * (without_grad + 3 * with_grad) + heads


def make_batch(config: TRMConfig, device: torch.device) -> dict[str, torch.Tensor]:
    """A random ARC-shaped batch."""
    g = torch.Generator().manual_seed(0)
    shape = (config.batch_size, config.seq_len)
    batch = {
        "inputs": torch.randint(0, config.vocab_size, shape, generator=g, dtype=torch.int32),
        "labels": torch.randint(0, config.vocab_size, shape, generator=g, dtype=torch.int32),
        "puzzle_identifiers": torch.randint(
            0, config.num_puzzle_identifiers, (config.batch_size,), generator=g
        ),
    }
    batch["puzzle_identifiers"] = batch["puzzle_identifiers"].to(torch.int32)
    return {k: v.to(device) for k, v in batch.items()}


def build_ours(config: Any, device: torch.device) -> nn.Module:
    """Our loss head around our model of the config's architecture."""
    if type(config) is TRMConfig:
        return ACTLossHead(TinyRecursiveModel(config)).to(device)
    from trm.model.registry import build_model

    return ACTLossHead(build_model(config)).to(device)


def depth_keys(arch: str, config: Any) -> str:
    """`key=value` of the depth keys (LAYER_KEYS) that `arch`'s schema has, for the header line."""
    keys = {f.name for f in dataclasses.fields(get_spec(arch).schema)}
    return " ".join(f"{k}={getattr(config, k)}" for k in LAYER_KEYS if k in keys)


def build_reference(arch: str, config: Any, device: torch.device, path: str) -> nn.Module:
    """The reference's loss head for `arch` (URM: the URM checkout; the others: upstream's), called like ours."""
    if arch == "urm":
        from tools.bench.urm_reference import reference_head

        with torch.device(device):
            return UpstreamCall(reference_head(config, path).to(device))
    return UpstreamCall(build_upstream(config, device, path, model_id=get_spec(arch).model_id))


def reference_env(arch: str) -> str:
    """The environment variable naming the reference checkout of `arch`."""
    return "TRM_URM" if arch == "urm" else "TRM_UPSTREAM"


def build_upstream(
    config: TRMConfig,
    device: torch.device,
    path: str,
    loss_type: str = "stablemax_cross_entropy",
    model_id: str = "recursive_reasoning.trm@TinyRecursiveReasoningModel_ACTV1",
) -> nn.Module:
    """Upstream's loss head and the model `model_id` (`module@Class` under `models/`) from the checkout."""
    if not os.path.isdir(os.path.join(path, "models", "recursive_reasoning")):
        raise TRMError(f"TRM_UPSTREAM={path} is not a TinyRecursiveModels checkout: point it at a clone.")
    sys.path.insert(0, path)
    try:
        from models.losses import ACTLossHead as UpstreamLossHead

        module, _, name = model_id.partition("@")
        model_class = getattr(importlib.import_module(f"models.{module}"), name)
    except ImportError as exc:
        raise TRMError(f"cannot import upstream from {path} ({exc}): pip install pydantic einops") from exc
    finally:
        sys.path.remove(path)
    arch = asdict(config)
    arch.pop("eval_early_halt")
    with torch.device(device):
        model = model_class(arch)
        return UpstreamLossHead(model, loss_type=loss_type)


class UpstreamCall(nn.Module):
    """Adapts upstream's keyword call convention to ours."""

    def __init__(self, head: nn.Module) -> None:
        super().__init__()
        self.head = head

    def initial_carry(self, batch: dict[str, torch.Tensor]) -> Any:
        """Upstream allocates its carry on the default device, so set it (as upstream's trainer does)."""
        with torch.device(batch["inputs"].device):
            return self.head.initial_carry(batch)

    def forward(self, carry: Any, batch: dict[str, torch.Tensor]) -> Any:
        """Upstream's loss head called with keywords."""
        return self.head(carry=carry, batch=batch, return_keys=[])


@dataclass
class CompileTiming:
    """First compiled steps of one model, each from an empty cache, and what dynamo made of it."""

    name: str
    seconds: list[float]
    graphs: int
    graph_breaks: int

    @property
    def median_s(self) -> float:
        """The median first-step time over the repeats."""
        return statistics.median(self.seconds)


@dataclass
class Timing:
    """Result of timing one variant."""

    name: str
    first_step_s: float
    median_s: float

    @property
    def steps_per_s(self) -> float:
        """Throughput from the median step time."""
        return 1.0 / self.median_s


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Runner:
    """One variant: a loss head (eager or compiled), its optimizer and its carry, stepped like the trainer."""

    def __init__(
        self,
        name: str,
        head: nn.Module,
        config: TRMConfig,
        device: torch.device,
        compiled: bool,
        mode: str = "default",
    ) -> None:
        self.name, self.config, self.device = name, config, device
        self.optimizer = AdamATan2(
            [p for p in head.parameters() if p.requires_grad], lr=1e-4, betas=(0.9, 0.95)
        )
        self.step_fn: Callable[..., Any] = (
            torch.compile(head, mode=torch_compile_mode(mode)) if compiled else head
        )
        self.batch = make_batch(config, device)
        head.train()
        self.carry = head.initial_carry(self.batch)
        self.times: list[float] = []

    def step(self) -> float:
        """One timed training step."""
        start = time.perf_counter()
        self.carry, loss, *_ = self.step_fn(self.carry, self.batch)
        (loss / self.config.batch_size).backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        _sync(self.device)
        elapsed = time.perf_counter() - start
        self.times.append(elapsed)
        return elapsed


def warm_compiler(device: torch.device) -> None:
    """Compile one small function (in a throw-away cache) so that the compiler's imports and worker start-up
    are paid before any model is timed."""
    from torch._inductor.utils import fresh_cache

    torch._dynamo.reset()
    with fresh_cache():
        torch.compile(lambda x: torch.relu(x @ x).sum())(torch.ones(8, 8, device=device))
        _sync(device)
    torch._dynamo.reset()


def time_compiles(
    builders: list[tuple[str, Callable[[], nn.Module]]], config: Any, device: torch.device, repeats: int
) -> list[CompileTiming]:
    """Each model's first compiled training step, `repeats` times interleaved, each from an empty cache."""
    from torch._dynamo.utils import counters
    from torch._inductor.utils import fresh_cache

    warm_compiler(device)
    results = {name: CompileTiming(name, [], 0, 0) for name, _ in builders}
    for _ in range(repeats):
        for name, build in builders:
            torch._dynamo.reset()
            counters.clear()
            with fresh_cache():
                torch.manual_seed(0)
                seconds = Runner(f"{name}/compiled", build(), config, device, compiled=True).step()
            timing = results[name]
            timing.seconds.append(seconds)
            timing.graphs = int(counters["stats"]["unique_graphs"])
            timing.graph_breaks = sum(counters["graph_break"].values())
    torch._dynamo.reset()
    return list(results.values())


def time_interleaved(runners: list[Runner], *, steps: int, warmup: int) -> list[Timing]:
    """Warm every runner up, then alternate single steps between them so load changes hit all alike."""
    for runner in runners:
        for _ in range(warmup):
            runner.step()
    for _ in range(steps):
        for runner in runners:
            runner.step()
    return [Timing(r.name, r.times[0], statistics.median(r.times[warmup:])) for r in runners]


def attention_applications(config: TRMConfig) -> tuple[int, int]:
    """(block applications with gradient, without) of one training step; each holds one attention call."""
    with_grad = config.L_layers * (config.L_cycles + 1)
    without_grad = config.L_layers * (config.H_cycles - 1) * (config.L_cycles + 1)
    return with_grad, without_grad


def time_attention(config: TRMConfig, device: torch.device, repeats: int = 5) -> float:
    """Seconds per training step spent in SDPA alone: the kernel both models call, at the step's shapes.

    Forward+backward for each application with gradient, forward for each without, in the forward dtype;
    the median of `repeats`. The model-only difference between two implementations is the step time
    minus this.
    """
    shape = (config.batch_size, config.num_heads, config.total_seq_len, config.head_dim)
    g = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(shape, generator=g, device=device, dtype=config.dtype) for _ in range(3))
    grad = torch.randn(shape, generator=g, device=device, dtype=config.dtype)
    with_grad, without_grad = attention_applications(config)
    times = []
    for t in (q, k, v):
        t.requires_grad_(True)
    for _ in range(repeats + 1):
        _sync(device)
        start = time.perf_counter()
        for _ in range(with_grad):
            torch.autograd.grad(F.scaled_dot_product_attention(q, k, v), (q, k, v), grad)
        with torch.no_grad():
            for _ in range(without_grad):
                F.scaled_dot_product_attention(q, k, v)
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def print_attention_split(results: dict[tuple[str, bool], Timing], attention_s: float) -> None:
    """Attention's share of the eager step and each model's time outside it (eager calls SDPA as such)."""
    ours = results[("ours", False)].median_s
    print(
        f"attention (SDPA, same kernel in both): {attention_s * 1000:.1f} ms/step = {attention_s / ours:.0%} of ours"
    )
    if ("upstream", False) not in results:
        return
    theirs = results[("upstream", False)].median_s
    ours_rest, theirs_rest = ours - attention_s, theirs - attention_s
    if ours_rest > 0 and theirs_rest > 0:
        print(
            f"outside attention: ours {ours_rest * 1000:.1f} ms, upstream {theirs_rest * 1000:.1f} ms "
            f"({theirs_rest / ours_rest:.2f}x); with this attention kernel the step ratio cannot exceed "
            f"{theirs / attention_s:.2f}x"
        )


def print_compiles(timings: list[CompileTiming], ref_name: str) -> None:
    """One line per model (median first compiled step, the repeats, graphs, breaks) and ours vs the reference."""
    for t in timings:
        runs = " ".join(f"{x:.1f}" for x in t.seconds)
        print(
            f"compile {t.name:10s} {t.median_s:7.1f} s first step (median of {len(t.seconds)}: {runs}) "
            f"graphs={t.graphs} graph_breaks={t.graph_breaks}"
        )
    by_name = {t.name: t for t in timings}
    if "ours" in by_name and ref_name in by_name:
        ratio = by_name[ref_name].median_s / by_name["ours"].median_s
        print(f"compile time: {ref_name} / ours = {ratio:.2f}x (above 1: ours compiles faster)")


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    return gpu_peak_flops(torch.cuda.get_device_name(device))


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; a TRMError (e.g. a bad TRM_UPSTREAM) is printed without traceback, exit 2."""
    try:
        return _run(argv)
    except TRMError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


def _run(argv: list[str] | None) -> int:
    """Run the benchmark and print one line per variant plus the ours/upstream ratios."""
    parser = argparse.ArgumentParser(prog="python -m tools.bench.model", description=__doc__.splitlines()[0])
    parser.add_argument("--arch", choices=sorted(ARCHS), default="trm", help="architecture (default: trm)")
    parser.add_argument("--config", choices=sorted(CONFIGS), default=None, help="tiny (CPU) or paper (GPU)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per variant")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per variant")
    parser.add_argument("--batch-size", type=int, default=None, help="rows per step (default: the config's)")
    parser.add_argument("--no-compile", action="store_true", help="eager only")
    parser.add_argument(
        "--compile-mode",
        action="append",
        choices=[m for m in MODES if m != "default"],
        default=[],
        help="also time ours compiled in this torch.compile mode against the default mode (repeatable)",
    )
    parser.add_argument(
        "--compile-repeats",
        type=int,
        default=None,
        help="first compiled steps per model from an empty cache (default: 3 on CPU, 1 on CUDA; 0: none)",
    )
    parser.add_argument(
        "--no-attention-split", action="store_true", help="skip timing SDPA alone (attention's share)"
    )
    parser.add_argument(
        "--upstream",
        default=None,
        help="reference checkout [$TRM_UPSTREAM; for --arch urm $TRM_URM, a URM checkout]",
    )
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    arch = args.arch
    reference = args.upstream or os.environ.get(reference_env(arch))
    ref_name = "reference" if arch == "urm" else "upstream"
    config = CONFIGS[args.config or ("paper" if device.type == "cuda" else "tiny")](arch)
    if args.batch_size is not None:
        config = dataclasses.replace(config, batch_size=args.batch_size)
    modes = [False] if args.no_compile else [False, True]
    builders: list[tuple[str, Callable[[], nn.Module]]] = [("ours", lambda: build_ours(config, device))]
    if reference:
        builders.append((ref_name, lambda: build_reference(arch, config, device, reference)))
    trm_shaped = arch == "trm"  # the FLOP count and the attention split follow TRM's block schedule
    flops, peak = (step_flops(config), peak_flops(device)) if trm_shaped else (0.0, None)
    layers = depth_keys(arch, config)
    print(
        f"arch={arch} config={args.config or config.forward_dtype} device={device} "
        f"threads={torch.get_num_threads()} batch={config.batch_size} seq={config.total_seq_len} "
        f"hidden={config.hidden_size} {layers} "
        f"dtype={config.forward_dtype}"
    )
    repeats = args.compile_repeats
    if repeats is None:
        repeats = 1 if device.type == "cuda" else 3
    compiles = {}
    if True in modes and repeats > 0:
        compiles = {c.name: c for c in time_compiles(builders, config, device, repeats)}
        print_compiles(list(compiles.values()), ref_name)
    runners = []
    for compiled in modes:
        for name, build in builders:
            torch.manual_seed(0)
            label = f"{name}/{'compiled' if compiled else 'eager'}"
            runners.append(Runner(label, build(), config, device, compiled))
    if not args.no_compile:
        for mode in args.compile_mode:
            torch.manual_seed(0)
            runners.append(Runner(f"ours/{mode}", build_ours(config, device), config, device, True, mode))
    results: dict[tuple[str, bool], Timing] = {}
    by_mode: dict[str, Timing] = {}
    for runner, timing in zip(
        runners, time_interleaved(runners, steps=args.steps, warmup=args.warmup), strict=True
    ):
        name, mode = runner.name.split("/")
        if mode in args.compile_mode:
            by_mode[mode] = timing
        else:
            results[(name, mode == "compiled")] = timing
        mfu = f" mfu={flops / timing.median_s / peak:.1%}" if peak else ""
        first = f"first step {timing.first_step_s:.1f} s"
        if mode == "compiled" and name in compiles:
            first = f"compile {compiles[name].median_s:.1f} s"
        print(
            f"{timing.name:20s} {timing.median_s * 1000:8.1f} ms/step {timing.steps_per_s:6.2f} steps/s "
            f"({first}){mfu}"
        )
    for mode, timing in by_mode.items():
        ratio = results[("ours", True)].median_s / timing.median_s
        print(f"compile mode {mode}: {ratio:.2f}x vs the default mode (ours; above 1: faster)")
    for compiled in modes:
        if (ref_name, compiled) in results:
            ratio = results[(ref_name, compiled)].median_s / results[("ours", compiled)].median_s
            print(f"speedup {'compiled' if compiled else 'eager'}: {ratio:.2f}x vs {ref_name}")
    if trm_shaped and not config.mlp_t and not args.no_attention_split:
        print_attention_split(results, time_attention(config, device))
    if (ref_name, False) in results and True in modes:
        ratio = results[(ref_name, False)].median_s / results[("ours", True)].median_s
        print(f"speedup ours compiled vs {ref_name} eager: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
