"""TRMConfig: the architecture settings of a Tiny Recursive Model (upstream's `arch.*` keys)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from trm.errors import TRMError
from trm.model.schema import DatasetSizes, LossConfig, TRMArch, TRMFields

if TYPE_CHECKING:
    import torch

__all__ = [
    "FORWARD_DTYPES",
    "POS_ENCODINGS",
    "LossConfig",
    "ModelShape",
    "TRMArch",
    "TRMConfig",
    "torch_dtype",
]

POS_ENCODINGS = ("rope", "learned", "none")
# The activation dtypes a config may name (torch's names); torch itself is imported only when a model is
# built, so that reading and checking a config (the launcher's plan, a dry run) does not load it.
FORWARD_DTYPES = ("bfloat16", "float16", "float32")


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of one of FORWARD_DTYPES."""
    import torch

    return getattr(torch, name)


def round_up(value: int, multiple: int) -> int:
    """Smallest multiple of `multiple` that is >= value."""
    return -(value // -multiple) * multiple


def swiglu_intermediate(width: int, expansion: float) -> int:
    """Upstream's SwiGLU intermediate size: round(expansion·width·2/3) rounded up to a multiple of 256."""
    return round_up(round(expansion * width * 2 / 3), 256)


class ModelShape:
    """Sizes every model config derives the same way (from seq_len, prefix_len, hidden_size, num_heads)."""

    seq_len: int
    hidden_size: int
    num_heads: int
    forward_dtype: str
    prefix_len: int  # each config's own rule (a property)

    @property
    def total_seq_len(self) -> int:
        """Working sequence length: prefix plus tokens (ARC: 916 for TRM, 901 with the ceil rule)."""
        return self.seq_len + self.prefix_len

    @property
    def head_dim(self) -> int:
        """Per-head width."""
        return self.hidden_size // self.num_heads

    @property
    def dtype(self) -> torch.dtype:
        """The torch dtype of activations."""
        return torch_dtype(self.forward_dtype)


@dataclass(kw_only=True)
class TRMConfig(ModelShape, DatasetSizes, TRMFields):
    """A TRM model's full configuration: the architecture keys plus the dataset sizes."""

    heads_must_divide: ClassVar[bool] = True

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
        if self.hidden_size % self.num_heads and self.heads_must_divide:
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
