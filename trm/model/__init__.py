"""Tiny Recursive Model: config, recursion core, ACT wrapper and losses."""

from __future__ import annotations

from trm.model.act import ACTCarry, HaltExploration, TinyRecursiveModel
from trm.model.config import TRMConfig
from trm.model.core import InnerCarry, TRMCore
from trm.model.losses import IGNORE_LABEL_ID, ACTLossHead

__all__ = [
    "IGNORE_LABEL_ID",
    "ACTCarry",
    "ACTLossHead",
    "HaltExploration",
    "InnerCarry",
    "TRMConfig",
    "TRMCore",
    "TinyRecursiveModel",
]
