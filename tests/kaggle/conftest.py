"""The tiny real checkpoint and its bundle that the Kaggle end-to-end tests share (once per test module)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import SmokeCheckpoint, make_smoke
from trm.kaggle.package import package_kaggle


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> SmokeCheckpoint:
    return make_smoke(tmp_path_factory.mktemp("kaggle"))


@pytest.fixture(scope="module")
def bundle_dir(smoke: SmokeCheckpoint) -> Path:
    """The smoke checkpoint packaged as `python -m trm package kaggle` does, without wheels."""
    out = smoke.root / "bundle"
    package_kaggle(smoke.checkpoint, out, wheels=False, progress=False)
    return out
