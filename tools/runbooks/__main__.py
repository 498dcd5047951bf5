"""`python -m tools.runbooks …` (its flags: tools/runbooks/cli.py; the task list: tools.cli.TASKS)."""

from __future__ import annotations

import sys

from tools.runbooks.cli import main

if __name__ == "__main__":
    sys.exit(main())
