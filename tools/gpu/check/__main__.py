"""`python -m tools.gpu.check`: the GPU host check (tools.gpu.check.cli)."""

import sys

from tools.gpu.check.cli import main

sys.exit(main())
