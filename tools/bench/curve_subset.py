"""The curve harness's checks of the subset evaluation beyond the curves (tools.bench.curves --subset-eval):
the weights of both sides' checkpoints, and the best checkpoint each side chooses.

Side A evaluates the whole test set at every in-run evaluation and its best checkpoint is the one with
the highest full score (ties: the later step, as `python -m trm best`). Side B, the same seed, evaluates a
subset in-run and chooses at its end among its top-k checkpoints by subset score, re-evaluated on the full
set (trm.training.checkpointing.best.select_best, recorded in best.json). Both sides train identically, so their
checkpoints at a step hold the same weights and side A's in-run evaluation gives the full score of any
step side B may choose.

Per seed the verdict is one of:

- SAME: B chose A's best checkpoint;
- WITHIN: B chose another checkpoint whose full score lies in the 95 % Wilson interval of A's best
  score (n: the test rows, or ARC's tasks, that score averages over);
- OUTSIDE: its full score lies below that interval.

The weights check compares the model and EMA of both sides' checkpoints at every step both saved: an
evaluation that touched training's state (its RNG, weights, optimizer or carries) would part them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trm.errors import TRMError

SAME = "same checkpoint"
WITHIN = "within the full best's Wilson interval"
OUTSIDE = "outside the full best's Wilson interval"


@dataclass(frozen=True)
class FullBest:
    """Side A's best checkpoint: its step, full score, the rows that score averages over and its interval."""

    step: int
    value: float
    n: float
    wilson: tuple[float, float]


def full_best(scores: dict[int, float], n: float) -> FullBest:
    """The best of full scores by step (ties: the later step) with its 95 % Wilson interval over `n` items."""
    from trm.evaluation.subset import wilson_interval

    if not scores:
        raise TRMError("the full-evaluation run has no evaluation checkpoint to compare with")
    step = max(scores, key=lambda s: (scores[s], s))
    value = scores[step]
    return FullBest(step, value, n, wilson_interval(value * n, n))


def verdict(best: FullBest, chosen_step: int, chosen_value: float) -> str:
    """SAME, WITHIN or OUTSIDE (see the module docstring)."""
    if chosen_step == best.step:
        return SAME
    return WITHIN if chosen_value >= best.wilson[0] else OUTSIDE


def compare_seed(full: dict[int, float], n: float, chosen: dict[str, Any]) -> dict[str, Any]:
    """One seed: side A's full scores by step (`full`, over `n` items) against side B's best.json
    (`chosen`: its step, the full score it found there, the metric and the candidates it re-scored).

    The chosen checkpoint's full score is read from side A's evaluation at that step when there is one
    (the same weights); the score side B found for it is recorded beside it, and `scores_agree` says
    whether the two are equal."""
    best = full_best(full, n)
    step, found = int(chosen["step"]), float(chosen["value"])
    value = full.get(step, found)
    return {
        "full_best_step": best.step,
        "full_best_value": best.value,
        "full_best_wilson_95": list(best.wilson),
        "n": n,
        "chosen_step": step,
        "chosen_full_value": value,
        "chosen_full_value_by_subset_run": found,
        "scores_agree": step not in full or full[step] == found,
        "candidates": [c.get("step") for c in chosen.get("candidates", [])],
        "full_scores": {str(k): v for k, v in sorted(full.items())},
        "verdict": verdict(best, step, value),
    }


def overall(seeds: list[dict[str, Any]]) -> str:
    """One line over all seeds: how many chose the same checkpoint, how many stayed in the interval."""
    same = sum(s["verdict"] == SAME for s in seeds)
    within = sum(s["verdict"] == WITHIN for s in seeds)
    out = len(seeds) - same - within
    text = f"same best checkpoint on {same} of {len(seeds)} seeds"
    if within:
        text += f", within the Wilson interval on {within}"
    if out:
        text += f", OUTSIDE it on {out}"
    return text


def read_full_run(run_dir: Path, metric: str) -> tuple[dict[int, float], float]:
    """Side A's full scores of `metric` by evaluation checkpoint, and the items they average over."""
    from trm.evaluation.subset import denominator
    from trm.training.checkpointing.layout import find_complete, metric_value

    scores: dict[int, float] = {}
    counts: set[float] = set()
    for info in find_complete(run_dir):
        value = metric_value(info, metric)
        if value is None:
            continue
        scores[info.step] = value
        n = denominator(info.manifest.get("eval_metrics") or {}, metric)
        if n is not None:
            counts.add(float(n))
    if len(counts) != 1:
        raise TRMError(
            f"{run_dir}: the evaluation checkpoints give {sorted(counts) or 'no'} item counts for {metric!r}; "
            "one full test set was expected"
        )
    return scores, counts.pop()


def read_choice(run_dir: Path) -> dict[str, Any]:
    """Side B's choice as its end of run recorded it (best.json)."""
    import json

    from trm.training.checkpointing.best import BEST_FILE

    path = run_dir / BEST_FILE
    try:
        chosen = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as why:
        raise TRMError(f"{path}: the subset run recorded no best checkpoint ({why})") from None
    if chosen.get("evaluation") != "full":
        raise TRMError(
            f"{path}: the choice was made on the {chosen.get('evaluation')} evaluation, not the full one"
        )
    return chosen


def compare_runs(full_dirs: list[Path], subset_dirs: list[Path]) -> dict[str, Any]:
    """The JSON entry `best`: per seed `compare_seed`, and the overall line."""
    seeds = []
    for full_dir, subset_dir in zip(full_dirs, subset_dirs, strict=True):
        chosen = read_choice(subset_dir)
        scores, n = read_full_run(full_dir, str(chosen["metric"]))
        seeds.append({"metric": chosen["metric"], **compare_seed(scores, n, chosen)})
    return {"per_seed": seeds, "verdict": overall(seeds)}


def weights_identity(full_dir: Path, subset_dir: Path) -> dict[str, Any]:
    """Both sides' checkpoints at the steps both saved: the steps compared and the first whose model or EMA
    tensors differ (None: equal bit for bit at all of them)."""
    import torch

    from trm.training.checkpointing.layout import find_complete
    from trm.training.checkpointing.state import read_main_state

    a = {i.step: i.path for i in find_complete(full_dir)}
    b = {i.step: i.path for i in find_complete(subset_dir)}
    steps = sorted(set(a) & set(b))
    if not steps:
        raise TRMError(f"{full_dir} and {subset_dir} hold no checkpoint at the same step")
    for step in steps:
        sa, sb = read_main_state(a[step]), read_main_state(b[step])
        tensors = [(sa["model"], sb["model"])]
        if sa.get("ema") is not None or sb.get("ema") is not None:
            tensors.append(((sa.get("ema") or {}).get("shadow", {}), (sb.get("ema") or {}).get("shadow", {})))
        for x, y in tensors:
            if x.keys() != y.keys() or not all(torch.equal(x[k], y[k]) for k in x):
                return {"steps": steps, "first_difference": step}
    return {"steps": steps, "first_difference": None}


def plot_choices(ax: Any, best: dict[str, Any]) -> None:
    """One panel: each seed's full score at every evaluation checkpoint of the full run, its best (circle)
    and the subset run's choice (cross)."""
    for seed, row in enumerate(best["per_seed"]):
        steps = [int(s) for s in row["full_scores"]]
        line = ax.plot(steps, list(row["full_scores"].values()), marker=".", label=f"seed {seed}")[0]
        ax.plot(row["full_best_step"], row["full_best_value"], "o", mfc="none", ms=10, color=line.get_color())
        ax.plot(row["chosen_step"], row["chosen_full_value"], "x", ms=8, color=line.get_color())
    ax.set_title(
        f"{best['per_seed'][0]['metric']} (full test set)\no: full run's best, x: subset run's choice",
        fontsize=9,
    )
    ax.set_xlabel("optimizer step")
    ax.legend(fontsize=7)
