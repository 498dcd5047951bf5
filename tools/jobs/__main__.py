"""`python -m tools.jobs …` (its flags: tools/jobs/cli.py; the task list: tools.cli.TASKS)."""

from __future__ import annotations

import sys

from tools.jobs.cli import main

if __name__ == "__main__":
    sys.exit(main())
