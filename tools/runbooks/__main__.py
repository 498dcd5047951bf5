"""`python -m tools.runbooks …`: check, run (cpu tier) or version-stamp the runbooks."""

from __future__ import annotations

import sys

from tools.runbooks.cli import main

if __name__ == "__main__":
    sys.exit(main())
