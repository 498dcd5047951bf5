"""`python -m tools.release …` (its flags: tools/release/cli.py; the task list: tools.cli.TASKS)."""

from __future__ import annotations

import sys

from tools.release.cli import main

if __name__ == "__main__":
    sys.exit(main())
