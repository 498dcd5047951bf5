"""The evaluation pass (upstream: pretrain.py's evaluate): run every test batch to halting, reduce metrics, call evaluators.

Runs under `torch.no_grad()` (not inference mode) and hands evaluators CPU copies, so nothing later
updates an inference tensor in place — the class of crash that killed upstream runs at their first
evaluation. Test batches are processed in chunks of the micro-batch size to bound memory, without the
blank rows that pad the last one (no labels and the blank identifier; Sudoku and Maze examples carry the
blank identifier too, but always labels).

A compiled loss head (`torch.compile`, see `is_compiled`) is given chunks of exactly `chunk_size` rows: a
shorter last chunk is padded with copies of its first row that a row mask leaves out of every metric, of
the halting test and of the outputs, so evaluation uses one static graph and never recompiles for a batch
size. The eager loss head gets the chunks as they are.

When no slot can halt early in evaluation (the default: every slot runs `halt_max_steps`, see
`fixed_act_steps`), a chunk runs exactly that many ACT steps without reading the halting flag, so the host
never waits for the device between steps; with early halting (arch.eval_early_halt, arch.act_inference)
it reads the flag after every step.

A long evaluation (ARC-AGI-2's is ~170k rows) can be stopped between batches: `should_stop` is asked
before each batch (every rank asks it as often, so it may all-reduce), and when it says so the evaluators
drop this round's partial votes and `EvaluationStopped` is raised: nothing is written, nothing pooled.
"""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from trm.distributed import DistInfo, all_reduce_sum_
from trm.io import atomic_write_bytes
from trm.model.losses import IGNORE_LABEL_ID

# What ACTLossHead reports (sums over the batch); q_continue_loss only with no_ACT_continue=False.
LOSS_HEAD_METRICS = (
    "count", "accuracy", "exact_accuracy", "q_halt_accuracy", "steps", "lm_loss", "q_halt_loss", "q_continue_loss",
)  # fmt: skip
OPTIONAL_METRICS = frozenset({"q_continue_loss"})


class EvaluationStopped(Exception):
    """`should_stop` asked for a stop before the evaluation finished; its partial results were dropped."""

    def __init__(self, step: int, batches_done: int) -> None:
        super().__init__(f"evaluation at step {step} stopped after {batches_done} batch(es)")
        self.step = step
        self.batches_done = batches_done


def evaluate(
    loss_head: torch.nn.Module,
    test_loader: Any,
    evaluators: list[Any],
    info: DistInfo,
    *,
    chunk_size: int,
    save_dir: Path | None,
    step: int,
    save_outputs: tuple[str, ...] = (),
    show_progress: bool = True,
    should_stop: Callable[[], bool] | None = None,
) -> dict[str, float]:
    """Evaluate; returns `eval/<set>/<metric>` and evaluator metrics on rank 0 ({} elsewhere).

    Raises `EvaluationStopped` (after `abort_eval()` on every evaluator) when `should_stop()` is true
    before a batch; it must give the same answer on every rank.
    """
    was_training = loss_head.training
    blank_id = int(test_loader.metadata.blank_identifier_id)
    loss_head.eval()
    for ev in evaluators:
        ev.begin_eval()
    pad_to = chunk_size if is_compiled(loss_head) else None
    act_steps = fixed_act_steps(loss_head)
    wanted = tuple(dict.fromkeys([*save_outputs, *(k for ev in evaluators for k in ev.required_outputs)]))
    sums: dict[str, dict[str, torch.Tensor]] = defaultdict(dict)
    saved: dict[str, list[torch.Tensor]] = defaultdict(list)
    bar = tqdm(
        desc=f"eval step {step}", unit="batch", disable=not (show_progress and info.is_main), leave=False
    )
    try:
        with torch.no_grad():
            # The batch index is the same on every rank for the same global batch: the evaluators order
            # votes by it (then rank, then row), which makes tie-breaking independent of the world size.
            for batch_index, (set_name, batch, _n) in enumerate(test_loader.iter_test()):
                if should_stop is not None and should_stop():
                    for ev in evaluators:
                        ev.abort_eval()
                    raise EvaluationStopped(step, batch_index)
                rows = _real_rows(batch["puzzle_identifiers"], batch["labels"], blank_id)
                batch = {k: v[:rows].to(info.device, non_blocking=True) for k, v in batch.items()}
                for start in range(0, rows, chunk_size):
                    chunk = {k: v[start : start + chunk_size] for k, v in batch.items()}
                    metrics, outputs = _run_to_halt(loss_head, chunk, wanted, pad_to, act_steps)
                    for name, value in metrics.items():
                        acc = sums[set_name]
                        acc[name] = acc.get(name, 0) + value.detach().double()
                    merged = {**chunk, **outputs}
                    for ev in evaluators:
                        ev.update_batch(merged, batch_index=batch_index)
                    for key in save_outputs:
                        if key in merged:
                            saved[key].append(merged[key].detach().to("cpu", copy=True))
                bar.update()
    finally:
        bar.close()
        loss_head.train(was_training)
    result = _reduce_set_metrics(sums, test_loader, info)
    if save_dir is not None and save_outputs and saved:
        save_predictions(save_dir / f"step_{step}_all_preds.{info.rank}", saved)
    for ev in evaluators:
        ev_dir = save_dir / f"evaluator_ARC_step_{step}" if save_dir is not None else None
        metrics = ev.result(ev_dir, info)
        if metrics:
            result.update(metrics)
    return result if info.is_main else {}


def save_predictions(path: Path, saved: dict[str, list[torch.Tensor]]) -> None:
    """The saved outputs of one evaluation (eval_save_outputs), concatenated, written atomically: a full disk
    or a kill mid-save leaves the earlier file of this name, never a torn one."""
    buffer = io.BytesIO()
    torch.save({k: torch.cat(v) for k, v in saved.items()}, buffer)
    atomic_write_bytes(path, buffer.getvalue())


def _real_rows(identifiers: torch.Tensor, labels: torch.Tensor, blank_id: int) -> int:
    """Rows up to the last real one: the loader pads the last chunk with blank rows (blank identifier, every
    label ignored), which are dropped by the evaluators, so they are not computed (their q_halt loss would
    otherwise depend on the padding, i.e. on the world size). Datasets whose puzzles all use the blank
    identifier (Sudoku, Maze) are told apart from padding by their labels."""
    real = torch.nonzero((identifiers != blank_id) | (labels != IGNORE_LABEL_ID).any(dim=-1))
    return int(real.max()) + 1 if real.numel() else 0


def is_compiled(module: torch.nn.Module) -> bool:
    """Whether `module` is a torch.compile wrapper (which keeps the wrapped module as `_orig_mod`)."""
    return isinstance(getattr(module, "_orig_mod", None), torch.nn.Module)


def pad_rows(batch: dict[str, torch.Tensor], size: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """`batch` grown to `size` rows with copies of its first row, and the mask of its own rows (bool [size])."""
    rows = next(iter(batch.values())).shape[0]
    padded = {k: torch.cat((v, v[:1].expand(size - rows, *v.shape[1:]))) for k, v in batch.items()}
    mask = torch.arange(size, device=next(iter(batch.values())).device) < rows
    return padded, mask


def fixed_act_steps(loss_head: torch.nn.Module) -> int | None:
    """How many ACT steps every slot of a fresh carry takes in evaluation, when that is fixed (the loss
    head's `eval_act_steps`, through a torch.compile wrapper); None when slots may halt early, or the head
    does not say."""
    module = getattr(loss_head, "_orig_mod", loss_head)
    steps = getattr(module, "eval_act_steps", None)
    return steps() if callable(steps) else None


def _run_to_halt(
    loss_head: torch.nn.Module,
    batch: dict[str, torch.Tensor],
    wanted: tuple[str, ...],
    pad_to: int | None,
    act_steps: int | None = None,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Fresh carry, step until every slot halted; metrics and outputs of the last step. With `act_steps`
    every slot halts at that step: exactly that many steps run, and the halting flag is never read (no
    host sync). With `pad_to` (a compiled loss head) every call gets `pad_to` rows and a row mask, full
    chunks included (one graph)."""
    rows = next(iter(batch.values())).shape[0]
    extra: dict[str, torch.Tensor] = {}
    if pad_to is not None:
        batch, extra["row_mask"] = pad_rows(batch, pad_to)
    carry = loss_head.initial_carry(batch)
    taken = 0
    while True:
        carry, _loss, metrics, outputs, all_halted = loss_head(carry, batch, return_keys=wanted, **extra)
        taken += 1
        # bool(all_halted) makes the host wait for the device: only when slots may halt early
        done = taken == act_steps if act_steps is not None else bool(all_halted)
        if done:
            return metrics, {k: v[:rows] for k, v in outputs.items()}


def _reduce_set_metrics(
    sums: dict[str, dict[str, torch.Tensor]], test_loader: Any, info: DistInfo
) -> dict[str, float]:
    """Sum per-set metrics over ranks; divide each by the set's count."""
    set_names = list(getattr(test_loader.metadata, "sets", None) or sorted(sums))
    for name in sorted(sums):
        if name not in set_names:
            set_names.append(name)
    # A fixed list, not the names seen here: a rank whose rows were all padding saw none, and every rank
    # must join the same all-reduce.
    metric_names = sorted(set(LOSS_HEAD_METRICS) | {m for s in sums.values() for m in s})
    table = torch.zeros(len(set_names), len(metric_names), dtype=torch.float64, device=info.device)
    for i, set_name in enumerate(set_names):
        for j, metric in enumerate(metric_names):
            if metric in sums.get(set_name, {}):
                table[i, j] = sums[set_name][metric].to(info.device)
    all_reduce_sum_([table], info)
    out: dict[str, float] = {}
    count_col = metric_names.index("count") if "count" in metric_names else None
    for i, set_name in enumerate(set_names):
        count = float(table[i, count_col]) if count_col is not None else 1.0
        if count == 0:
            continue
        for j, metric in enumerate(metric_names):
            value = float(table[i, j])
            if metric in OPTIONAL_METRICS and value == 0.0:
                continue
            out[f"eval/{set_name}/{metric}"] = value if metric == "count" else value / count
    return out
