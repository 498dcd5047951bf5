"""`python -m tools.jobs …`: render, validate or image-pin the Kubernetes jobs."""

from __future__ import annotations

import sys

from tools.jobs.cli import main

if __name__ == "__main__":
    sys.exit(main())
