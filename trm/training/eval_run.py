"""One evaluation during training, undone when a stop request ends it early.

The EMA weights are swapped in for it (ema=True) and the live ones put back after. A stop request (asked
before every test batch) ends it at the next batch on every rank: the evaluators' pooled votes and the
RNG go back to what they were before it, so the checkpoint saved next does not count it and the resumed
run evaluates again.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from trm.distributed import DistInfo
from trm.training.builder import Components
from trm.training.checkpointing.state import rng_state, set_rng_state
from trm.training.config import TrainConfig, best_metric, own_score
from trm.training.eval_passes import eval_passes, evaluate_passes

log = logging.getLogger(__name__)


def evaluate_or_undo(
    cfg: TrainConfig,
    info: DistInfo,
    comps: Components,
    run_dir: Path,
    step: int,
    should_stop: Callable[[], bool],
    *,
    full: bool = True,
) -> dict[str, float] | None:
    """Every evaluation pass at `step` (trm.training.eval_passes) and its metrics; None when
    `should_stop()` ended it early (nothing pooled, the RNG as it was before it).

    With a subset (comps.subset: eval_subset.fraction < 1) the subset is evaluated first, with its own
    evaluators, its metrics under `subset/` (trm.evaluation.subset) and its outputs in `run_dir/subset/`;
    `full` also evaluates the whole test set (metrics under their usual names)."""
    from trm.evaluation.runner import EvaluationStopped, evaluate
    from trm.evaluation.subset import SUBSET_PREFIX, subset_metrics

    targets: list[tuple[Any, list[Any], Path, bool]] = []
    if comps.subset is not None:
        targets.append((comps.subset.loader, comps.subset.evaluators, run_dir / SUBSET_PREFIX, True))
    if full or comps.subset is None:
        targets.append((comps.test_loader, comps.evaluators, run_dir, False))
    rng_before = rng_state()
    passes = eval_passes(cfg.arch)  # URM: also loops + 8 (arch.loop_deltas)
    evaluators = [ev for _loader, evs, _dir, _sub in targets for ev in evs]
    # A stop in a later pass must not leave the earlier passes' pooled votes behind (the resumed run
    # evaluates every pass again).
    several = len(passes) * len(targets) > 1
    votes_before = [copy.deepcopy(ev.state_dict()) for ev in evaluators] if several else None
    metrics: dict[str, float] = {}
    try:
        with ema_weights(comps):
            for loader, evs, save_dir, is_subset in targets:
                found = evaluate_passes(
                    cfg.arch,
                    comps.model.config,
                    save_dir,
                    lambda out, loader=loader, evs=evs: evaluate(
                        comps.step_module,  # compiled when training is
                        loader,
                        evs,
                        info,
                        chunk_size=comps.plan.micro_batch_size,
                        save_dir=out,
                        step=step,
                        save_outputs=tuple(cfg.eval_save_outputs),
                        should_stop=should_stop,
                    ),
                )
                metrics.update(subset_metrics(found, own_score(best_metric(cfg))) if is_subset else found)
    except EvaluationStopped as stopped:
        for ev, saved in zip(evaluators, votes_before or [], strict=False):
            ev.load_state_dict(saved)
        set_rng_state(rng_before)
        if info.is_main:
            log.warning("%s; it runs again when the run resumes", stopped)
        return None
    return metrics


@contextlib.contextmanager
def ema_weights(comps: Components) -> Iterator[None]:
    """Swap the EMA weights in for evaluation (ema=True) and put the live weights back afterwards."""
    ema: Any = comps.ema
    if ema is None:
        yield
        return
    params = [p for p in comps.model.parameters() if p.requires_grad]
    backup = [p.detach().clone() for p in params]
    ema.copy_to(comps.model)
    try:
        yield
    finally:
        with torch.no_grad():
            for p, saved in zip(params, backup, strict=True):
                p.copy_(saved)
