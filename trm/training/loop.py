"""The training run, top to bottom: resume, train passes, evaluate, checkpoint, stop on signals.

One loader pass covers `eval_interval` epochs (upstream's iteration). After each pass: evaluate (EMA
weights when ema=True), then save a checkpoint; rolling checkpoints follow `trm.training.rolling`, and
saves are written in the background (`trm.training.async_save`). SIGTERM/SIGINT finish the current step, save and return
SAVED_RETRY (75); SIGUSR1 saves and continues. A stop during an evaluation ends it at the next test batch
(all ranks agree) and saves the training state as it was before that evaluation: its partial metrics and
votes are dropped and the checkpoint does not count it, so the resumed run evaluates again. Starting again
with the same checkpoint_path resumes from the newest complete checkpoint, bit-exactly.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import json
import logging
import os
import platform
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from trm import distributed as dist_utils
from trm import exit_codes
from trm.distributed import DistInfo
from trm.errors import TRMError
from trm.io import atomic_write_json
from trm.optim.placement import place_state
from trm.training import checkpoint as ckpt
from trm.training import watchdog as hang_watchdog
from trm.training.accumulation import exploration_draw, slice_rows
from trm.training.async_save import CheckpointWriter, HostBuffers, snapshot, snapshot_bytes
from trm.training.builder import Components, arch_identity, build, load_initial_weights
from trm.training.config import TrainConfig, as_dict, best_metric, config_hash, math_dict
from trm.training.eval_passes import eval_passes, evaluate_passes
from trm.training.eval_share import EvalShare
from trm.training.metrics_log import MetricsLog, TensorBoardSink, WandbSink, wandb_wanted
from trm.training.nonfinite import NonFiniteGuard
from trm.training.rolling import RollingSchedule
from trm.training.signals import StopRequests, handle_signals
from trm.training.state import (
    Progress,
    rank_shard,
    read_carries,
    read_main_state,
    read_rng,
    rng_state,
    set_rng_state,
    write_main_state,
    write_rank_shard,
)
from trm.training.throughput import (
    StepTimer,
    act_step_flops,
    peak_flops,
    throughput_metrics,
    total_steps,
)
from trm.versions import collect_versions

log = logging.getLogger(__name__)


def _disk_full(part: Any) -> OSError | None:
    """Run one part of a save; return the ENOSPC/EDQUOT behind its failure, re-raise any other error."""
    try:
        part()
    except (OSError, RuntimeError) as err:
        cause = ckpt.disk_full_cause(err)
        if cause is None:
            raise
        return cause
    return None


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
        self.metrics: MetricsLog | None = None
        self.resumed_from: Path | None = None
        self._evaluated_step = -1
        self._eval_metrics: dict[str, float] = {}  # of the evaluation at _evaluated_step (rank 0)
        self.rolling = RollingSchedule(cfg.checkpoint_every_minutes, cfg.checkpoint_every_steps)
        self.writer = CheckpointWriter(asynchronous=cfg.async_checkpoint)
        # Host memory for the snapshots (pinned on CUDA), kept from one save to the next: only the first
        # save pays for allocating it (and its page faults).
        self._buffers = (HostBuffers(), HostBuffers())
        self.watchdog = hang_watchdog.for_run(cfg, self.run_dir, info.rank)
        self.nonfinite = NonFiniteGuard(
            self.run_dir, info, lambda: comps.train_loader.identifiers, as_dict(cfg)
        )
        self.eval_share = EvalShare(cfg.eval_interval, cfg.epochs, warn=self.step_limit >= self.total_steps)
        self.timer = StepTimer()
        # A `time.monotonic()` value: once passed, `train` saves and stops as on SIGTERM (stop_reason DEADLINE).
        self.deadline: float | None = None
        self.stop_reason: str | None = None  # what stopped the last `train` early (a signal name, DEADLINE)

    # ---------------------------------------------------------------- setup
    @classmethod
    def create(
        cls,
        cfg: TrainConfig,
        info: DistInfo,
        loaders: tuple[Any, Any] | None = None,
        initial_weights: Callable[[], tuple[dict[str, torch.Tensor], str]] | None = None,
    ) -> Trainer:
        """Build everything, then resume from the newest complete checkpoint or load initial weights:
        `initial_weights()` (a full state dict and its description) when given, else cfg.load_checkpoint."""
        trainer = cls(cfg, info, build(cfg, info, loaders))
        trainer._resume_or_init(initial_weights)
        if info.is_main:
            trainer._open_logs()
        return trainer

    def _facts(self) -> dict[str, Any]:
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

    def _resume_or_init(
        self, initial_weights: Callable[[], tuple[dict[str, torch.Tensor], str]] | None = None
    ) -> None:
        found = None
        if self.info.is_main:
            found = ckpt.find_complete(self.run_dir)
            found = [(i.step, str(i.path)) for i in found]
        found = dist_utils.broadcast_object(found, self.info)
        for _step, path in reversed(found or []):
            folder = Path(path)
            try:
                manifest = ckpt.check_folder(folder, verify_hashes=True)
            except ValueError as why:
                log.warning("skipping checkpoint %s: %s", folder, why)
                continue
            self._restore(folder, manifest)
            self.resumed_from = folder
            return
        if initial_weights is not None or self.cfg.load_checkpoint:
            if initial_weights is not None:
                weights, source = initial_weights()
                self.components.model.load_state_dict(weights, strict=True)
            else:
                source = self.cfg.load_checkpoint
                kind = load_initial_weights(
                    source,
                    self.components.model,
                    self.components.train_loader.metadata.num_puzzle_identifiers,
                )
                source = f"{source} ({kind})"
            if self.components.ema is not None:
                from trm.optim import EMA

                self.components.ema = EMA(self.components.model, self.cfg.ema_rate)
            if self.info.is_main:
                log.info("initial weights from %s", source)

    def _restore(self, folder: Path, manifest: dict[str, Any]) -> None:
        for warning in ckpt.check_compatible(manifest, self._facts(), folder):
            if self.info.is_main:
                log.warning(warning)
        state = read_main_state(folder)
        self.components.model.load_state_dict(state["model"])
        if self.components.ema is not None:
            if state.get("ema") is None:
                raise TRMError(
                    f"cannot resume from {folder} with ema=True: it was saved without EMA. Use ema=False."
                )
            self.components.ema.load_state_dict(state["ema"])
        saved_opts = state["optimizers"]
        for o in self.components.optimizers:
            if o.name not in saved_opts:
                raise TRMError(
                    f"cannot resume from {folder}: it has no {o.name} optimizer state (freeze_weights?)."
                )
            o.optimizer.load_state_dict(saved_opts[o.name])
            # torch leaves `step` on the CPU it was loaded to; the adam-atan2 kernel reads it on the GPU.
            place_state(o.optimizer, source=f"{folder / ckpt.STATE} optimizer {o.name}")
        self.components.train_loader.load_state_dict(state["train_loader"])
        # Pooled ARC votes of the evaluations before the interruption (aggregated_voting).
        for ev, saved in zip(self.components.evaluators, state.get("evaluators") or [], strict=False):
            ev.load_state_dict(saved)
        self.progress = Progress(**state["progress"])
        world_saved = int(manifest["world_size"])
        self.carries = read_carries(folder, world_saved, self.components.plan, self.info.device)
        rng = read_rng(folder, self.info.rank, world_saved)
        if rng is not None:
            set_rng_state(rng)
        if self.info.is_main:
            log.info("resumed from %s (step %d)", folder, self.progress.step)

    def _open_logs(self) -> None:
        resume_step = self.progress.step if self.resumed_from is not None else None
        self.metrics = MetricsLog(self.run_dir, resume_step=resume_step)
        cfg = self.cfg
        if wandb_wanted(cfg.wandb):
            self.metrics.add_sink(
                WandbSink(str(cfg.project_name), str(cfg.run_name), as_dict(cfg), self.run_dir)
            )
        if cfg.tensorboard:
            self.metrics.add_sink(TensorBoardSink(self.run_dir))
        atomic_write_json(
            self.run_dir / "run.json",
            {
                "config": as_dict(cfg),
                "config_hash": config_hash(cfg),
                "world_size": self.info.world_size,
                "device": str(self.info.device),
                "micro_batch_size": self.components.plan.micro_batch_size,
                "accum_steps": self.components.plan.accum_steps,
                "total_steps": self.total_steps,
                "step_limit": self.step_limit,
                "resumed_from": str(self.resumed_from) if self.resumed_from else None,
                "versions": collect_versions(),
                "platform": platform.platform(),
                "git_sha": ckpt.git_sha(),
                "image_digest": os.environ.get("TRM_IMAGE_DIGEST") or None,
                # which AdamATan2 ran: "ext" (the compiled adam-atan2 extension) or "torch" (trm's)
                "optimizer_backends": {
                    o.name: getattr(o.optimizer, "trm_backend", None)
                    for o in self.components.optimizers
                    if hasattr(o.optimizer, "trm_backend")
                },
                "command": sys.argv,
            },
        )
        if self.resumed_from is None:
            n = sum(p.numel() for p in self.components.model.parameters())
            self.metrics.log(0, {"num_params": float(n)})

    # ---------------------------------------------------------------- the run
    def train(self) -> int:
        """Run to the end (OK) or until a stop signal (SAVED_RETRY after saving)."""
        if self.progress.finished:
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
            disable=not self.info.is_main,
            dynamic_ncols=True,
        )
        self.eval_share.restart()
        self.watchdog.start()
        try:
            with handle_signals(self.deadline) as requests:
                return self._run(requests, bar)
        finally:
            self.watchdog.stop()
            bar.close()

    def _run(self, requests: StopRequests, bar: tqdm) -> int:
        p = self.progress
        while p.iteration < self.total_iters and p.step < self.step_limit:
            if not p.pass_done:
                for _set_name, batch, _n in self.timer.batches(self.components.train_loader.iter_train()):
                    if p.step >= self.step_limit:
                        break
                    self._train_step(batch, bar)
                    stop, save, rolling, *flags = dist_utils.any_rank(
                        [requests.stop, requests.take_save(), self._rolling_due(), *self._writer_flags()],
                        self.info,
                        extra=self.nonfinite.flags,
                    )
                    writer, bad = flags[:2], flags[2:]
                    if any(bad):
                        self.writer.join()  # the save in flight holds finite weights: let it finish
                        self.nonfinite.fail(p.step)
                    self._raise_writer_failure(*writer)
                    if stop or save or rolling:
                        self.save_checkpoint()
                    if stop:
                        return self._stopped(requests)
                p.pass_done = True
            if p.step >= self.step_limit:
                break
            if p.iteration >= (self.cfg.min_eval_interval or 0) and not self._evaluate_and_log(requests):
                return self._stopped_in_evaluation(requests)
            p.iteration += 1
            p.pass_done = False
            if p.iteration >= self.total_iters:
                break
            if self.cfg.checkpoint_every_eval:
                self.save_checkpoint()
            if dist_utils.any_rank([requests.stop], self.info)[0]:
                self.save_checkpoint()
                return self._stopped(requests)
        if self._evaluated_step != p.step and not self._evaluate_and_log(requests):
            return self._stopped_in_evaluation(requests)
        p.finished = True
        self.save_checkpoint(replace=True)
        self._settle_writer()
        return exit_codes.OK

    def _stopped(self, requests: StopRequests) -> int:
        self._settle_writer()
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
        for k in range(plan.accum_steps):
            slots = plan.micro_slots(k)
            exploration = HaltExploration(explore[slots].to(info.device), min_steps[slots].to(info.device))
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
        names = sorted(totals)
        flat = torch.stack([totals[n].double() for n in names])
        dist_utils.all_reduce_sum_([flat], self.info)
        if not self.info.is_main:
            return
        values = dict(zip(names, flat.tolist(), strict=True))  # waits for the GPU: the window ends here
        perf = self._throughput()
        count = values.get("count", 0.0)
        out: dict[str, float] = {"train/count": count, "train/lr": lr}
        for name, value in values.items():
            if name.endswith("loss"):
                out[f"train/{name}"] = value / self.cfg.global_batch_size
            elif name != "count" and count > 0:
                out[f"train/{name}"] = value / count
        assert self.metrics is not None
        self.metrics.log(step, {**out, **perf})
        postfix = {"loss": f"{out.get('train/lm_loss', float('nan')):.3f}"}
        if "train/accuracy" in out:
            postfix["acc"] = f"{out['train/accuracy']:.3f}"
        bar.set_postfix(postfix, refresh=False)

    def _throughput(self) -> dict[str, float]:
        """`perf/*` of the steps since the last log point (rank 0's clock; no extra device sync)."""
        c, device = self.components, self.info.device
        peak = peak_flops(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
        try:
            flops: float | None = act_step_flops(c.model.config).train
        except ValueError as why:
            flops = None
            log.debug("no MFU: %s", why)
        out = throughput_metrics(
            self.timer.window(),
            examples_per_step=self.cfg.global_batch_size,
            tokens_per_example=c.train_loader.metadata.seq_len,
            train_flops_per_example=flops,
            peak_flops_total=peak * self.info.world_size if peak else None,
        )
        if device.type == "cuda":
            out["perf/peak_memory_gib"] = torch.cuda.max_memory_allocated(device) / 1024**3
        return out

    # ---------------------------------------------------------------- evaluation
    def _evaluate_and_log(self, requests: StopRequests | None = None) -> bool:
        """Evaluate and log; False when a stop request ended the evaluation early (nothing logged, no
        votes pooled, the RNG as it was before it)."""
        from trm.evaluation.runner import EvaluationStopped, evaluate

        if self.components.test_loader is None or not self.cfg.evaluate:
            return True

        def should_stop() -> bool:  # asked before every test batch
            self.watchdog.pet()
            return requests is not None and dist_utils.any_rank([requests.stop], self.info)[0]

        start = time.perf_counter()
        rng_before = rng_state()
        passes = eval_passes(self.cfg.arch)  # URM: also loops + 8 (arch.loop_deltas)
        # A stop in a later pass must not leave the earlier passes' pooled votes behind (the resumed run
        # evaluates every pass again).
        votes_before = (
            [copy.deepcopy(ev.state_dict()) for ev in self.components.evaluators] if len(passes) > 1 else None
        )
        try:
            with self._eval_weights(), self.watchdog.evaluation():
                metrics = evaluate_passes(
                    self.cfg.arch,
                    self.components.model.config,
                    self.run_dir,
                    lambda save_dir: evaluate(
                        self.components.step_module,  # compiled when training is
                        self.components.test_loader,
                        self.components.evaluators,
                        self.info,
                        chunk_size=self.components.plan.micro_batch_size,
                        save_dir=save_dir,
                        step=self.progress.step,
                        save_outputs=tuple(self.cfg.eval_save_outputs),
                        should_stop=should_stop,
                    ),
                )
        except EvaluationStopped as stopped:
            for ev, saved in zip(self.components.evaluators, votes_before or [], strict=False):
                ev.load_state_dict(saved)
            set_rng_state(rng_before)
            if self.info.is_main:
                log.warning("%s; it runs again when the run resumes", stopped)
            return False
        self._evaluated_step = self.progress.step
        self._eval_metrics = metrics
        if self.info.is_main and self.metrics is not None:
            metrics.update(self.eval_share.record(time.perf_counter() - start))
            self.metrics.log(self.progress.step, metrics)
            shown = {
                k: round(v, 4) for k, v in metrics.items() if "pass@" in k or k.endswith("exact_accuracy")
            }
            log.info("eval at step %d: %s", self.progress.step, json.dumps(shown))
        return True

    @contextlib.contextmanager
    def _eval_weights(self) -> Iterator[None]:
        """Swap the EMA weights in for evaluation (ema=True) and put the live weights back afterwards."""
        ema = self.components.ema
        if ema is None:
            yield
            return
        params = [p for p in self.components.model.parameters() if p.requires_grad]
        backup = [p.detach().clone() for p in params]
        ema.copy_to(self.components.model)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, saved in zip(params, backup, strict=True):
                    p.copy_(saved)

    # ---------------------------------------------------------------- checkpoints
    def save_checkpoint(self, *, replace: bool = False) -> None:
        """Snapshot the state to host memory and hand it to the writer (see trm.training.async_save).

        Every rank writes its shard, rank 0 the rest, publishes atomically and prunes. A complete step_N/
        already there is kept unless `replace` (the final save marks the run finished) or this save
        follows an evaluation at step N and the one there does not (it gains the evaluation's metrics).
        """
        self._settle_writer()  # at most one save in flight; an earlier failure stops every rank here
        step, info = self.progress.step, self.info
        self.nonfinite.check_weights(self._saved_weights(), step)
        final = self.run_dir / f"step_{step}"
        evaluated = self._evaluated_step == step
        upgrade = evaluated and self._kind_on_disk(final) != ckpt.EVAL
        if (final / ckpt.COMPLETE).is_file() and not (replace or upgrade):
            return
        self.rolling.saved()
        shard = snapshot(rank_shard(self.components.plan, self.carries), self._buffers[0])
        main = snapshot(self._main_payload(), self._buffers[1]) if info.is_main else None
        facts = self._facts()
        facts["kind"] = ckpt.EVAL if evaluated else ckpt.ROLLING
        facts["eval_metrics"] = dict(self._eval_metrics) if evaluated else None
        facts["best_metric"] = best_metric(self.cfg)
        if not info.distributed:
            self.writer.submit(lambda: self._write(step, shard, main, facts, prepare=True))
        else:
            self._write_shards_then_submit(step, shard, main, facts)
        if not self.writer.asynchronous:
            self._settle_writer()  # async_checkpoint=false: every rank learns the outcome now

    def _write_shards_then_submit(self, step: int, shard: Any, main: Any, facts: dict[str, Any]) -> None:
        """Under torchrun every rank writes its shard now (from the snapshot); after each part every rank
        learns whether any rank ran out of space (the all-reduce is also the barrier between the parts).
        Only then does rank 0 hand its state, the publication and the pruning to its writer: all shards
        are on disk, so publishing needs no collective from the writer thread (unsafe with NCCL/gloo)."""
        info = self.info
        folder = ckpt.partial_dir(self.run_dir, step)

        def prepare() -> None:
            if info.is_main:
                ckpt.prepare_partial(self.run_dir, step)

        def write() -> None:
            write_rank_shard(folder, info.rank, shard)

        for part in (prepare, write):
            cause = _disk_full(part)
            if dist_utils.any_rank([cause is not None], info)[0]:
                self._disk_full(step, folder, cause)
        if info.is_main:
            self.writer.submit(lambda: self._write(step, None, main, facts, prepare=False))

    def _write(self, step: int, shard: Any, main: Any, facts: dict[str, Any], *, prepare: bool) -> None:
        """The writer's part: files, manifest, COMPLETE, rename, prune (rank 0); on failure the partial
        folder is removed and the error says what is intact (disk full: CheckpointDiskFull)."""
        folder = ckpt.partial_dir(self.run_dir, step)
        try:
            if prepare:
                ckpt.prepare_partial(self.run_dir, step)
            if shard is not None:
                write_rank_shard(folder, self.info.rank, shard)
            if main is not None:
                write_main_state(folder, main)
                ckpt.publish(self.run_dir, step, facts)
                ckpt.prune(
                    self.run_dir,
                    self.cfg.checkpoint_keep,
                    self.cfg.checkpoint_keep_best,
                    facts["best_metric"],
                )
        except (OSError, RuntimeError) as err:
            shutil.rmtree(folder, ignore_errors=True)
            cause = ckpt.disk_full_cause(err)
            if cause is None:
                raise
            needed = self._checkpoint_bytes(
                snapshot_bytes(main) + snapshot_bytes(shard) * self.info.world_size
            )
            raise ckpt.CheckpointDiskFull(ckpt.disk_full_message(self.run_dir, step, needed, cause)) from None

    @staticmethod
    def _kind_on_disk(folder: Path) -> str | None:
        try:
            return json.loads((folder / ckpt.MANIFEST).read_text()).get("kind")
        except (OSError, json.JSONDecodeError):
            return None

    def _rolling_due(self) -> bool:
        """Rank 0's clock decides; the loop shares the answer with the other ranks' stop flags."""
        return self.info.is_main and self.rolling.due(self.progress.step)

    def _writer_flags(self) -> list[bool]:
        """[the last save failed, it failed for a full disk] without waiting (rank 0's writer publishes)."""
        error = self.writer.error if self.writer.failed else None
        return [error is not None, isinstance(error, ckpt.CheckpointDiskFull)]

    def _raise_writer_failure(self, failed: bool, disk_full: bool) -> None:
        """Stop every rank when a background save failed: the rank that has the error raises it."""
        if not failed:
            return
        try:
            self.writer.wait()  # raises the error where it happened
        except BaseException as err:
            dist_utils.raised_on_every_rank(err)
            raise
        previous = ckpt.find_complete(self.run_dir, warn=False)
        intact = (
            f"{previous[-1].path} is the newest complete checkpoint" if previous else "no checkpoint exists"
        )
        message = f"rank 0 could not write a checkpoint (its log has the error); {intact}"
        error = (ckpt.CheckpointDiskFull if disk_full else ckpt.CheckpointWriteFailed)(message)
        raise dist_utils.raised_on_every_rank(error)

    def _settle_writer(self) -> None:
        """Wait for the save in flight; when it failed, every rank stops (see `_raise_writer_failure`)."""
        self.writer.join()
        self._raise_writer_failure(*dist_utils.any_rank(self._writer_flags(), self.info))

    def _disk_full(self, step: int, folder: Path, cause: OSError | None) -> None:
        """Remove the partial save and stop with one line (exit DISK_FULL); older checkpoints stay."""
        needed = self._checkpoint_bytes(
            snapshot_bytes(self._main_payload()) + snapshot_bytes(self.carries) * self.info.world_size
        )
        if self.info.is_main:
            shutil.rmtree(folder, ignore_errors=True)
        dist_utils.barrier(self.info)
        cause = cause or OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # another rank's failure
        error = ckpt.CheckpointDiskFull(ckpt.disk_full_message(self.run_dir, step, needed, cause))
        raise dist_utils.raised_on_every_rank(error) from None

    def _checkpoint_bytes(self, estimate: int) -> int:
        """About how much one checkpoint takes: the newest complete one, else `estimate`."""
        previous = ckpt.find_complete(self.run_dir, warn=False)
        return ckpt.checkpoint_bytes(previous[-1]) if previous else estimate

    def _saved_weights(self) -> list[torch.Tensor]:
        """The weights a checkpoint holds (live and EMA): never saved when not finite."""
        c = self.components
        ema = list(c.ema.shadow.values()) if c.ema is not None else []
        return [*c.model.state_dict().values(), *ema]

    def _main_payload(self) -> dict[str, Any]:
        c = self.components
        return {
            "progress": vars(self.progress).copy(),
            "model": c.model.state_dict(),
            "ema": c.ema.state_dict() if c.ema is not None else None,
            "optimizers": {o.name: o.optimizer.state_dict() for o in c.optimizers},
            "train_loader": c.train_loader.state_dict(),
            "evaluators": [ev.state_dict() for ev in c.evaluators],
            "config": as_dict(self.cfg),
        }

    def close(self) -> None:
        """Wait for the save in flight (raising its failure), then close the metric sinks."""
        try:
            self.writer.wait()
        finally:
            if self.metrics is not None:
                self.metrics.close()
