"""`python -m tools.images …` (its flags: tools/images/cli.py; the task list: tools.cli.TASKS)."""

from __future__ import annotations

import sys

from tools.images.cli import main

if __name__ == "__main__":
    sys.exit(main())
