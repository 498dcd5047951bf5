"""`python -m tools.images …`: container images: lock, wheelhouse, build, push, ref, docs."""

from __future__ import annotations

import sys

from tools.images.cli import main

if __name__ == "__main__":
    sys.exit(main())
