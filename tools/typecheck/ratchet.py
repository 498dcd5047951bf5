"""The ratchet: mypy's errors counted per file against the recorded baseline (see tools.typecheck)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import re
from collections import Counter
from pathlib import Path

from tools import typecheck as package
from trm.errors import TRMError
from trm.io import atomic_write_json

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "tools" / "typecheck" / "baseline.json"
# mypy's error lines: `path:line: error: message  [code]` (notes and the summary line are not errors)
_ERROR = re.compile(r"^(?P<path>[^:\n]+\.py):\d+: error: ", re.M)


def count_errors(output: str) -> dict[str, int]:
    """Errors per file in mypy's output, files sorted."""
    return dict(sorted(Counter(m["path"] for m in _ERROR.finditer(output)).items()))


def errors_of(output: str, path: str) -> list[str]:
    """mypy's error lines for one file."""
    return [line for line in output.splitlines() if line.startswith(f"{path}:") and ": error: " in line]


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Files with more errors than recorded (path -> (recorded, now)) and files with fewer."""

    risen: dict[str, tuple[int, int]]
    fallen: dict[str, tuple[int, int]]


def compare(counts: dict[str, int], baseline: dict[str, int]) -> Comparison:
    """Each file's count now against its recorded one (a file the baseline leaves out has none recorded)."""
    paths = sorted(set(counts) | set(baseline))
    pairs = {p: (baseline.get(p, 0), counts.get(p, 0)) for p in paths}
    return Comparison(
        risen={p: (old, new) for p, (old, new) in pairs.items() if new > old},
        fallen={p: (old, new) for p, (old, new) in pairs.items() if new < old},
    )


def read_baseline(path: Path) -> dict[str, int]:
    """The recorded counts; an absent file records none."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise TRMError(f"{path}: not readable JSON ({exc}); restore it with git checkout -- {path}") from exc
    if not isinstance(data, dict) or not all(isinstance(v, int) and v > 0 for v in data.values()):
        raise TRMError(f"{path}: expected an object of file paths to positive error counts")
    return data


def run_mypy(root: Path) -> str:
    """mypy over the configured files (pyproject.toml [tool.mypy]); its report. Raises when it cannot run."""
    from mypy import api

    stdout, stderr, status = api.run(["--config-file", str(root / "pyproject.toml")])
    if status not in (0, 1):
        raise TRMError(f"mypy could not run (exit {status}):\n{(stderr or stdout).strip()}")
    return stdout


def check(output: str, baseline: dict[str, int]) -> tuple[int, list[str]]:
    """The exit code and the lines to print for mypy's `output` against `baseline`."""
    counts = count_errors(output)
    result = compare(counts, baseline)
    lines = []
    for path, (old, new) in result.risen.items():
        lines.append(f"{path}: {new} type error(s), the baseline allows {old}:")
        lines.extend(f"  {line}" for line in errors_of(output, path))
    if result.risen:
        lines.append("fix the errors above (a new module starts at none); the baseline only goes down")
        return 1, lines
    if result.fallen:
        fewer = ", ".join(f"{p} {old} -> {new}" for p, (old, new) in result.fallen.items())
        lines.append(
            f"fewer type errors than recorded ({fewer}): record them with python -m tools.typecheck --update"
        )
        return 1, lines
    lines.append(f"type check: {sum(counts.values())} recorded error(s) in {len(counts)} file(s), none new")
    return 0, lines


def update(
    output: str, baseline: dict[str, int], path: Path, *, allow_more: bool = False
) -> tuple[int, list[str]]:
    """Record the lower counts; refuse when any file gained errors (unless `allow_more`)."""
    counts = count_errors(output)
    result = compare(counts, baseline)
    if result.risen and not allow_more:
        code, lines = check(output, baseline)
        return code, [*lines, f"{path} not updated"]
    atomic_write_json(path, counts)
    lowered = sum(old - new for old, new in result.fallen.values())
    return 0, [f"{path}: {sum(counts.values())} error(s) in {len(counts)} file(s) recorded ({lowered} fewer)"]


def main(argv: list[str] | None = None) -> int:
    doc = (package.__doc__ or "").strip()
    parser = argparse.ArgumentParser(
        prog="python -m tools.typecheck",
        description=doc.splitlines()[0],
        epilog=doc[doc.index("Exit codes") :],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--update", action="store_true", help="record lower counts (never higher ones)")
    parser.add_argument(
        "--record-all",
        action="store_true",
        help="record every count, higher ones too: only to start the ratchet, or for errors a reviewer accepted",
    )
    args = parser.parse_args(argv)
    try:
        baseline = read_baseline(BASELINE)
        with contextlib.chdir(ROOT):  # mypy names files relative to where it runs: the baseline's keys
            output = run_mypy(ROOT)
        if args.update or args.record_all:
            code, lines = update(output, baseline, BASELINE, allow_more=args.record_all)
        else:
            code, lines = check(output, baseline)
    except TRMError as exc:
        print(f"error: {exc}")
        return 2
    print("\n".join(lines))
    return code
