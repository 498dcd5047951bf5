"""`python -m trm <command> …`: the project's command line (the commands are in `trm.commands`)."""

from __future__ import annotations

import sys

from trm.commands import main

if __name__ == "__main__":
    sys.exit(main())
