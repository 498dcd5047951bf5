"""The architecture schemas: each architecture's keys declared once, with the docstrings `--help` shows.

Keys every architecture shares live in `CoreFields` (and `UpstreamFields` for upstream's family); each
architecture's `<Name>Fields` adds its own keys and the reference's defaults where they differ; `<Name>Arch`
is the command-line schema of `arch.*` (`CommandLineKeys` adds `loss` and the trainer's defaults: `auto`
dtype, the puzzle width following hidden_size; the class adds `name`); the model config
(`trm.model.config.TRMConfig`, `trm.model.urm.URMConfig`) adds `DatasetSizes`. This module imports no torch (the trainer's `--help` stays light).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from trm.errors import TRMError
from trm.key_roles import EVAL_ONLY, RESUMABLE, keyed

# Keys of a reference's arch config that are not model settings (the loss and class name) or are ignored.
IGNORED_ARCH_KEYS = ("name", "loss", "causal")


@dataclass
class LossConfig:
    """`arch.loss.*`: the loss head (shared by every architecture)."""

    name: str = "losses@ACTLossHead"
    """The reference's loss class id; only ACTLossHead exists."""
    loss_type: str = "stablemax_cross_entropy"
    """stablemax_cross_entropy | softmax_cross_entropy."""


@dataclass(kw_only=True)
class DatasetSizes:
    """Sizes every model takes from the dataset metadata and the batch plan (never command-line keys)."""

    batch_size: int
    """Local (per-rank) batch size: the number of ACT carry slots and puzzle-embedding gradient rows."""
    seq_len: int
    """Tokens per example (ARC 900, Sudoku 81)."""
    vocab_size: int
    """Token vocabulary (ARC 12: PAD, EOS, 10 colours)."""
    num_puzzle_identifiers: int
    """Rows of the puzzle-embedding table (dataset metadata `num_puzzle_identifiers`)."""

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Any:
        """Build from an arch mapping; drops the reference's `name`/`loss`/`causal`, rejects unknown keys."""
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in values.items() if k not in IGNORED_ARCH_KEYS}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise TRMError(
                f"unknown arch key(s) {', '.join(unknown)}: remove them; valid keys are {', '.join(sorted(known))}."
            )
        missing = sorted(f.name for f in dataclasses.fields(cls) if f.name not in kwargs and _required(f))
        if missing:
            raise TRMError(
                f"arch config lacks {', '.join(missing)}: the trainer sets them from dataset metadata."
            )
        if "expansion" in kwargs:
            kwargs["expansion"] = float(kwargs["expansion"])
        return cls(**kwargs)


@dataclass(kw_only=True)
class CoreFields:
    """Keys every architecture has; each reference config uses these defaults unless its class overrides one."""

    hidden_size: int = 512
    """Model width."""
    num_heads: int = 8
    """Attention heads (head_dim = hidden_size / num_heads)."""
    expansion: float = 4.0
    """SwiGLU expansion; intermediate = round_up_256(round(expansion * width * 2 / 3))."""
    puzzle_emb_ndim: int = 512
    """Width of a puzzle embedding (ceil(puzzle_emb_ndim / hidden_size) prefix positions); 0 disables it."""
    rms_norm_eps: float = 1e-5
    """RMSNorm epsilon."""
    rope_theta: float = 10000.0
    """RoPE base."""
    halt_exploration_prob: float = 0.1
    """Training: probability that a slot draws a random minimum halting step."""
    forward_dtype: str = keyed(RESUMABLE, "bfloat16")
    """Activation dtype ("bfloat16" on GPU; "float32" on CPU). Parameters stay fp32."""
    eval_early_halt: bool = False
    """Inference only: a slot stops as soon as q_halt > 0 instead of running every ACT step."""


@dataclass(kw_only=True)
class UpstreamFields(CoreFields):
    """Keys every upstream TinyRecursiveModels architecture adds (trm, its ablations, hrm, the baseline)."""

    pos_encodings: str = "rope"
    """"rope", "learned" or "none"."""
    halt_max_steps: int = 16
    """ACT supervision steps per example; evaluation always runs exactly this many."""


@dataclass(kw_only=True)
class TRMFields(UpstreamFields):
    """The TRM architecture keys; defaults are upstream's `config/arch/trm.yaml`."""

    puzzle_emb_len: int = 16
    """Prefix positions prepended to the tokens; 0 means ceil(puzzle_emb_ndim / hidden_size) (set 0 with
    puzzle_emb_ndim=0)."""
    H_cycles: int = 3
    """Outer recursion cycles per ACT step (the last one carries gradient)."""
    L_cycles: int = 6
    """Latent updates per outer cycle."""
    H_layers: int = 0
    """Unused by TRM; kept so upstream configs load."""
    L_layers: int = 2
    """Blocks in the single reasoning network."""
    mlp_t: bool = False
    """Replace attention by a SwiGLU over the token axis (upstream's Sudoku "MLP" variant)."""
    no_ACT_continue: bool = True
    """Halt on sigmoid(q_halt) alone; False adds the bootstrapped Q-continue target and loss."""


@dataclass(kw_only=True)
class HRMFields(UpstreamFields):
    """The HRM architecture keys; defaults are upstream's `config/arch/hrm.yaml`."""

    H_cycles: int = 2
    """High-level (z_H) updates per ACT step; only the last one, and the z_L update before it, carry gradient."""
    L_cycles: int = 2
    """Low-level (z_L) updates per high-level update."""
    H_layers: int = 4
    """Blocks of the high-level network."""
    L_layers: int = 4
    """Blocks of the low-level network."""
    mlp_t: bool = False
    """Replace attention by a SwiGLU over the token axis."""


@dataclass(kw_only=True)
class TransformerBaselineFields(UpstreamFields):
    """The transformers_baseline keys; defaults are upstream's `config/arch/transformers_baseline.yaml`."""

    H_cycles: int = 1
    """Unused (kept so upstream's configs load): one pass of the blocks per ACT step."""
    H_layers: int = 8
    """Transformer blocks; each ACT step applies them once to z + x, with gradient."""
    num_heads: int = 12
    """Attention heads; head_dim = hidden_size // num_heads (need not divide: 512 / 12 gives 12 × 42)."""
    pos_encodings: str = "rope"
    """"rope" or "learned"."""
    act_enabled: bool = True
    """Training halts a slot early when q_halt > q_continue; False always runs halt_max_steps."""
    act_inference: bool = False
    """Evaluation halts a slot when q_halt > q_continue (upstream's semantics: a slot that halts before
    the others restarts on its example, and the batch ends when every slot halts in the same step)."""


@dataclass(kw_only=True)
class URMFields(CoreFields):
    """The URM architecture keys; defaults are the reference's `config/arch/urm.yaml` (RoPE always)."""

    loops: int = 16
    """ACT supervision steps per example (the reference's `loops`); evaluation runs exactly this many."""
    H_cycles: int = 4
    """Outer cycles per ACT step; all but the last run without gradient (truncated backpropagation)."""
    L_cycles: int = 3
    """Loops per outer cycle; each adds the input embedding, then applies every block."""
    num_layers: int = 8
    """Blocks in the stack (attention + ConvSwiGLU, post-norm)."""
    expansion: float = 4.0
    """ConvSwiGLU expansion; intermediate = round_up_256(round(expansion * width * 2 / 3))."""
    conv_kernel: int = 2
    """Depthwise convolution width over the sequence (2: causal, the previous and current token)."""
    conv_dtype: str = "bfloat16"
    """dtype of the convolution's parameters and arithmetic; the reference uses bfloat16 everywhere."""
    loop_deltas: list[int] = keyed(EVAL_ONLY, default_factory=lambda: [0, 8])
    """Evaluation only: one pass per delta with loops + delta ACT steps (the reference's loop
    extrapolation, same evaluators: ARC votes pool across the passes); delta 0's metrics keep their
    names, the others are logged as `loops+<d>/…` with submissions under `loops+<d>/`."""

    @property
    def halt_max_steps(self) -> int:
        """The ACT step limit under the name the shared ACT wrapper and trainer use."""
        return self.loops


@dataclass(kw_only=True)
class CommandLineKeys:
    """What `arch.*` on the command line adds to an architecture's keys: the loss and the trainer's defaults.

    Listed first among an `*Arch` class's bases, so these defaults replace the reference's."""

    loss: LossConfig = field(default_factory=LossConfig)
    """The loss head."""
    puzzle_emb_ndim: int = "${.hidden_size}"  # type: ignore[assignment]
    """Width of a puzzle embedding (default: hidden_size); 0 disables the table."""
    forward_dtype: str = keyed(RESUMABLE, "auto")
    """auto (bfloat16 on CUDA, float32 on CPU) | bfloat16 | float32 | float16. Parameters stay fp32."""


@dataclass(kw_only=True)
class TRMArch(CommandLineKeys, TRMFields):
    """`arch=trm`: the schema of `arch.*` on the command line (the dataset sizes are filled in later)."""

    name: str = keyed(RESUMABLE, "recursive_reasoning.trm@TinyRecursiveReasoningModel_ACTV1")
    """Model id (upstream's class path; `trm` is accepted too)."""


@dataclass(kw_only=True)
class TRMSingleZArch(TRMArch):
    """`arch=trm_singlez`: upstream's one-latent ablation of TRM (TRM's keys and defaults)."""

    name: str = keyed(RESUMABLE, "recursive_reasoning.trm_singlez@TinyRecursiveReasoningModel_ACTV1")
    """Model id (upstream's class path; `trm_singlez` is accepted too)."""


@dataclass(kw_only=True)
class TRMHier6Arch(TRMArch):
    """`arch=trm_hier6`: upstream's six-reasoning-latent ablation of TRM (TRM's keys; L_cycles <= 6)."""

    name: str = keyed(RESUMABLE, "recursive_reasoning.trm_hier6@TinyRecursiveReasoningModel_ACTV1")
    """Model id (upstream's class path; `trm_hier6` is accepted too)."""


@dataclass(kw_only=True)
class HRMArch(CommandLineKeys, HRMFields):
    """`arch=hrm`: the Hierarchical Reasoning Model (halting by Q-learning: q_halt vs q_continue)."""

    name: str = keyed(RESUMABLE, "recursive_reasoning.hrm@HierarchicalReasoningModel_ACTV1")
    """Model id (upstream's class path; `hrm` is accepted too)."""


@dataclass(kw_only=True)
class TransformerBaselineArch(CommandLineKeys, TransformerBaselineFields):
    """`arch=transformers_baseline`: upstream's plain-transformer ablation (no recursion inside an ACT step)."""

    heads_must_divide: ClassVar[bool] = False
    name: str = keyed(RESUMABLE, "recursive_reasoning.transformers_baseline@Model_ACTV2")
    """Model id (upstream's class path; `transformers_baseline` is accepted too)."""


@dataclass(kw_only=True)
class URMArch(CommandLineKeys, URMFields):
    """`arch=urm`: the schema of `arch.*` on the command line (the dataset sizes are filled in later)."""

    name: str = keyed(RESUMABLE, "urm.urm@URM")
    """Model id (the reference's class path; `urm` is accepted too)."""


def _required(spec: dataclasses.Field[Any]) -> bool:
    return spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING
