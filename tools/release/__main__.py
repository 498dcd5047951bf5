"""`python -m tools.release …`: release images: build, push, pin the lock by registry digest, re-stamp runbooks and jobs (make release)."""

from __future__ import annotations

import sys

from tools.release.cli import main

if __name__ == "__main__":
    sys.exit(main())
