"""Optimizers: AdamATan2 (0.0.3 rule), Muon (URM), sparse puzzle-embedding SignSGD, LR schedule, EMA."""

from __future__ import annotations

from trm.optim.adam_atan2 import AdamATan2
from trm.optim.backend import build_adam_atan2
from trm.optim.ema import EMA
from trm.optim.muon import Muon, build_muon
from trm.optim.schedule import lr_at_step
from trm.optim.sign_sgd import SparseEmbeddingSignSGD

__all__ = [
    "EMA",
    "AdamATan2",
    "Muon",
    "SparseEmbeddingSignSGD",
    "build_adam_atan2",
    "build_muon",
    "lr_at_step",
]
