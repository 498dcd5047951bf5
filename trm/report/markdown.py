"""report.md: the runs table, the paper-vs-achieved table and the plots, as text that depends only on the
inputs (no clock, fixed number formats, runs in a fixed order)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trm.report.collect import RunRecord
from trm.report.paper import PUBLISHED, Published, published_recipe
from trm.report.plots import MAX_SCALING_KEYS
from trm.report.stats import wilson_interval
from trm.training.config import count_metric


def cell(value: Any) -> str:
    """A table cell: `|` escaped, newlines folded, None as an em dash."""
    if value is None:
        return "—"
    return str(value).replace("|", "\\|").replace("\n", " ")


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def percent(value: float) -> str:
    return f"{100 * value:.2f} %"


def interval(low: float, high: float) -> str:
    return f"[{100 * low:.1f}, {100 * high:.1f}]"


def params(n: int | None) -> str | None:
    if n is None:
        return None
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.1f}k"


def duration(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


def swept_text(swept: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(swept.items())) or "—"


def _at(point: tuple[int | None, float] | None) -> str | None:
    if point is None:
        return None
    step, value = point
    return percent(value) + (f" @ {step}" if step is not None else "")


def runs_table(records: Sequence[RunRecord]) -> str:
    rows = []
    for r in records:
        metric = r.headline
        rate = r.steps_per_second
        rows.append(
            [
                r.name,
                r.suite,
                swept_text(r.swept),
                r.status,
                r.exit_code,
                r.last_step,
                params(r.num_params),
                metric,
                _at(r.final(metric)) if metric else None,
                _at(r.best(metric)) if metric else None,
                None if rate is None else f"{rate:.3g}",
                duration(r.wall_seconds),
            ]
        )
    header = ["run", "suite", "swept", "status", "exit", "last step", "params", "metric", "final",
              "best", "steps/s", "wall time"]  # fmt: skip
    return table(header, rows)


def evaluated_count(r: RunRecord, metric: str, step: int | None) -> float | None:
    """The number of items `metric` was computed over at `step` (the logged count at that step)."""
    if step is not None and step == r.best_step and r.best_count is not None and metric in r.best_metrics:
        return r.best_count  # the run's own full evaluation of its chosen checkpoint
    name = count_metric(metric)
    if name is None:
        return None
    at_step = [v for s, v in r.series.get(name, []) if s == step]
    if at_step:
        return at_step[-1]
    return r.final_metrics.get(name) if step is None or not r.series.get(name) else None


def achieved(r: RunRecord, metric: str, point: tuple[int | None, float] | None) -> str | None:
    """`12.50 % [8.1, 18.8] of 120` (the 95 % Wilson interval over the evaluated count), or why not."""
    if point is None:
        return None
    step, value = point
    n = evaluated_count(r, metric, step)
    where = f" @ {step}" if step is not None else ""
    if not n:
        return f"{percent(value)}{where} (no count logged: no interval)"
    low, high = wilson_interval(value * n, n)
    return f"{percent(value)} {interval(low, high)} of {n:g}{where}"


def paper_cell(p: Published) -> str:
    low, high = wilson_interval(p.percent / 100 * p.test_count, p.test_count)
    return f"{p.percent:.1f} % {interval(low, high)} of {p.test_count:,} {p.unit}"


def paper_table(records: Sequence[RunRecord]) -> str:
    """One row per run that trained a published recipe unchanged; the paper's numbers if there is none."""
    rows = []
    for r in records:
        p = published_recipe(r.config)
        if p is None:
            continue
        metric = r.headline
        rows.append(
            [p.recipe, p.benchmark, f"{p.model} {p.metric}", paper_cell(p), r.name, metric,
             achieved(r, metric, r.final(metric)) if metric else "no eval logged",
             achieved(r, metric, r.best(metric)) if metric else None]
        )  # fmt: skip
    header = ["recipe", "benchmark", "paper model", "paper (95 % CI)", "run", "metric", "final (95 % CI)",
              "best (95 % CI)"]  # fmt: skip
    if rows:
        return table(header, rows)
    published = [[p.recipe, p.benchmark, f"{p.model} {p.metric}", paper_cell(p)] for p in PUBLISHED]
    return (
        "No run trained a recipe with published numbers unchanged (runs that change a recipe are compared "
        "in the runs table and the scaling plots). The paper's numbers:\n\n"
        + table(["recipe", "benchmark", "paper model", "paper (95 % CI)"], published)
    )


METHOD = f"""\
- *final* is the metric's last logged value, *best* its highest (the later step on a tie, as `python -m trm best`). Choosing the
  best of several evaluations favours it: its interval is optimistic.
- A run whose in-run evaluations read a subset (`eval_subset.fraction` < 1) logs them as `subset/...`,
  plotted in panels of their own; its *best* is the run's own choice (run.json `best`, as `python -m trm
  best`): the full evaluation of its `best.top_k` checkpoints by subset score. Its *final* is its last full
  evaluation (`eval_subset.full_every`), if any.
- Intervals are 95 % Wilson score intervals over the evaluated count logged beside the metric
  (`ARC/count` test tasks for `ARC/pass@2`, `eval/<set>/count` examples for exact accuracy); pass@2
  gives partial credit to tasks with several test inputs, so the interval is that of the proportion.
  The paper's intervals use its test-set sizes.
- A suite gets a scaling plot per swept key when its runs differ in at most {MAX_SCALING_KEYS} keys
  (for run directories: the config keys that differ between them).
- *steps/s* is the median over consecutive training logs of steps per second of wall time, less the
  evaluations in between; *wall time* comes from the batch runner, else the launcher's sessions, else
  the span of metrics.jsonl.
- A run trained a published recipe when its config equals the recipe's apart from naming, logging,
  seed and numerics-only architecture keys, and its data_paths name the recipe's dataset directory
  (e.g. `arc1concept-aug-1000`, as `python -m trm data` and the launcher name it).
"""


def render(
    records: Sequence[RunRecord], plots: Sequence[tuple[str, str]], source: str, batch: dict[str, Any]
) -> str:
    """The whole report.md; `plots` are (title, file name) in display order."""
    statuses: dict[str, int] = {}
    for r in records:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
    runs = f"{len(records)} run" + ("" if len(records) == 1 else "s")
    lines = ["# Training report", "", f"{runs} ({summary}) from {source}."]
    if batch:
        lines.append("Batch: " + ", ".join(f"{k} {cell(v)}" for k, v in sorted(batch.items())) + ".")
    lines += ["", "## Runs", "", runs_table(records), "## Paper vs achieved", "", paper_table(records)]
    lines += ["## Plots", ""]
    lines += [f"### {title}\n\n![{title}]({name})\n" for title, name in plots] or ["No metrics to plot.\n"]
    notes = [f"- {r.name}: {'; '.join(r.notes)}" for r in records if r.notes]
    if notes:
        lines += ["## Notes", "", *notes, ""]
    lines += ["## Method", "", METHOD]
    return "\n".join(lines)
