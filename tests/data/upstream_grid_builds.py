"""Sudoku/Maze builds compared with upstream's builders: the configurations, how to run upstream's builder
on the generated CSVs with numpy's global RNG seeded, and the golden digests of upstream's output
(`golden/upstream_grid_builds.json`, written by
`TRM_UPSTREAM=/path/to/TinyRecursiveModels python -m tests.data.upstream_grid_builds`).

Digests are sha256 of each file's bytes, except upstream's augmented Sudoku train inputs/labels, which it
writes as int64 (its digit map promotes them): those are digested as the uint8 `.npy` we write for the same
values, and the golden records upstream's dtype.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np

from tests.data.grid_fixtures import maze_source, sudoku_source

GOLDEN = Path(__file__).resolve().parent / "golden" / "upstream_grid_builds.json"
SEED = 1234
CONFIGS: dict[str, tuple[str, dict]] = {
    "sudoku-sub7-aug5-diff10": ("sudoku", {"subsample_size": 7, "num_aug": 5, "min_difficulty": 10}),
    "sudoku-defaults": ("sudoku", {}),
    "maze-sub4-aug": ("maze", {"subsample_size": 4, "aug": True}),
    "maze-defaults": ("maze", {}),
}

# Upstream's builders read through `hf_hub_download`; the harness points it at the local CSVs and seeds
# numpy's global RNG, the one upstream draws from.
_HARNESS = textwrap.dedent(
    """
    import sys
    import numpy as np
    upstream, kind, source, output, seed, *options = sys.argv[1:]
    sys.path.insert(0, upstream + "/dataset")
    module = __import__(f"build_{kind}_dataset")
    module.hf_hub_download = lambda repo, filename, repo_type=None: f"{source}/{filename}"
    config = module.DataProcessConfig(output_dir=output, **dict(o.split("=") for o in options))
    np.random.seed(int(seed))
    for split in ("train", "test"):
        module.convert_subset(split, config)
    """
)


def sources(root: Path) -> dict[str, Path]:
    """The generated CSVs every comparison reads (deterministic)."""
    return {"sudoku": sudoku_source(root / "sudoku"), "maze": maze_source(root / "maze")}


def run_upstream(upstream: str, kind: str, source: Path, output: Path, options: dict) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        harness = Path(tmp) / "harness.py"
        harness.write_text(_HARNESS)
        subprocess.run(
            [sys.executable, str(harness), upstream, kind, str(source), str(output), str(SEED)]
            + [f"{k}={v}" for k, v in options.items()],
            check=True, capture_output=True,
        )  # fmt: skip


def digests(root: Path) -> dict[str, dict[str, str]]:
    """{relative path: {digest (`sha256:<hex>`)[, upstream_dtype]}} of every file but the manifest (see the module docstring)."""
    out = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.name != "manifest.json"):
        rel = path.relative_to(root).as_posix()
        entry = {}
        data = path.read_bytes()
        if path.suffix == ".npy":
            array = np.load(path)
            if array.dtype != np.uint8 and rel.split("/")[-1] in ("all__inputs.npy", "all__labels.npy"):
                entry["upstream_dtype"] = str(array.dtype)
                buffer = io.BytesIO()
                np.save(buffer, array.astype(np.uint8), allow_pickle=False)
                data = buffer.getvalue()
        entry["digest"] = f"sha256:{hashlib.sha256(data).hexdigest()}"
        out[rel] = entry
    return out


def main() -> int:
    upstream = os.environ.get("TRM_UPSTREAM")
    if not upstream:
        print("error: set TRM_UPSTREAM to a TinyRecursiveModels checkout", file=sys.stderr)
        return 2
    golden = {}
    with tempfile.TemporaryDirectory() as tmp:
        csvs = sources(Path(tmp) / "csv")
        for name, (kind, options) in CONFIGS.items():
            out = Path(tmp) / name
            run_upstream(upstream, kind, csvs[kind], out, options)
            golden[name] = digests(out)
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
