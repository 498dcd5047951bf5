"""A run's checkpoints: resuming or loading initial weights (`load`), when to save (the schedule), how
(snapshot, then write in the background), what is kept (retention), and how a failed save stops every rank.

The training loop uses `load` once, then after each step shares this rank's `flags` (a rolling save due,
the last background save's outcome) in its per-step flags (trm.training.step_flags) and hands the agreed
flags to `save`; it `wait`s for the save in flight where a run stops and `close`s at its end. Everything
else is here.
A save snapshots the state to host memory (`trm.training.checkpointing.async_writer`) and hands the writing to one
writer thread (`checkpoint.asynchronous=false`: the same work inline). Every rank writes its shard, rank 0 the
rest, publishes atomically (trm.training.checkpointing.layout) and prunes to `checkpoint.keep` /
`checkpoint.keep_best`. A full disk (ENOSPC/EDQUOT) removes the partial save and raises
CheckpointDiskFull on every rank; any other failed background save raises on every rank at the next step.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import torch

import trm.training.checkpointing.layout as ckpt
from trm import distributed as dist_utils
from trm.distributed import DistInfo
from trm.safe_remove import remove_retired_checkpoint
from trm.training.builder import Components
from trm.training.checkpointing.async_writer import CheckpointWriter, HostBuffers, snapshot, snapshot_bytes
from trm.training.checkpointing.resume import InitialWeights, Resumed, load_initial, resume
from trm.training.checkpointing.rolling import RollingSchedule
from trm.training.checkpointing.state import write_main_state, write_rank_shard
from trm.training.config import TrainConfig, best_checkpoints_kept, ranking_metric, subset_on
from trm.training.step_flags import StepFlags, WriterFlags


class CheckpointContents(Protocol):
    """What a checkpoint holds, read from the run at the moment of a save (the Trainer provides it)."""

    def checkpoint_facts(self) -> dict[str, Any]:
        """The manifest's facts: step, config hash, world size, dataset… (trm.training.checkpointing.layout)."""
        ...

    def main_payload(self) -> dict[str, Any]:
        """Rank 0's state: progress, model, EMA, optimizers, loader, evaluators, config."""
        ...

    def rank_shard(self) -> dict[str, Any]:
        """This rank's ACT carries and RNG."""
        ...

    def saved_weights(self) -> list[torch.Tensor]:
        """The weights the checkpoint holds (live and EMA): never saved when not finite."""
        ...


def _disk_full(part: Callable[[], None]) -> OSError | None:
    """Run one part of a save; return the ENOSPC/EDQUOT behind its failure, re-raise any other error."""
    try:
        part()
    except (OSError, RuntimeError) as err:
        cause = ckpt.disk_full_cause(err)
        if cause is None:
            raise
        return cause
    return None


def kind_on_disk(folder: Path) -> str | None:
    """The `kind` (ckpt.EVAL / ckpt.ROLLING) of the checkpoint in `folder`, None when unreadable."""
    try:
        return json.loads((folder / ckpt.MANIFEST).read_text()).get("kind")
    except (OSError, json.JSONDecodeError):
        return None


class Checkpointer:
    """Owns a run's checkpoints: its start (resume or initial weights), the rolling schedule, the writer
    thread and its host buffers, retention."""

    def __init__(
        self,
        cfg: TrainConfig,
        info: DistInfo,
        run_dir: Path,
        contents: CheckpointContents,
        check_weights: Callable[[list[torch.Tensor], int], None],
    ) -> None:
        self.cfg = cfg
        self.info = info
        self.run_dir = run_dir
        self.contents = contents
        self.check_weights = check_weights  # raises (on every rank) when the weights are not finite
        self.every_eval = cfg.checkpoint.every_eval
        self.keep = cfg.checkpoint.keep
        # With a subset the ranking is its score, and the best.top_k candidates by it must survive pruning
        # until the run's end evaluates them fully.
        self.keep_best = best_checkpoints_kept(cfg)
        self.best_metric = ranking_metric(cfg)
        self.top_k = cfg.best.top_k if subset_on(cfg) else None
        self.rolling = RollingSchedule(cfg.checkpoint.every_minutes, cfg.checkpoint.every_steps)
        self.writer = CheckpointWriter(asynchronous=cfg.checkpoint.asynchronous)
        # Host memory for the snapshots (pinned on CUDA), kept from one save to the next: only the first
        # save pays for allocating it (and its page faults).
        self._buffers = (HostBuffers(), HostBuffers())

    # ---------------------------------------------------------------- load
    def load(self, components: Components, initial_weights: InitialWeights | None = None) -> Resumed | None:
        """Restore `components` from the run directory's newest complete checkpoint (its folder, progress
        and this rank's carries are returned); when there is none, load the initial weights
        (`initial_weights()` when given, else `load_checkpoint`) and return None."""
        resumed = resume(self.run_dir, self.info, components, self.contents.checkpoint_facts())
        if resumed is None:
            load_initial(self.cfg, self.info, components, initial_weights)
        return resumed

    # ---------------------------------------------------------------- schedule
    def flags(self, step: int) -> tuple[bool, WriterFlags]:
        """This rank's part of the step flags, read without waiting: whether a rolling checkpoint is due
        (rank 0's clock decides; the loop shares the answer with the other ranks) and how the last
        background save went."""
        return self.info.is_main and self.rolling.due(step), self._writer_flags()

    # ---------------------------------------------------------------- save
    def save(
        self,
        step: int,
        eval_metrics: dict[str, float] | None = None,
        *,
        replace: bool = False,
        pass_end: bool = False,
        shared: StepFlags | None = None,
    ) -> None:
        """Snapshot the state to host memory and hand it to the writer.

        `eval_metrics`: the metrics of an evaluation at `step` (an evaluation checkpoint), else None.
        A complete step_N/ already there is kept unless `replace` (the final save marks the run finished)
        or this save follows an evaluation at step N and the one there does not (it gains the metrics).
        `pass_end`: the save after a pass's evaluation, made only with `checkpoint.every_eval`.
        `shared`: a step's flags as every rank agreed them: a failed background save stops every rank
        here, and the save is made only when some rank wants one (a stop, SIGUSR1 or a due rolling one).
        """
        if shared is not None:
            self._raise_writer_failure(shared.writer)
            if not shared.wants_save:
                return
        if pass_end and not self.every_eval:
            return
        self.wait()  # at most one save in flight; an earlier failure stops every rank here
        info = self.info
        self.check_weights(self.contents.saved_weights(), step)
        final = self.run_dir / f"step_{step}"
        evaluated = eval_metrics is not None
        upgrade = evaluated and kind_on_disk(final) != ckpt.EVAL
        if (final / ckpt.COMPLETE).is_file() and not (replace or upgrade):
            return
        self.rolling.saved()
        shard = snapshot(self.contents.rank_shard(), self._buffers[0])
        main = snapshot(self.contents.main_payload(), self._buffers[1]) if info.is_main else None
        facts = self.contents.checkpoint_facts()
        facts["kind"] = ckpt.EVAL if evaluated else ckpt.ROLLING
        facts["eval_metrics"] = dict(eval_metrics) if eval_metrics is not None else None
        facts["best_metric"] = self.best_metric
        if self.top_k is not None:
            facts["best_top_k"] = self.top_k  # `python -m trm best` re-evaluates this many fully
        if not info.distributed:
            self.writer.submit(lambda: self._write(step, shard, main, facts, prepare=True))
        else:
            self._write_shards_then_submit(step, shard, main, facts)
        if not self.writer.asynchronous:
            self.wait()  # checkpoint.asynchronous=false: every rank learns the outcome now

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
                self._disk_full(step, folder, cause, shard["carry"])
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
                ckpt.prune(self.run_dir, self.keep, self.keep_best, facts["best_metric"])
        except (OSError, RuntimeError) as err:
            remove_retired_checkpoint(folder)
            cause = ckpt.disk_full_cause(err)
            if cause is None:
                raise
            needed = self._checkpoint_bytes(
                snapshot_bytes(main) + snapshot_bytes(shard) * self.info.world_size
            )
            raise ckpt.CheckpointDiskFull(ckpt.disk_full_message(self.run_dir, step, needed, cause)) from None

    # ---------------------------------------------------------------- failures
    def _writer_flags(self) -> WriterFlags:
        """Whether the last save failed (and for a full disk), without waiting (rank 0's writer publishes)."""
        error = self.writer.error if self.writer.failed else None
        return WriterFlags(failed=error is not None, disk_full=isinstance(error, ckpt.CheckpointDiskFull))

    def _raise_writer_failure(self, flags: WriterFlags) -> None:
        """Stop every rank when a background save failed (`flags`: OR-ed over the ranks): the rank that
        has the error raises it, the others say rank 0 failed and which checkpoint is intact."""
        if not flags.failed:
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
        error = (ckpt.CheckpointDiskFull if flags.disk_full else ckpt.CheckpointWriteFailed)(message)
        raise dist_utils.raised_on_every_rank(error)

    def wait(self, *, raise_failure: bool = True) -> None:
        """Wait for the save in flight; when it failed, every rank stops (see `_raise_writer_failure`).
        `raise_failure=False` only waits (no collective): a run about to fail for another reason lets the
        save in flight finish first."""
        self.writer.join()
        if raise_failure:
            self._raise_writer_failure(self._writer_flags().any_rank(self.info))

    def _disk_full(self, step: int, folder: Path, cause: OSError | None, carry: Any) -> None:
        """Remove the partial save and stop with one line (exit DISK_FULL); older checkpoints stay."""
        needed = self._checkpoint_bytes(
            snapshot_bytes(self.contents.main_payload()) + snapshot_bytes(carry) * self.info.world_size
        )
        if self.info.is_main:
            remove_retired_checkpoint(folder)
        dist_utils.barrier(self.info)
        cause = cause or OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # another rank's failure
        error = ckpt.CheckpointDiskFull(ckpt.disk_full_message(self.run_dir, step, needed, cause))
        raise dist_utils.raised_on_every_rank(error) from None

    def _checkpoint_bytes(self, estimate: int) -> int:
        """About how much one checkpoint takes: the newest complete one, else `estimate`."""
        previous = ckpt.find_complete(self.run_dir, warn=False)
        return ckpt.checkpoint_bytes(previous[-1]) if previous else estimate

    def close(self) -> None:
        """The end of a run: wait for the save in flight and raise its failure in this thread."""
        self.writer.wait()
