"""The report tests plot (matplotlib, Pillow). A GPU host runs the suite with the GPU kit, which leaves the
plotting libraries out (nothing the GPU check runs plots): there these modules are not collected. They hold
no gpu test; everywhere else (CI, dev venvs: matplotlib is a runtime dependency) they run."""

from __future__ import annotations

import importlib.util

PLOTTING = ("matplotlib", "PIL")
collect_ignore = (
    ["test_errors.py", "test_report.py"] if any(importlib.util.find_spec(m) is None for m in PLOTTING) else []
)
