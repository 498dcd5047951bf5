"""Every exit code of trm/exit_codes.py is documented: a row of README's table and a handoff status."""

from __future__ import annotations

import re
from pathlib import Path

from trm import exit_codes
from trm.launch.handoff.handoff import status_of

ROOT = Path(__file__).resolve().parents[1]
CODES = {name: value for name, value in vars(exit_codes).items() if name.isupper() and isinstance(value, int)}


def test_codes_are_distinct_and_fit_a_process_exit():
    assert len(set(CODES.values())) == len(CODES), CODES
    assert all(0 <= code < 126 for code in CODES.values())  # 126+ mean "not executable" / signals
    assert (exit_codes.HUNG, exit_codes.NONFINITE) == (77, 78)


def test_every_code_has_a_readme_row_and_a_handoff_status():
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("Exit codes (`trm/exit_codes.py`") :]
    rows = {int(m.group(1)) for m in re.finditer(r"(?m)^\| (\d+) \|", table.split("\n\n")[1])}
    assert set(CODES.values()) <= rows, set(CODES.values()) - rows
    for name, code in CODES.items():
        assert not status_of(code).startswith("failed (exit"), name  # a specific status, not the fallback
