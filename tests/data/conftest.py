"""Fixtures for the data tests: small datasets built once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import SMOKE_BUILD
from trm.data.build_arc import build_arc_dataset


@pytest.fixture(scope="session")
def smoke_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The shipped data, 12 tasks per subset, aug 8, in both forms."""
    root = tmp_path_factory.mktemp("smoke")
    dirs = {}
    for form in ("compact", "materialized"):
        dirs[form] = root / form
        build_arc_dataset(dirs[form], form=form, **SMOKE_BUILD)
    return dirs
