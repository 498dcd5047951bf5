"""The torch.compile setting, `auto | true | false`: one spelling for the trainer's `compile=` key, the
launcher's COMPILE variable and `select-config --compile`."""

from __future__ import annotations

from trm.errors import TRMError

CHOICES = ("auto", "true", "false")
# torch.compile's modes (the trainer's `compile_mode=`): `default` fuses elementwise work around library
# matmuls; `max-autotune-no-cudagraphs` also autotunes the matmuls and fuses their epilogues (longer compile);
# `max-autotune` and `reduce-overhead` add CUDA graphs, which replay a captured step on CUDA only.
MODES = ("default", "max-autotune-no-cudagraphs", "max-autotune", "reduce-overhead")


def torch_compile_mode(mode: str) -> str | None:
    """torch.compile's `mode=` for `compile_mode=mode` (None: its default mode)."""
    if mode not in MODES:
        raise TRMError(f"compile_mode={mode!r}: use one of {', '.join(MODES)}")
    return None if mode == "default" else mode


def parse_compile(value: str, *, source: str) -> bool | None:
    """`auto` (or empty) -> None: the hardware tier or the device decides; `true` -> True; `false` -> False.

    `source` names where the value came from (`COMPILE`, `--compile`) so the error says what to change.
    """
    text = value.strip().lower() or "auto"
    if text not in CHOICES:
        raise TRMError(f"{source}={value!r}: use {', '.join(CHOICES[:-1])} or {CHOICES[-1]}")
    return None if text == "auto" else text == "true"


# The smoke gate's fallback when torch.compile fails on a host (an old driver, a missing C toolchain, a
# Triton/ptxas problem) and compile was not asked for explicitly: the run trains eager, and this file in the
# run's launch/ directory records it, so a restart of the same run stays eager instead of failing again.
FALLBACK_FILE = "compile_fallback.json"
# What a failed torch.compile prints (Dynamo, Inductor, Triton and its bundled ptxas).
_FAILURE_MARKERS = (
    "torch._dynamo",
    "torch._inductor",
    "BackendCompilerFailed",
    "InductorError",
    "triton",
    "ptxas",
)
_ERROR_WORDS = ("error", "failed", "fatal")


def compile_failure(log_text: str) -> str | None:
    """The last line of a trainer log that shows torch.compile failing, or None when none does."""
    for line in reversed(log_text.splitlines()):
        low = line.lower()
        if any(m.lower() in low for m in _FAILURE_MARKERS) and any(w in low for w in _ERROR_WORDS):
            return line.strip()[:300]
    return None
