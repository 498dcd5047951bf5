"""TRMConfig: the architecture settings of a Tiny Recursive Model (upstream's `arch.*` keys)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from trm.errors import TRMError

POS_ENCODINGS = ("rope", "learned", "none")
FORWARD_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
# Keys of upstream's arch config that are not model settings (the loss and class name) or that TRM ignores.
IGNORED_ARCH_KEYS = ("name", "loss", "causal")


@dataclass(kw_only=True)
class TRMConfig:
    """Architecture of a TRM; the field names and defaults are upstream's `config/arch/trm.yaml`."""

    batch_size: int
    """Local (per-rank) batch size: the number of ACT carry slots and puzzle-embedding gradient rows."""
    seq_len: int
    """Tokens per example (ARC 900, Sudoku 81)."""
    vocab_size: int
    """Token vocabulary (ARC 12: PAD, EOS, 10 colours)."""
    num_puzzle_identifiers: int
    """Rows of the puzzle-embedding table (dataset metadata `num_puzzle_identifiers`)."""
    puzzle_emb_ndim: int = 512
    """Width of a puzzle embedding; 0 disables the table (the prefix positions then stay zero)."""
    puzzle_emb_len: int = 16
    """Prefix positions prepended to the tokens; 0 means ceil(puzzle_emb_ndim / hidden_size)."""
    H_cycles: int = 3
    """Outer recursion cycles per ACT step (the last one carries gradient)."""
    L_cycles: int = 6
    """Latent updates per outer cycle."""
    H_layers: int = 0
    """Unused by TRM; kept so upstream configs load."""
    L_layers: int = 2
    """Blocks in the single reasoning network."""
    hidden_size: int = 512
    """Model width."""
    expansion: float = 4.0
    """SwiGLU expansion; intermediate = round_up_256(round(expansion * width * 2 / 3))."""
    num_heads: int = 8
    """Attention heads (head_dim = hidden_size / num_heads)."""
    pos_encodings: str = "rope"
    """"rope", "learned" or "none"."""
    rms_norm_eps: float = 1e-5
    """RMSNorm epsilon."""
    rope_theta: float = 10000.0
    """RoPE base."""
    halt_max_steps: int = 16
    """ACT supervision steps per example; evaluation always runs exactly this many."""
    halt_exploration_prob: float = 0.1
    """Training: probability that a slot draws a random minimum halting step."""
    forward_dtype: str = "bfloat16"
    """Activation dtype ("bfloat16" on GPU; the trainer uses "float32" on CPU). Parameters stay fp32."""
    mlp_t: bool = False
    """Replace attention by a SwiGLU over the token axis (upstream's Sudoku "MLP" variant)."""
    no_ACT_continue: bool = True
    """Halt on sigmoid(q_halt) alone; False adds the bootstrapped Q-continue target and loss."""
    eval_early_halt: bool = False
    """Inference only: a slot stops as soon as q_halt > 0 instead of running all halt_max_steps."""

    def __post_init__(self) -> None:
        positive = ("batch_size", "seq_len", "vocab_size", "num_puzzle_identifiers", "H_cycles", "L_cycles")
        positive += ("L_layers", "hidden_size", "num_heads", "halt_max_steps")
        for key in positive:
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise TRMError(f"arch.{key}={value!r} is invalid: set it to a positive integer.")
        for key in ("puzzle_emb_ndim", "puzzle_emb_len", "H_layers"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise TRMError(f"arch.{key}={value!r} is invalid: set it to an integer >= 0.")
        if self.hidden_size % self.num_heads:
            raise TRMError(
                f"arch.hidden_size={self.hidden_size} is not divisible by arch.num_heads={self.num_heads}: "
                "choose num_heads dividing hidden_size (e.g. hidden_size=512 num_heads=8)."
            )
        if self.pos_encodings not in POS_ENCODINGS:
            raise TRMError(
                f"arch.pos_encodings={self.pos_encodings!r} is unknown: use one of {', '.join(POS_ENCODINGS)}."
            )
        if self.pos_encodings == "rope" and self.head_dim % 2:
            raise TRMError(
                f"arch.pos_encodings=rope needs an even head_dim, got {self.head_dim}: change "
                "arch.hidden_size / arch.num_heads, or set arch.pos_encodings=none."
            )
        if self.forward_dtype not in FORWARD_DTYPES:
            raise TRMError(
                f"arch.forward_dtype={self.forward_dtype!r} is unknown: use one of {', '.join(FORWARD_DTYPES)}."
            )
        if not 0.0 <= self.halt_exploration_prob <= 1.0:
            raise TRMError(
                f"arch.halt_exploration_prob={self.halt_exploration_prob} must lie in [0, 1] (upstream uses 0.1)."
            )
        if not self.expansion > 0 or not self.rms_norm_eps > 0 or not self.rope_theta > 0:
            raise TRMError(
                "arch.expansion, arch.rms_norm_eps and arch.rope_theta must be positive "
                f"(got {self.expansion}, {self.rms_norm_eps}, {self.rope_theta})."
            )

    @property
    def prefix_len(self) -> int:
        """Prefix positions actually prepended (upstream's ceil rule when puzzle_emb_len is 0)."""
        if self.puzzle_emb_len:
            return self.puzzle_emb_len
        return math.ceil(self.puzzle_emb_ndim / self.hidden_size)

    @property
    def total_seq_len(self) -> int:
        """Working sequence length: prefix plus tokens (ARC default 916)."""
        return self.seq_len + self.prefix_len

    @property
    def head_dim(self) -> int:
        """Per-head width."""
        return self.hidden_size // self.num_heads

    @property
    def dtype(self) -> torch.dtype:
        """The torch dtype of activations."""
        return FORWARD_DTYPES[self.forward_dtype]

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TRMConfig:
        """Build from an arch mapping; drops upstream's `name`/`loss`/`causal`, rejects unknown keys."""
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


def _required(field: dataclasses.Field[Any]) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
