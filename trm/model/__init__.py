"""The model family (TRM, URM): schemas, configs, recursion cores, the ACT wrapper, losses, the registry.

Names are loaded on first use, so that `trm.model.schema` and `trm.model.registry` import without torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "IGNORE_LABEL_ID": "trm.model.losses",
    "ACTLossHead": "trm.model.losses",
    "ACTCarry": "trm.model.act",
    "HaltExploration": "trm.model.act",
    "TinyRecursiveModel": "trm.model.act",
    "InnerCarry": "trm.model.core",
    "TRMCore": "trm.model.core",
    "TRMConfig": "trm.model.config",
    "LossConfig": "trm.model.schema",
    "TRMArch": "trm.model.schema",
    "URMArch": "trm.model.schema",
    "URMConfig": "trm.model.urm",
    "UniversalReasoningModel": "trm.model.urm",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'trm.model' has no attribute {name!r}")
