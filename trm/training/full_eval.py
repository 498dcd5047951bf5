"""Evaluate a saved checkpoint of the running job on the full test set, in the trainer's process (the end
of a run's best.top_k re-evaluation, trm.training.checkpointing.best.select_best).

The checkpoint's weights (and EMA, evaluated as in the run) are loaded into the trainer's model, a fresh
set of evaluators scores them (no votes pooled with any other evaluation), and the trainer's weights, EMA
and RNG are put back afterwards. Outputs (ARC: submission.json) go to `<run_dir>/best_candidates/step_N/`.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from pathlib import Path

from trm.distributed import DistInfo
from trm.training.builder import Components
from trm.training.checkpointing.layout import CheckpointInfo, check_folder
from trm.training.checkpointing.state import read_main_state, rng_state, set_rng_state
from trm.training.config import TrainConfig
from trm.training.eval_passes import evaluate_passes
from trm.training.eval_run import ema_weights

log = logging.getLogger(__name__)
CANDIDATES_DIR = "best_candidates"


class InRunFullEvaluation:
    """Callable: a checkpoint of this run -> its full-test-set metrics (rank 0; {} elsewhere)."""

    def __init__(
        self,
        cfg: TrainConfig,
        info: DistInfo,
        comps: Components,
        run_dir: Path,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> None:
        self.cfg, self.info, self.comps, self.run_dir = cfg, info, comps, run_dir
        # Asked before every test batch on every rank (it pets the hang watchdog): True ends the evaluation
        # there with EvaluationStopped (trm.evaluation.runner), the trainer's state put back.
        self.should_stop = should_stop

    def __call__(self, checkpoint: CheckpointInfo) -> dict[str, float]:
        """Its metrics (rank 0); {} when its files no longer match its manifest (a warning says so), so
        that a damaged candidate is never scored."""
        from trm.evaluation.arc import build_evaluators
        from trm.evaluation.runner import evaluate

        try:  # every rank checks, as a resume does: all of them skip a damaged one alike
            check_folder(checkpoint.path, verify_hashes=True)
        except ValueError as why:
            if self.info.is_main:
                log.warning("best.top_k candidate %s is damaged (%s): not evaluated", checkpoint.path, why)
            return {}
        c = self.comps
        state = read_main_state(checkpoint.path)
        weights = copy.deepcopy(c.model.state_dict())
        ema = copy.deepcopy(c.ema.state_dict()) if c.ema is not None else None
        rng = rng_state()
        evaluators = build_evaluators(self.cfg.evaluators, c.test_loader)
        if self.info.is_main:
            log.info("evaluating %s on the full test set (best.top_k candidate)", checkpoint.path)
        try:
            c.model.load_state_dict(state["model"])
            if c.ema is not None and state.get("ema") is not None:
                c.ema.load_state_dict(state["ema"])
            with ema_weights(c):
                return evaluate_passes(
                    self.cfg.arch,
                    c.model.config,
                    self.run_dir / CANDIDATES_DIR / f"step_{checkpoint.step}",
                    lambda out: evaluate(
                        c.step_module,
                        c.test_loader,
                        evaluators,
                        self.info,
                        chunk_size=c.plan.micro_batch_size,
                        save_dir=out,
                        step=checkpoint.step,
                        should_stop=self.should_stop,
                    ),
                )
        finally:
            c.model.load_state_dict(weights)
            if c.ema is not None and ema is not None:
                c.ema.load_state_dict(ema)
            set_rng_state(rng)
