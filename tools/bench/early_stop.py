"""Early stopping replayed on evaluation series already measured: where would `early_stop.patience` have
ended those runs, would the checkpoint the run then keeps be the full set's best, and how many evaluations
(and the training between them) would it have saved?

    nox -s bench -- early_stop                       # the committed series, a Markdown table on stdout
    nox -s bench -- early_stop --out docs/figures    # also early-stop.json

Inputs: the subset-ranking figures (docs/figures/subset-ranking.json: Sudoku exact accuracy;
subset-ranking-arc.json: ARC pass@2), which hold every checkpoint's full-set score and, per fraction,
one seed's subset score. Two rankings are replayed, each with the trainer's own rule
(trm.training.early_stop.stop_index):

- `full`: every evaluation reads the whole test set; the run keeps the best full score up to its stop.
- `subset 0.1, top 3`: evaluations read a tenth of the test set (the ARC recipes' setting); at its stop
  the run re-scores its 3 best checkpoints by subset score on the full set and keeps the best
  (trm.training.checkpointing.best.select_best; ties go to the later step in both orders).

The curve JSONs (docs/curves/*.json) are checked for evaluation series too; they log training metrics
only, which the output says. No training runs here: seconds on a CPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tools.bench.subset_stats import best_index, best_of, top_k
from trm.io import atomic_write_json
from trm.training.early_stop import stop_index

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ROOT / "docs" / "figures"
CURVES = ROOT / "docs" / "curves"
# (file, full-score key, metric name in the output)
SOURCES = (("subset-ranking.json", "full_exact_accuracy", "exact accuracy (Sudoku)"),
           ("subset-ranking-arc.json", "full_pass@2", "pass@2 (ARC, synthetic)"))  # fmt: skip
PATIENCE = (1, 2, 3, 5)
FRACTION = "0.1"
TOP_K = 3


def kept(full: Sequence[float], ranked_by: Sequence[float] | None, last: int, k: int) -> int:
    """The checkpoint a run keeps when it ends after evaluation `last`: by full score, or (`ranked_by`: the
    subset scores) the best full score among the `k` best by subset score (subset_stats' choice)."""
    if ranked_by is None:
        return best_index(np.asarray(full[: last + 1]))
    return best_of(np.asarray(full), top_k(np.asarray(ranked_by[: last + 1]), k))


def replay(
    steps: Sequence[int],
    full: Sequence[float],
    ranked_by: Sequence[float] | None,
    patience: int,
    min_evaluations: int,
    top_k: int = TOP_K,
) -> dict[str, Any]:
    """One run replayed with one setting of the rule."""
    ranking = full if ranked_by is None else ranked_by
    stop = stop_index(ranking, patience, 0.0, min_evaluations)
    if stop == len(full) - 1:  # the last evaluation ends the run anyway (the trainer calls that the end)
        stop = None
    last = len(full) - 1 if stop is None else stop
    keep = kept(full, ranked_by, last, top_k)
    best = best_index(np.asarray(full))
    return {
        "patience": patience,
        "min_evaluations": min_evaluations,
        "stopped_after": None if stop is None else steps[stop],
        "evaluations_run": last + 1,
        "evaluations_saved": len(full) - 1 - last,
        "kept_step": steps[keep],
        "kept_full": full[keep],
        "full_best_step": steps[best],
        "full_best": full[best],
        "lost": round(full[best] - full[keep], 6),
    }


def analyse(figures: Path = FIGURES, curves: Path = CURVES) -> dict[str, Any]:
    """Every committed series, every patience, without and with min_evaluations = half the evaluations."""
    rows: list[dict[str, Any]] = []
    for name, key, metric in SOURCES:
        data = json.loads((figures / name).read_text(encoding="utf-8"))
        steps, full = data["steps"], data[key]
        rankings = {"full": None, f"subset {FRACTION}, top {TOP_K}": data["example_subset_scores"][FRACTION]}
        for ranking, ranked_by in rankings.items():
            for min_evaluations in (0, len(full) // 2):
                for patience in PATIENCE:
                    result = replay(steps, full, ranked_by, patience, min_evaluations)
                    rows.append({"source": name, "metric": metric, "ranking": ranking, **result})
    return {"command": "nox -s bench -- early_stop", "rows": rows, "curves": curve_series(curves)}


def curve_series(curves: Path) -> dict[str, list[str]]:
    """The evaluation series (`eval/`, `ARC/`, `subset/` metrics) each curve JSON holds."""
    found: dict[str, list[str]] = {}
    for path in sorted(curves.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        names = {k for runs in data.get("runs", {}).values() for run in runs for k in run}
        found[path.name] = sorted(n for n in names if n.startswith(("eval/", "ARC/", "subset/")))
    return found


def markdown(result: dict[str, Any]) -> str:
    head = ("| series | ranking | patience | min_evaluations | stops after step | evaluations saved | kept (full) "
            "| full-set best | lost |")  # fmt: skip
    lines = [head, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in result["rows"]:
        stop = "runs to the end" if r["stopped_after"] is None else str(r["stopped_after"])
        total = r["evaluations_run"] + r["evaluations_saved"]
        lines.append(
            f"| {r['metric']} | {r['ranking']} | {r['patience']} | {r['min_evaluations']} | {stop} | "
            f"{r['evaluations_saved']} of {total} | step {r['kept_step']}: {r['kept_full']:.3g} | "
            f"step {r['full_best_step']}: {r['full_best']:.3g} | {r['lost']:.3g} |"
        )
    empty = [name for name, series in result["curves"].items() if not series]
    if empty:
        lines += ["", f"No evaluation series in {', '.join(empty)} (training metrics only)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nox -s bench -- early_stop", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write early-stop.json into this folder")
    args = parser.parse_args(argv)
    result = analyse()
    print(markdown(result))
    if args.out is not None:
        atomic_write_json(args.out / "early-stop.json", result)
        print(f"wrote {args.out / 'early-stop.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
