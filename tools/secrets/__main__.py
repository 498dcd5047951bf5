"""`python -m tools.secrets …`: scan the repository for API keys, tokens, private keys (detect-secrets)."""

from __future__ import annotations

import sys

from tools.secrets.cli import main

if __name__ == "__main__":
    sys.exit(main())
