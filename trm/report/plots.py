"""The report's figures: one small function per figure, each returning a matplotlib Figure (or None).

Figures are built with `matplotlib.figure.Figure` (the Agg canvas, no pyplot and no global state), one
colour per run in every figure, and saved as PNG without the metadata that would change between runs.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from trm.report.collect import TRAIN_LOSS, RunRecord, headline_metric

# Eval metrics worth a panel (the larger pass@K and the q-halt internals stay in metrics.jsonl); a subset
# evaluation's (`subset/...`, eval_subset.fraction < 1) get panels of their own, never mixed with the full ones.
_EVAL_PANEL = re.compile(r"^(subset/)?(ARC/pass@[12]|eval/[^/]+/(exact_accuracy|accuracy|lm_loss))$")
# Swept keys that change the model's size: their scaling plots put the parameter count on the x axis.
SIZE_KEYS = frozenset({"hidden_size", "L_layers", "H_layers", "expansion", "num_heads", "puzzle_emb_ndim"})
DPI = 100
# Runs that differ in more keys than this are not a sweep (e.g. an ARC and a Sudoku run): no scaling plots.
MAX_SCALING_KEYS = 3


def colours(records: Sequence[RunRecord]) -> dict[str, Any]:
    """A fixed colour per run name (the order of `records`)."""
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(records) <= 10 else "tab20"]
    return {r.name: cmap(i % cmap.N) for i, r in enumerate(records)}


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG, without the Software/date metadata: the same figure gives the same bytes."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def _finish(ax: Any, xlabel: str, ylabel: str, has_lines: bool) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    if has_lines:
        ax.legend(fontsize=7)


def loss_figure(records: Sequence[RunRecord]) -> Figure | None:
    """Training loss vs step, one line per run that logged it."""
    runs = [r for r in records if r.series.get(TRAIN_LOSS)]
    if not runs:
        return None
    fig = Figure(figsize=(9, 5))
    ax = fig.add_subplot()
    colour = colours(records)
    for r in runs:
        steps, values = zip(*r.series[TRAIN_LOSS], strict=True)
        ax.plot(steps, values, label=r.name, color=colour[r.name])
    if all(v > 0 for r in runs for _, v in r.series[TRAIN_LOSS]):
        ax.set_yscale("log")
    ax.set_title("training loss (train/lm_loss)")
    _finish(ax, "step", "loss", True)
    fig.tight_layout()
    return fig


def eval_metric_names(records: Sequence[RunRecord]) -> list[str]:
    """The eval metrics that get a panel, sorted."""
    return sorted({n for r in records for n in r.series if _EVAL_PANEL.match(n)})


def eval_figure(records: Sequence[RunRecord]) -> Figure | None:
    """One panel per eval metric (pass@1/2, exact accuracy, accuracy, loss), one line per run."""
    names = eval_metric_names(records)
    if not names:
        return None
    cols = min(2, len(names))
    rows = (len(names) + cols - 1) // cols
    fig = Figure(figsize=(6 * cols, 3.8 * rows))
    colour = colours(records)
    for i, name in enumerate(names):
        ax = fig.add_subplot(rows, cols, i + 1)
        for r in records:
            if r.series.get(name):
                steps, values = zip(*r.series[name], strict=True)
                ax.plot(steps, values, label=r.name, color=colour[r.name], marker=".")
        ax.set_title(name)
        _finish(ax, "step", name.rsplit("/", 1)[-1], True)
    fig.tight_layout()
    return fig


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def value_of(point: tuple[int | None, float] | None) -> float:
    """The value of a (step, value) point; NaN (no marker) where the run has none."""
    return float("nan") if point is None else point[1]


def scaling_keys(records: Sequence[RunRecord]) -> list[str]:
    """The swept keys of a suite's runs that take at least two values, sorted."""
    keys = sorted({k for r in records for k in r.swept})
    return [k for k in keys if len({repr(r.swept.get(k)) for r in records}) > 1]


def scaling_figure(records: Sequence[RunRecord], key: str, suite: str) -> Figure | None:
    """Final and best headline metric vs the swept `key` (vs parameters for a size key), one pair of lines
    per combination of the suite's other swept values; runs without the metric are left out."""
    metric = headline_metric(n for r in records for n in (*r.series, *r.final_metrics, *r.best_metrics))
    if metric is None:
        return None
    by_size = key.rsplit(".", 1)[-1] in SIZE_KEYS and all(r.num_params for r in records if r.final(metric))
    values = sorted({repr(r.swept.get(key)) for r in records})
    numeric = all(_is_number(r.swept.get(key)) for r in records)
    groups: dict[str, list[RunRecord]] = {}
    for r in records:
        if r.final(metric) is not None and key in r.swept:
            others = ", ".join(f"{k}={r.swept[k]}" for k in sorted(r.swept) if k != key)
            groups.setdefault(others, []).append(r)
    if not groups:
        return None
    fig = Figure(figsize=(8, 5))
    ax = fig.add_subplot()

    def x_of(r: RunRecord) -> float:
        if by_size:
            return float(r.num_params or 0)
        return float(r.swept[key]) if numeric else float(values.index(repr(r.swept.get(key))))

    for others, runs in sorted(groups.items()):
        runs = sorted(runs, key=x_of)
        xs = [x_of(r) for r in runs]
        finals = [value_of(r.final(metric)) for r in runs]
        suffix = f" ({others})" if others else ""
        ax.plot(xs, finals, marker="o", label=f"final{suffix}")
        ax.plot(
            xs, [value_of(r.best(metric)) for r in runs], marker="x", linestyle="--", label=f"best{suffix}"
        )
        if by_size:
            for x, y, r in zip(xs, finals, runs, strict=True):
                ax.annotate(f"{key.rsplit('.', 1)[-1]}={r.swept[key]}", (x, y), fontsize=7)
    if by_size:
        ax.set_xscale("log")
    elif not numeric:
        ax.set_xticks(range(len(values)), [v.strip("'") for v in values])
    elif all(isinstance(r.swept.get(key), int) for r in records):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(f"{suite}: {metric} vs {key}")
    _finish(ax, "parameters" if by_size else key, metric, True)
    fig.tight_layout()
    return fig


def timing_figure(records: Sequence[RunRecord]) -> Figure | None:
    """Bars of training steps/s and wall time per run (runs without a measure get no bar)."""
    rates = [(r.name, r.steps_per_second) for r in records if r.steps_per_second]
    walls = [(r.name, r.wall_seconds) for r in records if r.wall_seconds is not None]
    if not rates and not walls:
        return None
    longest = max((w for _, w in walls), default=0.0)
    unit, scale = (
        ("hours", 3600) if longest >= 7200 else ("minutes", 60) if longest >= 120 else ("seconds", 1)
    )
    walls = [(n, w / scale) for n, w in walls]
    fig = Figure(figsize=(max(8, 0.6 * len(records) + 4), 4.5))
    colour = colours(records)
    for i, (pairs, label) in enumerate(((rates, "training steps/s"), (walls, f"wall time ({unit})"))):
        ax = fig.add_subplot(1, 2, i + 1)
        ax.bar([n for n, _ in pairs], [v for _, v in pairs], color=[colour[n] for n, _ in pairs])
        ax.set_title(label)
        ax.tick_params(axis="x", labelrotation=60, labelsize=7)
        ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return fig
