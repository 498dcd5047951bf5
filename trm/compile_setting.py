"""The torch.compile setting, `auto | true | false`: one spelling for the trainer's `compile=` key, the
launcher's COMPILE variable and `select-config --compile`."""

from __future__ import annotations

from trm.errors import TRMError

CHOICES = ("auto", "true", "false")


def parse_compile(value: str, *, source: str) -> bool | None:
    """`auto` (or empty) -> None: the hardware tier or the device decides; `true` -> True; `false` -> False.

    `source` names where the value came from (`COMPILE`, `--compile`) so the error says what to change.
    """
    text = value.strip().lower() or "auto"
    if text not in CHOICES:
        raise TRMError(f"{source}={value!r}: use {', '.join(CHOICES[:-1])} or {CHOICES[-1]}")
    return None if text == "auto" else text == "true"
