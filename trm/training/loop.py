"""The training run, top to bottom: resume, train passes, evaluate, checkpoint, stop on signals.

One loader pass covers `eval_interval` epochs (upstream's iteration). After each pass: evaluate (EMA
weights when ema=True; trm.training.eval_run), then save a checkpoint. Saving, its schedule (rolling
checkpoints), retention and resuming belong to the Checkpointer (`trm.training.checkpointing`). After every step the ranks agree on one set of named flags (`trm.training.step_flags`) in one all-reduce.
SIGTERM/SIGINT finish the current step, save and return SAVED_RETRY (75); SIGUSR1 saves and continues. A CUDA
out-of-memory error raises `trm.oom.OutOfMemory` (exit OUT_OF_MEMORY, 80) without saving. A stop during an evaluation ends it at the next test batch
(all ranks agree) and saves the training state as it was before that evaluation: its partial metrics and
votes are dropped and the checkpoint does not count it, so the resumed run evaluates again. Starting again
with the same checkpoint_path resumes from the newest complete checkpoint, bit-exactly. A subset run's end
(the choice of the best checkpoint, `_choose_best`) stops the same way; a finished run whose choice is not
in run.json makes it when started again. With `early_stop.patience` > 0 a run whose in-run evaluations
stop improving its ranking metric ends there as a finished run (trm.training.early_stop).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from trm import distributed as dist_utils
from trm import exit_codes
from trm.batching import halved_micro_batch
from trm.distributed import DistInfo
from trm.oom import OutOfMemory, is_out_of_memory, training_out_of_memory
from trm.training import curriculum
from trm.training import watchdog as hang_watchdog
from trm.training.accumulation import exploration_draw, slice_rows
from trm.training.builder import Components, arch_identity, build
from trm.training.checkpointing import Checkpointer, InitialWeights, Progress, rank_shard
from trm.training.config import (
    TrainConfig,
    as_dict,
    config_hash,
    is_full_evaluation,
    math_dict,
    ranking_metric,
)
from trm.training.early_stop import EARLY_STOP, EarlyStopState
from trm.training.eval_run import evaluate_or_undo
from trm.training.eval_share import EvalShare
from trm.training.metrics_log import MetricsLog
from trm.training.nonfinite import NonFiniteGuard
from trm.training.run_record import (
    open_metrics,
    read_json_or_empty,
    record_best,
    record_in_run_json,
    write_run_json,
)
from trm.training.signals import StopRequests, handle_signals
from trm.training.step_flags import StepFlags
from trm.training.throughput import StepTimer, total_steps
from trm.training.train_log import perf_metrics, reduce_totals, train_metrics

log = logging.getLogger(__name__)


class Trainer:
    """Owns one run: its components, progress, ACT carries, metric log and checkpoints."""

    def __init__(self, cfg: TrainConfig, info: DistInfo, comps: Components) -> None:
        self.cfg = cfg
        self.info = info
        self.components = comps
        self.run_dir = Path(str(cfg.checkpoint_path))
        self.progress = Progress()
        self.carries: list[Any] | None = None
        meta = comps.train_loader.metadata
        self.total_steps = total_steps(
            cfg.epochs, meta.total_groups, meta.mean_puzzle_examples, cfg.global_batch_size
        )
        self.step_limit = min(self.total_steps, cfg.max_steps or self.total_steps)
        self.total_iters = cfg.epochs // (cfg.eval_interval or cfg.epochs)
        # The depth of every training step (one full-depth stage unless depth_curriculum.ramp > 0).
        self.depth_schedule = curriculum.run_schedule(cfg, self.total_steps)
        self.metrics: MetricsLog | None = None
        self.resumed_from: Path | None = None
        self._evaluated_step = -1
        self._eval_metrics: dict[str, float] = {}  # of the evaluation at _evaluated_step (rank 0)
        self.watchdog = hang_watchdog.for_run(cfg, self.run_dir, info.rank)
        self.nonfinite = NonFiniteGuard(
            self.run_dir, info, lambda: comps.train_loader.identifiers, as_dict(cfg)
        )
        self.checkpointer = Checkpointer(cfg, info, self.run_dir, self, self.nonfinite.check_weights)
        self.eval_share = EvalShare(cfg.eval_interval, cfg.epochs, warn=self.step_limit >= self.total_steps)
        self.timer = StepTimer()
        # A `time.monotonic()` value: once passed, `train` saves and stops as on SIGTERM (stop_reason DEADLINE).
        self.deadline: float | None = None
        self.show_progress = True  # the progress bar on rank 0 (`trm adapt --quiet` turns it off)
        self.stop_reason: str | None = None  # what stopped the last `train` early (a signal name, DEADLINE)

    # ---------------------------------------------------------------- setup
    @classmethod
    def create(
        cls,
        cfg: TrainConfig,
        info: DistInfo,
        loaders: tuple[Any, Any] | None = None,
        initial_weights: InitialWeights | None = None,
    ) -> Trainer:
        """Build everything, then resume from the newest complete checkpoint or load initial weights:
        `initial_weights()` (a full state dict and its description) when given, else cfg.load_checkpoint."""
        trainer = cls(cfg, info, build(cfg, info, loaders))
        resumed = trainer.checkpointer.load(trainer.components, initial_weights)
        if resumed is not None:
            trainer.resumed_from, trainer.progress, trainer.carries = (
                resumed.folder,
                resumed.progress,
                resumed.carries,
            )
        if info.is_main:
            trainer._open_logs()
        return trainer

    def checkpoint_facts(self) -> dict[str, Any]:
        return {
            "step": self.progress.step,
            "run_name": self.cfg.run_name,
            "config_hash": config_hash(self.cfg),
            "world_size": self.info.world_size,
            "micro_batch_size": self.components.plan.micro_batch_size,
            "global_batch_size": self.cfg.global_batch_size,
            "dataset_fingerprint": self.components.train_loader.fingerprint,
            "arch": arch_identity(self.cfg),
            "math": math_dict(self.cfg),
        }

    def _open_logs(self) -> None:
        resumed = self.resumed_from is not None
        self.metrics = open_metrics(self.cfg, self.run_dir, self.progress.step if resumed else None)
        write_run_json(
            self.cfg,
            self.info,
            self.components,
            self.run_dir,
            total_steps=self.total_steps,
            step_limit=self.step_limit,
            resumed_from=self.resumed_from,
            early_stop=EarlyStopState.from_dict(self.progress.early_stop).stopped,
        )
        if not resumed:
            n = sum(p.numel() for p in self.components.model.parameters())
            self.metrics.log(0, {"num_params": float(n)})
        if self.cfg.early_stop.patience and (not self.cfg.evaluate or self.components.test_loader is None):
            log.warning(
                "early_stop.patience=%d does nothing in this run: it evaluates nothing in-run (%s)",
                self.cfg.early_stop.patience,
                "evaluate=false" if not self.cfg.evaluate else "no test split",
            )

    # ---------------------------------------------------------------- the run
    def train(self) -> int:
        """Run to the end (OK) or until a stop signal (SAVED_RETRY after saving)."""
        owes_best = self.progress.finished and self._best_owed()
        if self.progress.finished and not owes_best:
            if self.info.is_main:
                log.info(
                    "run in %s already finished at step %d; nothing to do", self.run_dir, self.progress.step
                )
            return exit_codes.OK
        self.components.model.train()
        bar = tqdm(
            total=self.step_limit,
            initial=self.progress.step,
            desc="train",
            unit="step",
            disable=not (self.info.is_main and self.show_progress),
            dynamic_ncols=True,
        )
        self.eval_share.restart()
        self.watchdog.start()
        try:
            with handle_signals(self.deadline) as requests:
                if owes_best:  # stopped during the end's choice of the best checkpoint: choose it now
                    return self._choose_best(requests)
                return self._run(requests, bar)
        except RuntimeError as err:  # torch.cuda.OutOfMemoryError is one
            if not is_out_of_memory(err):
                raise
            raise self._out_of_memory(err) from None
        finally:
            self.watchdog.stop()
            bar.close()

    def _out_of_memory(self, err: RuntimeError) -> OutOfMemory:
        """The one-line error (exit OUT_OF_MEMORY) of a step or evaluation that ran out of GPU memory."""
        plan = self.components.plan
        return training_out_of_memory(
            err,
            step=self.progress.step,
            micro_batch_size=plan.micro_batch_size,
            accumulation=plan.accum_steps,
            global_batch_size=self.cfg.global_batch_size,
            world_size=self.info.world_size,
            smaller=halved_micro_batch(plan.local_batch_size, plan.micro_batch_size),
        )

    def _run(self, requests: StopRequests, bar: tqdm) -> int:
        p = self.progress
        while p.iteration < self.total_iters and p.step < self.step_limit:
            if not p.pass_done:
                for _set_name, batch, _n in self.timer.batches(self.components.train_loader.iter_train()):
                    if p.step >= self.step_limit:
                        break
                    self._train_step(batch, bar)
                    rolling, writer = self.checkpointer.flags(p.step)
                    flags = StepFlags(
                        stop=requests.stop, save=requests.take_save(), rolling=rolling, writer=writer
                    ).any_rank(self.info, nonfinite=self.nonfinite.flags)
                    if any(flags.nonfinite):
                        self.checkpointer.wait(raise_failure=False)  # the save in flight holds finite weights
                        self.nonfinite.fail(p.step)
                    self.save_checkpoint(shared=flags)  # a failed background save stops every rank here
                    if flags.stop:
                        return self._stopped(requests)
                p.pass_done = True
            if p.step >= self.step_limit:
                break
            if p.iteration >= (self.cfg.min_eval_interval or 0) and not self._evaluate_and_log(requests):
                return self._stopped_in_evaluation(requests)
            p.iteration += 1
            p.pass_done = False
            if p.iteration >= self.total_iters or self._stops_early():
                break
            self.save_checkpoint(pass_end=True)
            if dist_utils.any_rank([requests.stop], self.info)[0]:
                self.save_checkpoint()
                return self._stopped(requests)
        if self._evaluated_step != p.step and not self._evaluate_and_log(requests):
            return self._stopped_in_evaluation(requests)
        p.finished = True
        self.save_checkpoint(replace=True)
        self.checkpointer.wait()
        stopped_early = EarlyStopState.from_dict(p.early_stop).stopped
        if stopped_early and self.info.is_main:  # only once the run is saved as finished
            record_in_run_json(self.run_dir, EARLY_STOP, stopped_early)
        return self._choose_best(requests)

    def _stops_early(self) -> bool:
        """Whether early stopping ends the run after this evaluation (early_stop.patience > 0): rank 0's
        state, which saw the metrics, goes to every rank, so all decide alike. When it does, the state
        records why (saved with the final checkpoint; run.json gets it after that save)."""
        stop = self.cfg.early_stop
        if stop.patience == 0:
            return False
        self.progress.early_stop = dist_utils.broadcast_object(self.progress.early_stop, self.info)
        state = EarlyStopState.from_dict(self.progress.early_stop)
        if not state.due(stop):
            return False
        state.stopped = state.record(stop, self.progress.step, self.step_limit)
        self.progress.early_stop = state.as_dict()  # run.json gets it once the final save is complete
        if self.info.is_main:
            log.warning(
                "early stop at step %d of %d: no new best of %s in %d evaluations (early_stop.patience=%d, "
                "min_delta=%g); best %.4g at step %d. The run ends as finished",
                self.progress.step, self.step_limit, state.metric, state.since, stop.patience,
                stop.min_delta, state.value, state.step,
            )  # fmt: skip
        return True

    def _track_ranking(self, metrics: dict[str, float]) -> None:
        """Count one in-run evaluation's value of the ranking metric in the early-stop state (rank 0)."""
        metric = ranking_metric(self.cfg)
        value = metrics.get(metric)
        if value is None:
            if self.cfg.early_stop.patience > 0:
                log.warning(
                    "early stopping: the evaluation at step %d logged no %s (the ranking metric: "
                    "checkpoint.best_metric); it does not count", self.progress.step, metric,
                )  # fmt: skip
            return
        state = EarlyStopState.from_dict(self.progress.early_stop)
        state.observe(metric, float(value), self.progress.step, self.cfg.early_stop.min_delta)
        self.progress.early_stop = state.as_dict()

    def _chooses_best(self) -> bool:
        return self.components.subset is not None and self.cfg.evaluate

    def _best_owed(self) -> bool:
        """A finished subset run whose choice of the best checkpoint is not in run.json (a stop, a crash or
        a kill during it): the resumed run makes it (every rank learns rank 0's answer)."""
        if not self._chooses_best():
            return False
        missing = self.info.is_main and "best" not in read_json_or_empty(self.run_dir / "run.json")
        return dist_utils.any_rank([missing], self.info)[0]

    def _choose_best(self, requests: StopRequests) -> int:
        """With a subset (eval_subset.fraction < 1): evaluate the best.top_k checkpoints by subset score on
        the full set, choose among them, and record the choice (best.json, then run.json's `best`). A stop
        request ends it at the next test batch with nothing recorded (SAVED_RETRY): the run is saved as
        finished, and the resumed run chooses again."""
        if not self._chooses_best():
            return exit_codes.OK
        from trm.evaluation.runner import EvaluationStopped
        from trm.training.checkpointing.best import select_best
        from trm.training.full_eval import InRunFullEvaluation

        def should_stop() -> bool:  # asked before every test batch, on every rank
            self.watchdog.pet()
            return dist_utils.any_rank([requests.stop], self.info)[0]

        evaluate_full = InRunFullEvaluation(self.cfg, self.info, self.components, self.run_dir, should_stop)
        try:
            with self.watchdog.evaluation():  # the evaluation allowance between test batches
                chosen = select_best(
                    self.run_dir, self.cfg.best.top_k, evaluate_full, write=self.info.is_main
                )
        except EvaluationStopped as stopped:
            if self.info.is_main:
                log.warning(
                    "%s (best.top_k candidate); the best checkpoint is chosen when the run resumes", stopped
                )
            return self._stopped(requests)
        if self.info.is_main:
            record_best(self.run_dir, chosen.as_dict())
            log.info(
                "best checkpoint: %s (%s = %.4g on the %s evaluation)",
                chosen.info.path, chosen.metric, chosen.value, chosen.evaluation,
            )  # fmt: skip
        return exit_codes.OK

    def _stopped(self, requests: StopRequests) -> int:
        self.checkpointer.wait()
        self.stop_reason = requests.signal_name
        if self.info.is_main:
            log.warning(
                "%s: saved step %d in %s; exiting with %d (the same command resumes)",
                requests.signal_name or "stop request (another rank)",
                self.progress.step,
                self.run_dir,
                exit_codes.SAVED_RETRY,
            )
        return exit_codes.SAVED_RETRY

    def _stopped_in_evaluation(self, requests: StopRequests) -> int:
        """Save the state of before the stopped evaluation (the pass is done, the evaluation is not)."""
        self.save_checkpoint()
        return self._stopped(requests)

    # ---------------------------------------------------------------- one optimizer step
    def _train_step(self, batch: dict[str, torch.Tensor], bar: tqdm) -> None:
        from trm.model import HaltExploration
        from trm.optim import lr_at_step

        c, cfg, plan, info = self.components, self.cfg, self.components.plan, self.info
        self.nonfinite.begin_step(batch)
        batch = {k: v.to(info.device, non_blocking=True) for k, v in batch.items()}
        if self.carries is None:
            self.carries = [
                c.loss_head.initial_carry(slice_rows(batch, plan.micro_rows(k)))
                for k in range(plan.accum_steps)
            ]
        explore, min_steps = exploration_draw(
            cfg.seed,
            self.progress.step + 1,
            cfg.global_batch_size,
            cfg.arch.halt_exploration_prob,
            cfg.arch.halt_max_steps,
        )
        totals: dict[str, torch.Tensor] = {}
        stage = curriculum.stage_at(self.depth_schedule, self.progress.step + 1)
        with curriculum.at_depth(c.model.config, stage):
            for k in range(plan.accum_steps):
                slots = plan.micro_slots(k)
                exploration = HaltExploration(
                    explore[slots].to(info.device), min_steps[slots].to(info.device)
                )
                micro = slice_rows(batch, plan.micro_rows(k))
                carry, loss, metrics, _, _ = c.step_module(self.carries[k], micro, exploration=exploration)
                (loss / cfg.global_batch_size).backward()
                self.carries[k] = carry
                for name, value in metrics.items():
                    totals[name] = totals[name] + value.detach() if name in totals else value.detach()
        dist_utils.all_reduce_sum_([p.grad for p in c.model.parameters() if p.grad is not None], info)
        self.nonfinite.observe(totals, c.model.parameters(), cfg.grad_clip_norm)
        step = self.progress.step + 1
        lr_scale = lr_at_step(
            step,
            base_lr=1.0,
            warmup_steps=cfg.lr_warmup_steps,
            total_steps=self.total_steps,
            min_ratio=cfg.lr_min_ratio,
        )
        for o in c.optimizers:
            for group in o.optimizer.param_groups:
                group["lr"] = o.base_lr * lr_scale
            o.optimizer.step()
            o.optimizer.zero_grad()
        c.model.zero_grad(set_to_none=True)
        if c.ema is not None:
            c.ema.update(c.model)
        self.progress.step = step
        self.watchdog.pet(step)
        self.timer.step_done()
        bar.update()
        if step % cfg.log_interval == 0:
            self._log_train(step, totals, c.optimizers[-1].base_lr * lr_scale, bar)

    def _log_train(self, step: int, totals: dict[str, torch.Tensor], lr: float, bar: tqdm) -> None:
        values = reduce_totals(totals, self.info)
        if values is None:  # not rank 0
            return
        out = train_metrics(values, lr, self.cfg.global_batch_size)
        perf = perf_metrics(
            self.timer, self.components, self.cfg.global_batch_size, self.info, step, self.depth_schedule
        )
        assert self.metrics is not None
        self.metrics.log(step, {**out, **perf})
        postfix = {"loss": f"{out.get('train/lm_loss', float('nan')):.3f}"}
        if "train/accuracy" in out:
            postfix["acc"] = f"{out['train/accuracy']:.3f}"
        bar.set_postfix(postfix, refresh=False)

    # ---------------------------------------------------------------- evaluation
    def _evaluate_and_log(self, requests: StopRequests | None = None) -> bool:
        """Evaluate and log; False when a stop request ended the evaluation early (nothing logged, no
        votes pooled, the RNG as it was before it)."""
        if self.components.test_loader is None or not self.cfg.evaluate:
            return True

        def should_stop() -> bool:  # asked before every test batch
            self.watchdog.pet()
            return requests is not None and dist_utils.any_rank([requests.stop], self.info)[0]

        # The n-th in-run evaluation (from the progress, so a resumed run counts on): full or subset only.
        number = self.progress.iteration - (self.cfg.min_eval_interval or 0) + 1
        full = is_full_evaluation(self.cfg, number)
        start = time.perf_counter()
        with self.watchdog.evaluation():
            metrics = evaluate_or_undo(
                self.cfg, self.info, self.components, self.run_dir, self.progress.step, should_stop, full=full
            )
        if metrics is None:
            return False
        self._evaluated_step = self.progress.step
        self._eval_metrics = metrics
        if self.info.is_main:
            self._track_ranking(metrics)
        if self.info.is_main and self.metrics is not None:
            metrics.update(self.eval_share.record(time.perf_counter() - start))
            self.metrics.log(self.progress.step, metrics)
            shown = {
                k: round(v, 4) for k, v in metrics.items() if "pass@" in k or k.endswith("exact_accuracy")
            }
            log.info("eval at step %d: %s", self.progress.step, json.dumps(shown))
        return True

    # ---------------------------------------------------------------- checkpoints
    def save_checkpoint(
        self, *, replace: bool = False, pass_end: bool = False, shared: StepFlags | None = None
    ) -> None:
        """Save the run now (see Checkpointer.save): an evaluation checkpoint when the last evaluation
        was at this step; `replace` overwrites a complete one (the final save marks the run finished);
        `pass_end` and `shared` let the Checkpointer decide whether to save (after a pass, after a step)."""
        step = self.progress.step
        evaluated = self._evaluated_step == step
        metrics = self._eval_metrics if evaluated else None
        self.checkpointer.save(step, metrics, replace=replace, pass_end=pass_end, shared=shared)

    def rank_shard(self) -> dict[str, Any]:
        return rank_shard(self.components.plan, self.carries)

    def saved_weights(self) -> list[torch.Tensor]:
        """The weights a checkpoint holds (live and EMA): never saved when not finite."""
        c = self.components
        ema = list(c.ema.shadow.values()) if c.ema is not None else []
        return [*c.model.state_dict().values(), *ema]

    def main_payload(self) -> dict[str, Any]:
        c = self.components
        return {
            "progress": dataclasses.asdict(self.progress),  # a copy: the writer may run after it changes
            "model": c.model.state_dict(),
            "ema": c.ema.state_dict() if c.ema is not None else None,
            "optimizers": {o.name: o.optimizer.state_dict() for o in c.optimizers},
            "train_loader": c.train_loader.state_dict(),
            "evaluators": [ev.state_dict() for ev in c.evaluators],
            "subset_evaluators": [ev.state_dict() for ev in c.subset.evaluators] if c.subset else [],
            "config": as_dict(self.cfg),
        }

    def close(self) -> None:
        """Wait for the save in flight (raising its failure), then close the metric sinks."""
        try:
            self.checkpointer.close()
        finally:
            if self.metrics is not None:
                self.metrics.close()
