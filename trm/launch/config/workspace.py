"""The launch's directories on the host: created up front, so a permission problem is a clean error."""

from __future__ import annotations

import os

from trm.errors import TRMError
from trm.launch.config.settings import LaunchSettings
from trm.safe_remove import remove_own_temp


def ensure_writable(settings: LaunchSettings) -> None:
    """Create the run, data and artifacts directories and check that each one can be written."""
    for name, path in (
        ("CHECKPOINT_DIR", settings.launch_dir),
        ("DATA_DIR", settings.data_dir),
        ("ARTIFACTS_DIR", settings.artifacts_dir),
    ):
        try:
            path.mkdir(parents=True, exist_ok=True)
            probe = path / f".trm-write-test-{os.getpid()}"
            probe.write_text("")
            remove_own_temp(probe)
        except OSError as err:
            raise TRMError(
                f"cannot write to {path} ({err.strerror or err}); set {name} (or WORKSPACE) to a writable "
                "directory on a persistent volume, or fix its owner (`sudo chown -R $(id -u) …`)"
            ) from None
