"""Build configurations compared with upstream's ARC builder, how to run either builder on them, and the golden
sha256 of upstream's output (`golden/upstream_arc_builds.json`, written by running upstream's builder:
`TRM_UPSTREAM=/path/to/TinyRecursiveModels python tests/data/upstream_builds.py`)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from trm.data.arc_source import DEFAULT_PREFIX, subset_paths
from trm.data.build_arc import build_arc_dataset

GOLDEN = Path(__file__).resolve().parent / "golden" / "upstream_arc_builds.json"


@dataclass(frozen=True)
class Config:
    """One build. `first`: only the first N tasks of each subset; upstream has no such flag, so it reads
    challenge files cut to those tasks, and ours reads the shipped files with --max-puzzles N (same output).
    `hidden`: {name: source subset} written without a solutions file (dummy test outputs)."""

    subsets: tuple[str, ...]
    test_set_name: str
    num_aug: int
    seed: int = 42
    test_set_name2: str = "your_test_set"
    first: int | None = None
    hidden: dict[str, str] = field(default_factory=dict)
    slow: bool = False  # both tests
    slow_golden: bool = False  # the golden test only (its upstream comparison runs by default)


CONFIGS = {
    "arc1concept-aug2": Config(("training", "evaluation", "concept"), "evaluation", 2, slow_golden=True),
    "arc2concept-aug2": Config(("training2", "evaluation2", "concept"), "evaluation2", 2),
    # Retry budget exhausted by one-colour tasks (fewer than 51 distinct variants), another seed.
    "arc1concept-first12-aug50-seed7": Config(
        ("training", "evaluation", "concept"), "evaluation", 50, 7, first=12
    ),
    # A hidden test subset without solutions (--test-set-name2), test pairs first in ARC-1's JSON.
    "hidden-first8-aug4-seed1": Config(
        ("training", "evaluation2", "hidden"),
        "evaluation2",
        4,
        1,
        "hidden",
        first=8,
        hidden={"hidden": "concept"},
    ),
    "arc1concept-aug8": Config(("training", "evaluation", "concept"), "evaluation", 8, slow=True),
    "arc2concept-aug8": Config(("training2", "evaluation2", "concept"), "evaluation2", 8, slow=True),
}


def write_inputs(config: Config, directory: Path) -> Path:
    """Input files for upstream (cut to `first` tasks, hidden subsets without solutions); returns the prefix."""
    if config.first is None and not config.hidden:
        return DEFAULT_PREFIX
    directory.mkdir(parents=True, exist_ok=True)
    prefix = directory / "arc-agi"
    for subset in config.subsets:
        source = config.hidden.get(subset, subset)
        src_challenges, src_solutions = subset_paths(DEFAULT_PREFIX, source)
        challenges = json.loads(src_challenges.read_text(encoding="utf-8"))
        keep = list(challenges)[: config.first] if config.first is not None else list(challenges)
        dst_challenges, dst_solutions = subset_paths(prefix, subset)
        dst_challenges.write_text(json.dumps({k: challenges[k] for k in keep}), encoding="utf-8")
        if subset not in config.hidden:
            solutions = json.loads(src_solutions.read_text(encoding="utf-8"))
            dst_solutions.write_text(json.dumps({k: solutions[k] for k in keep}), encoding="utf-8")
    return prefix


def build_ours(config: Config, out: Path, inputs: Path, form: str = "materialized") -> Path:
    """Our build of `config` into `out` (inputs: a scratch dir for hidden-subset files)."""
    # Hidden subsets need files without solutions; otherwise the shipped files, cut by --max-puzzles.
    prefix = write_inputs(config, inputs) if config.hidden else DEFAULT_PREFIX
    build_arc_dataset(
        out,
        input_file_prefix=prefix,
        subsets=config.subsets,
        test_set_name=config.test_set_name,
        test_set_name2=config.test_set_name2,
        seed=config.seed,
        num_aug=config.num_aug,
        max_puzzles=config.first if not config.hidden else None,
        form=form,
    )
    return out


def run_upstream(config: Config, out: Path, inputs: Path, upstream: Path) -> Path:
    """Upstream's `dataset/build_arc_dataset.py` on `config` (its own interpreter: this one)."""
    prefix = write_inputs(config, inputs)
    command = [sys.executable, "-m", "dataset.build_arc_dataset", "--input-file-prefix", str(prefix),
               "--output-dir", str(out), "--subsets", *config.subsets, "--test-set-name", config.test_set_name,
               "--test-set-name2", config.test_set_name2, "--seed", str(config.seed),
               "--num-aug", str(config.num_aug)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(upstream), "PYTHONHASHSEED": "0"}
    done = subprocess.run(command, cwd=upstream, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"upstream's builder failed ({done.returncode}): {done.stderr[-2000:]}\n"
            "it needs argdantic and pydantic: pip install -e '.[upstream]'"
        )
    return out


def file_hashes(root: Path) -> dict[str, str]:
    """{relative path: `sha256:<hex>` digest} of every file under root except our manifest.json."""
    return {
        p.relative_to(root).as_posix(): f"sha256:{hashlib.sha256(p.read_bytes()).hexdigest()}"
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }


def golden() -> dict[str, dict[str, str]]:
    """{config name: {file: sha256 of upstream's output}}."""
    return json.loads(GOLDEN.read_text(encoding="utf-8"))


def _write_golden(upstream: Path, scratch: Path) -> None:
    result = {}
    for name, config in CONFIGS.items():
        out = run_upstream(config, scratch / name / "out", scratch / name / "inputs", upstream)
        result[name] = file_hashes(out)
        print(name, len(result[name]), "files", file=sys.stderr)
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        _write_golden(Path(os.environ["TRM_UPSTREAM"]), Path(scratch))
