"""Learning-rate schedule shared by both optimizers: linear warmup, then cosine decay to a floor."""

from __future__ import annotations

import math


def lr_at_step(step: int, *, base_lr: float, warmup_steps: int, total_steps: int, min_ratio: float) -> float:
    """LR for optimizer step `step`, counted from 1 for the first update (upstream increments before use).

    step < warmup_steps: base·step/warmup; afterwards base·(min_ratio + (1−min_ratio)·½(1+cos(π·progress)))
    with progress = (step − warmup)/max(1, total − warmup); min_ratio=1 gives a constant LR after warmup.
    """
    if step < warmup_steps:
        return base_lr * step / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return base_lr * (min_ratio + max(0.0, (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))))
