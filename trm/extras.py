"""How to add one of trm-stack's optional dependencies (pyproject's extras) to an environment.

trm-stack is not on a package index (installing it by name with an extra finds nothing, or someone
else's package): every trm image ships the hub, sync, tensorboard and wandb extras (docker/images.toml), and a
checkout installs one into its own venv with `pip install -e '.[EXTRA]'`, or the pinned packages alone.
"""

from __future__ import annotations

import importlib.metadata
import re


def extra_pins(extra: str) -> list[str]:
    """The exact pins of `extra` from the installed trm-stack's metadata (empty when it is not installed)."""
    try:
        requires = importlib.metadata.requires("trm-stack") or []
    except importlib.metadata.PackageNotFoundError:
        return []
    marker = re.compile(rf"""extra\s*==\s*["']{re.escape(extra)}["']""")
    return [r.split(";", 1)[0].strip() for r in requires if ";" in r and marker.search(r.split(";", 1)[1])]


def install_hint(extra: str) -> str:
    """One sentence: where the extra already is, and the commands that add it (never an index install)."""
    pins = extra_pins(extra)
    alone = f", or `pip install {' '.join(repr(p) for p in pins)}`" if pins else ""
    return (
        f"the trm images include it; in a checkout's venv run `pip install -e '.[{extra}]'` from the checkout"
        f"{alone} (trm-stack is not on a package index)"
    )
