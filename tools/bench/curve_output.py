"""The curve harness's outputs: the JSON and its plot (both sides' means with interval bands, one panel per
metric, a row per axis), and the verdicts printed (tools.bench.curves writes them through here)."""

from __future__ import annotations

from pathlib import Path

from tools.bench import curve_stats, curve_subset
from tools.bench.curve_stats import LEVEL
from trm.io import atomic_write_bytes, atomic_write_json


def plot(
    rows: list[list[curve_stats.MetricComparison]],
    labels: tuple[str, str],
    title: str,
    best: dict | None = None,
) -> bytes:
    """Both sides' means with their interval bands, one panel per metric, one row per axis (equal steps,
    then equal compute when compared), and with `best` (the --subset-eval result's entry) a last panel of
    the checkpoints' full scores and both choices; PNG bytes."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    width = len(rows[0]) + (best is not None)
    fig, grid = plt.subplots(len(rows), width, figsize=(4.2 * width, 3.4 * len(rows)), squeeze=False)
    for axes, comparisons in zip(grid, rows, strict=True):
        _plot_row(axes[: len(comparisons)], comparisons, labels)
    if best is not None:
        curve_subset.plot_choices(grid[0][-1], best)
        for axes in grid[1:]:
            axes[-1].axis("off")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def _plot_row(axes, comparisons: list[curve_stats.MetricComparison], labels: tuple[str, str]) -> None:
    for ax, comp in zip(axes, comparisons, strict=True):
        for side, label, color in ((comp.a, labels[0], "tab:blue"), (comp.b, labels[1], "tab:orange")):
            mean = [i.mean for i in side]
            ax.plot(comp.steps, mean, color=color, label=label)
            ax.fill_between(
                comp.steps, [i.low for i in side], [i.high for i in side], color=color, alpha=0.25
            )
        if comp.parted_at is not None:
            ax.axvline(comp.parted_at, color="red", linestyle=":", label=comp.verdict)
        ax.set_title(f"{comp.metric}\n{comp.verdict}", fontsize=9)
        ax.set_xlabel("optimizer step" if comp.axis == curve_stats.STEPS else "cumulative training FLOPs")
    axes[0].legend(fontsize=8)


def write_outputs(stem: Path, result: dict, rows: list[list[curve_stats.MetricComparison]]) -> None:
    """<stem>.json and <stem>.png (atomically); without matplotlib the JSON alone, saying how to draw the PNG.
    `rows`: the equal-step comparisons, then the equal-compute ones when there are (a second plot row)."""
    labels = result["labels"]
    title = (
        f"{result['setup']}: {labels[0]} vs {labels[1]}{'' if result.get('device', 'cpu') == 'cpu' else ' on ' + result['device']}, "
        f"{result['seeds']} seeds, {result.get('level', LEVEL):.0%} intervals (measured); {'; '.join(verdicts(result))}"
    )
    try:
        png: bytes | None = plot(rows, (labels[0], labels[1]), title, result.get("best"))
        result["plot"] = f"{stem.name}.png"
    except ImportError as exc:  # a GPU host with the kit: no matplotlib there
        png = None
        result["plot"] = f"not drawn ({exc}): python -m tools.bench.curves --replot {stem.name}.json"
    atomic_write_json(stem.parent / f"{stem.name}.json", result)
    if png is not None:
        atomic_write_bytes(stem.parent / f"{stem.name}.png", png)


def verdicts(result: dict) -> list[str]:
    """The overall verdict at equal steps, and at equal compute when compared."""
    return [result["verdict"]] + ([result["equal_compute"]["verdict"]] if "equal_compute" in result else [])


def report(stem: Path, result: dict, rows: list[list[curve_stats.MetricComparison]]) -> None:
    """The verdicts on stdout."""
    labels = result["labels"]
    for comparisons, verdict in zip(rows, verdicts(result), strict=True):
        for c in comparisons:
            fd = c.final_difference
            print(
                f"  {c.metric:24s} {c.verdict:36s} final {labels[0]} - {labels[1]}: {fd.mean:+.4f} ± {fd.half:.4f}"
            )
        print(f"verdict: {verdict}")
    print(
        f"wrote {stem}.json"
        + (f" and {stem}.png" if result["plot"].endswith(".png") else f"; png {result['plot']}")
    )
