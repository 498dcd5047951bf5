"""Importing the URM reference (TRM_URM checkout) on CPU for parity tests: the builder lives in
`tools.bench.urm_reference` (shared with the model bench); this adds the tests' skip on missing imports."""

from __future__ import annotations

from typing import Any

import torch

from tests.helpers import require_modules
from tools.bench import urm_reference


def import_reference(path: str) -> tuple[type, type]:
    """(URM model class, its ACTLossHead class) from the checkout at `path`."""
    require_modules("pydantic", "einops")
    return urm_reference.import_reference(path)


def reference_head(config: Any, path: str, loss_type: str = "stablemax_cross_entropy") -> torch.nn.Module:
    """The reference's loss head around its URM, built from our URMConfig's values."""
    require_modules("pydantic", "einops")
    return urm_reference.reference_head(config, path, loss_type)
