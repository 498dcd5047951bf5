"""Training throughput: the FLOP count of an architecture, MFU, and host-side step timing.

FLOPs (multiply-adds count 2) per example of one ACT step, from the model config alone:

- A block application on one token costs
  - attention: `2·D·3A + 2·A·D` for the qkv and output projections plus `4·S·A` for Q·Kᵀ and
    attention·V, where D = hidden_size, A = num_heads·head_dim (= D unless the heads do not divide it)
    and S = total_seq_len (tokens plus the puzzle-embedding prefix);
  - or, with `mlp_t`, the token-mixing SwiGLU: `6·D·I_S` per token (I_S = SwiGLU width over S positions);
  - the SwiGLU MLP: `6·D·I` (gate/up `2·D·2I`, down `2·I·D`; I = round_up_256(round(expansion·D·2/3)));
  - URM's ConvSwiGLU adds its depthwise convolution, `2·conv_kernel·I`.
  That is ≈ 2 × the block's matmul parameters per token plus attention's sequence terms.
- Block applications per ACT step: the arch's recursion, its registry spec's `block_passes`
  (trm.model.registry). TRM and its ablations run H_cycles×(L_cycles+1) passes of the L_layers blocks, the
  last cycle's L_cycles+1 with gradient; HRM runs H_cycles×L_cycles low-level passes (L_layers) and H_cycles
  high-level passes (H_layers), the last of each with gradient; transformers_baseline one pass of H_layers
  with gradient; URM H_cycles×L_cycles passes of num_layers, the last cycle's L_cycles with gradient.
- The heads: `2·D·V` per token for the LM head over the seq_len answer positions and `2·D·2` for the Q
  head on the first position; they carry gradient.
- HRM (no_ACT_continue=False) runs one more no-grad forward per training step for its Q-learning target.
- Element-wise work (norms, RoPE, activations, residuals) and embedding lookups are not counted.

Training costs `3 × forward` for what carries gradient (forward + backward's two matmuls) and `1 × forward`
for the no-grad cycles. MFU = achieved training FLOP/s ÷ (peak FLOP/s per GPU × GPUs), with the dense
bf16 peak of the GPU from the GPU catalog (trm.gpu_catalog); on CPU (or a GPU not in the table) MFU is undefined and omitted.

Timing never adds a host sync: `StepTimer` reads the host clock around the loader's `next()` and at the
log points, where the loop already waits for the GPU (the metrics all-reduce), so the time between two
log points is the device's time for those steps.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

from trm import gpu_catalog
from trm.gpu_names import name_pattern

T = TypeVar("T")


@cache
def _peak_patterns(table: tuple[tuple[str, float], ...]) -> list[tuple[re.Pattern[str], float]]:
    """(name, TFLOP/s) as whole-word patterns, the longest name first ("H100 NVL" before "H100")."""
    return [(name_pattern(k), t) for k, t in sorted(table, key=lambda e: -len(e[0]))]


def peak_flops(device_name: str) -> float | None:
    """Peak dense bf16 FLOP/s of one GPU named `device_name` (nvidia-smi / torch name); None if unknown.

    None for a MIG slice ("… MIG 3g.40gb"): it has a share of the GPU's SMs that its name does not give,
    and MFU against the whole GPU's peak would be wrong.

    The peaks (dense bf16 tensor-core, fp32 accumulate, what torch's bf16 matmuls use; no sparsity) are the
    GPU catalog's (trm.gpu_catalog, with each figure's source)."""
    if re.search(r"\bMIG\b", device_name):
        return None
    for pattern, tflops in _peak_patterns(gpu_catalog.peak_tflops()):
        if pattern.search(device_name):
            return tflops * 1e12
    return None


@dataclass(frozen=True)
class ActStepFlops:
    """FLOPs of one ACT step of one example, split by whether they carry gradient."""

    grad: float
    """Forward FLOPs of the passes that carry gradient (the last cycle and the heads)."""
    no_grad: float
    """Forward FLOPs of the no-grad cycles."""
    q_target: bool = False
    """Training runs one more no-grad forward for the bootstrapped Q-continue target (no_ACT_continue=False)."""

    @property
    def forward(self) -> float:
        """Forward FLOPs of the whole ACT step (what evaluation runs per ACT step)."""
        return self.grad + self.no_grad

    @property
    def train(self) -> float:
        """Training FLOPs: 3 × the gradient-carrying forward + 1 × the no-grad forward (+ the Q target's)."""
        return 3 * self.grad + self.no_grad + (self.forward if self.q_target else 0.0)


def _block_flops_per_token(config: Any) -> float:
    from trm.model.config import swiglu_intermediate

    width = config.hidden_size
    inter = swiglu_intermediate(width, config.expansion)
    flops = 6.0 * width * inter
    if getattr(config, "mlp_t", False):
        flops += 6.0 * width * swiglu_intermediate(config.total_seq_len, config.expansion)
    else:
        inner = config.num_heads * (width // config.num_heads)
        flops += 2.0 * width * 3 * inner + 2.0 * inner * width + 4.0 * config.total_seq_len * inner
    kernel = getattr(config, "conv_kernel", None)
    if kernel:
        flops += 2.0 * kernel * inter
    return flops


def act_step_flops(config: Any) -> ActStepFlops:
    """FLOPs of one ACT step of one example for a model config (see the module docstring)."""
    from trm.model.registry import spec_of

    grad_blocks, no_grad_blocks = spec_of(config).block_passes(config)
    tokens = config.total_seq_len
    per_block = _block_flops_per_token(config) * tokens
    heads = 2.0 * config.hidden_size * config.vocab_size * config.seq_len + 2.0 * config.hidden_size * 2
    q_target = config.halt_max_steps > 1 and not getattr(config, "no_ACT_continue", True)
    return ActStepFlops(
        grad=grad_blocks * per_block + heads, no_grad=no_grad_blocks * per_block, q_target=q_target
    )


def total_steps(epochs: int, total_groups: int, mean_puzzle_examples: float, global_batch_size: int) -> int:
    """Optimizer steps of a run (upstream's estimate, also the LR schedule's length)."""
    return int(epochs * total_groups * mean_puzzle_examples / global_batch_size)


@dataclass(frozen=True)
class Window:
    """Host time of the optimizer steps between two log points."""

    steps: int
    seconds: float
    """Wall time of those steps (training passes only: evaluations are not in it)."""
    loader_wait: float
    """Of which the loop was blocked waiting for the data loader."""


class StepTimer:
    """Times the training passes on the host: the clock runs while a pass's batches are iterated
    (`batches`), so evaluations between passes are left out; `window()` closes the current log window."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._running_since: float | None = None
        self._seconds = 0.0
        self._loader_wait = 0.0
        self._steps = 0

    def batches(self, items: Iterable[T]) -> Iterator[T]:
        """Yield `items`, timing the pass and the waits in the loader's `next()`."""
        it = iter(items)
        self._running_since = self._clock()
        try:
            while True:
                start = self._clock()
                try:
                    item = next(it)
                except StopIteration:
                    return
                finally:
                    self._loader_wait += self._clock() - start
                yield item
        finally:
            if self._running_since is not None:
                self._seconds += self._clock() - self._running_since
                self._running_since = None
            close = getattr(it, "close", None)
            if close is not None:  # a loop that leaves early closes the loader's pass now, as without us
                close()

    def step_done(self) -> None:
        """Count one optimizer step in the current window."""
        self._steps += 1

    def window(self) -> Window:
        """The steps since the last call (or the start) and their time; starts the next window."""
        now = self._clock()
        seconds = self._seconds
        if self._running_since is not None:
            seconds += now - self._running_since
            self._running_since = now
        out = Window(steps=self._steps, seconds=seconds, loader_wait=self._loader_wait)
        self._seconds = self._loader_wait = 0.0
        self._steps = 0
        return out


def throughput_metrics(
    window: Window,
    *,
    examples_per_step: int,
    tokens_per_example: int,
    train_flops_per_example: float | None,
    peak_flops_total: float | None,
) -> dict[str, float]:
    """`perf/*` metrics of one window; MFU only when both the FLOP count and the peak are known."""
    if window.steps <= 0 or window.seconds <= 0:
        return {}
    examples_per_s = window.steps * examples_per_step / window.seconds
    out = {
        "perf/step_seconds": window.seconds / window.steps,
        "perf/examples_per_second": examples_per_s,
        "perf/tokens_per_second": examples_per_s * tokens_per_example,
        "perf/loader_wait_seconds": window.loader_wait / window.steps,
        "perf/loader_wait_fraction": min(1.0, window.loader_wait / window.seconds),
    }
    if train_flops_per_example and peak_flops_total:
        out["perf/mfu"] = examples_per_s * train_flops_per_example / peak_flops_total
    return out


def summarize(series: dict[str, list[tuple[int, float]]]) -> dict[str, float | None]:
    """The handoff's throughput summary from the logged `perf/*` series (None where nothing was logged)."""

    def values(name: str) -> list[float]:
        return [v for _, v in series.get(name, []) if math.isfinite(v)]

    def mean(xs: list[float]) -> float | None:
        return sum(xs) / len(xs) if xs else None

    def median(xs: list[float]) -> float | None:
        if not xs:
            return None
        s = sorted(xs)
        mid = len(s) // 2
        return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2

    step = values("perf/step_seconds")
    memory = values("perf/peak_memory_gib")
    return {
        "windows": len(step),
        "step_seconds_mean": mean(step),
        "step_seconds_median": median(step),
        "examples_per_second_median": median(values("perf/examples_per_second")),
        "tokens_per_second_median": median(values("perf/tokens_per_second")),
        "mfu_median": median(values("perf/mfu")),
        "peak_memory_gib": max(memory) if memory else None,
        "loader_wait_fraction_mean": mean(values("perf/loader_wait_fraction")),
    }
