"""`python -m tools.secrets …` (its flags: tools/secrets/cli.py; the task list: tools.cli.TASKS)."""

from __future__ import annotations

import sys

from tools.secrets.cli import main

if __name__ == "__main__":
    sys.exit(main())
