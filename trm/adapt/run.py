"""Adapt a model to a task file: build its demonstration set, give its identifiers rows, train, checkpoint.

`OUT` holds `inputs/` (the staged task file), `dataset/` (the builder's output), the trainer's run files
(`step_N/` checkpoints, metrics, run.json) and `adapt.json` (what was done). The run is an ordinary
training run on `dataset/`, so `python -m trm.eval OUT/step_N`, `python -m trm package kaggle OUT` and the
bundle's inference take its checkpoints as they are; the same command again resumes it bit-exactly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from trm import exit_codes, runlock
from trm.adapt.batch import batch_for, train_within_memory
from trm.adapt.rows import initial_rows, trained_tasks, trained_warning
from trm.adapt.tasks import (
    SelectedTasks,
    StagedTasks,
    build_demonstrations,
    default_solutions,
    only_unseen,
    select_tasks,
    write_tasks,
)
from trm.data.grid_dataset import DatasetInTheWay
from trm.errors import TRMError
from trm.io import atomic_write_json
from trm.model.upstream import PUZZLE_EMB_KEY
from trm.training.config import TrainConfig

log = logging.getLogger(__name__)

TRAIN_CHOICES = ("all", "embeddings")
# The step cap when only --minutes bounds the run (the LR schedule's length; the minutes stop it first).
MINUTES_ONLY_STEPS = 100_000
WARMUP_SHARE = 10  # warm-up: a tenth of the steps (at most the source run's warm-up)
MINUTES_ONLY_WARMUP = 100
SUMMARY = "adapt.json"
ADAPT_KIND = "adaptation"  # the kind in the run directory's creation marker (trm.safe_remove)
STAGING_PREFIX, STAGING_SUFFIX = ".inputs.", ".partial"  # the task file's staging folder in OUT


@dataclass
class AdaptSource:
    """What adaptation starts from: the run's config, its weights, the identifiers of its table's rows,
    and the row unseen identifiers start from (None without a puzzle table)."""

    config: TrainConfig
    weights: dict[str, torch.Tensor]
    identifiers: list[str] | None
    mean_row: torch.Tensor | None
    description: str


@dataclass(frozen=True)
class AdaptSettings:
    """The budget (steps and/or minutes; 0 steps writes the unadapted start), what trains, the builder's
    augmentation count and seed, and trainer `key=value` overrides on top of the adaptation config."""

    steps: int | None = None
    minutes: float | None = None
    train: str = "all"
    num_aug: int = 1000
    seed: int = 42
    overrides: tuple[str, ...] = ()
    progress: bool = True

    def check(self, prefix: str = "") -> None:
        """TRMError naming the flag (`--{prefix}steps` …: the command's own names) of a bad value."""
        steps, minutes = f"--{prefix}steps", f"--{prefix}minutes"
        if self.steps is None and self.minutes is None:
            raise TRMError(f"give the adaptation a budget: {steps} N and/or {minutes} M")
        if self.steps is not None and self.steps < 0:
            raise TRMError(f"{steps} {self.steps}: must be >= 0 (0 writes the unadapted starting point)")
        if self.minutes is not None and not self.minutes > 0:
            raise TRMError(f"{minutes} {self.minutes}: must be positive (or left out)")
        if self.train not in TRAIN_CHOICES:
            raise TRMError(f"--{prefix}train {self.train!r}: use one of {', '.join(TRAIN_CHOICES)}")
        if self.num_aug < 0:
            raise TRMError(f"--{prefix}num-aug {self.num_aug}: must be >= 0")


@dataclass
class AdaptResult:
    """The adapted checkpoint and what the run did."""

    out: Path
    checkpoint: Path
    dataset: Path
    step: int
    stop_reason: str | None
    tasks: int
    skipped: dict[str, str]
    rows_copied: int
    rows_from_mean: int
    seconds: float
    notes: list[str] = field(default_factory=list)
    trained_tasks: tuple[str, ...] = ()
    """Tasks whose rows started from trained rows: the source trained on their demonstrations."""
    batch: dict[str, Any] | None = None
    """The micro-batch it trained with, why, and its out-of-memory step-downs (trm.adapt.batch.AdaptBatch)."""


def adaptation_config(source: TrainConfig, dataset: Path, out: Path, settings: AdaptSettings) -> TrainConfig:
    """The source run's config made into the adaptation run (then the user's overrides on top).

    Only the demonstration set trains (no evaluation; the evaluators stay for `trm.eval`), EMA is off (an
    EMA at 0.999 would still be mostly the unadapted weights after a few hundred steps), `train=embeddings`
    freezes all but the puzzle table, the warm-up is a tenth of the steps (at most the source's), and
    `epochs` (one pass) is set so that the pass yields every step's batch and the schedule covers them
    (`adaptation_epochs`).
    """
    from trm.model.registry import spec_of
    from trm.training.config import validate, with_overrides

    steps = MINUTES_ONLY_STEPS if settings.steps is None else max(settings.steps, 1)
    warmup = MINUTES_ONLY_WARMUP if settings.steps is None else max(steps // WARMUP_SHARE, 1)
    cfg = dataclasses.replace(
        source,
        data_paths=[str(dataset)],
        data_paths_test=[],
        load_checkpoint=None,
        checkpoint_path=str(out),
        run_name=f"adapt-{out.name}",
        freeze_weights=settings.train == "embeddings",
        ema=False,
        max_steps=steps,
        eval_interval=None,
        min_eval_interval=0,
        lr_warmup_steps=min(source.lr_warmup_steps, warmup),
    )
    cfg = with_overrides(cfg, list(settings.overrides), spec_of(cfg.arch).name)
    cfg.epochs = adaptation_epochs(dataset, cfg.global_batch_size, cfg.max_steps or steps)
    cfg.eval_interval = None
    validate(cfg)
    return cfg


def adaptation_epochs(dataset: Path, global_batch_size: int, steps: int) -> int:
    """The fewest epochs in the adaptation's one pass that yield `steps` full batches whatever puzzles the
    seed draws (the loader drops a pass's last partial batch, and a batch's truncated last visit wastes
    rows: trm.data.loader.epochs_for_batches) and whose schedule length (the trainer's `total_steps`, which
    also caps the run) is at least `steps`. Reads the train split's index arrays only (the loader that
    trains verifies the dataset)."""
    from trm.data.formats import SplitData
    from trm.data.loader import epochs_for_batches, pass_bounds
    from trm.data.manifest import read_manifest
    from trm.training.throughput import total_steps

    split = SplitData(dataset, "train", read_manifest(dataset)["form"])
    meta = split.metadata
    per_epoch = meta.total_groups * meta.mean_puzzle_examples
    epochs = max(
        epochs_for_batches(pass_bounds([split]), global_batch_size, steps, dataset),
        math.ceil(steps * global_batch_size / per_epoch),
    )
    while total_steps(epochs, meta.total_groups, meta.mean_puzzle_examples, global_batch_size) < steps:
        epochs += 1  # float rounding of the estimate
    return epochs


def _initial_weights(source: AdaptSource, names: list[str]) -> tuple[dict[str, torch.Tensor], Any]:
    """The source weights with a puzzle table of one row per dataset identifier (see trm.adapt.rows)."""
    weights = dict(source.weights)
    table = weights.get(PUZZLE_EMB_KEY)
    if table is None or source.mean_row is None:
        return weights, None
    rows = initial_rows(names, table, source.identifiers, source.mean_row)
    weights[PUZZLE_EMB_KEY] = rows.table
    return weights, rows


def adapt(
    source: AdaptSource,
    challenges: str | Path,
    out: str | Path,
    settings: AdaptSettings,
    *,
    solutions: str | Path | None = None,
    unseen_only: bool = False,
) -> AdaptResult:
    """Adapt `source` to the tasks of `challenges` in `out` (resuming a run already there); see the module
    doc. `unseen_only` leaves out the tasks that have trained rows in the source (`skipped`). Under
    torchrun, rank 0 builds the dataset and every rank trains. Raises TRMError on bad input; a signal stop
    raises `AdaptationStopped` (exit SAVED_RETRY: the same call resumes)."""
    from trm import distributed as dist_utils
    from trm.data.loader import PuzzleLoader
    from trm.distributed import initialize
    from trm.training.checkpointing.layout import find_complete
    from trm.training.loop import Trainer
    from trm.training.signals import DEADLINE

    started = time.monotonic()
    settings.check()
    if unseen_only and source.identifiers is None and source.mean_row is not None:
        raise TRMError(
            f"{source.description}: the names of its puzzle rows are unknown (no identifiers.json in its run's "
            "single data path), so the tasks without trained rows cannot be told apart; pass "
            "data_paths=[DATASET] (the dataset it trained on) or leave out the unseen-only flag"
        )
    out, challenges = Path(out), Path(challenges)
    solutions = Path(solutions) if solutions is not None else default_solutions(challenges)
    dataset = out / "dataset"
    with initialize(source.config.device) as info, contextlib.ExitStack() as held:
        staged = None
        if info.is_main:
            selected = select_tasks(challenges, solutions)  # bad tasks stop before a file is written
            if unseen_only:
                selected = only_unseen(
                    selected, trained_tasks(list(selected.tasks), source.identifiers), challenges
                )
            claim_out(out, [challenges, *([solutions] if solutions is not None else [])])
            # The run lock, taken once `out` is known to be an adaptation's and held until adapt.json is
            # written: a second adaptation (or `trm best`) on the same folder is refused before it writes.
            advice = "Wait for it to end or stop it (SIGTERM saves; the same command resumes), or choose another --out"
            held.enter_context(runlock.owned(out, "adaptation", advice))
            staged = stage_and_build(selected, out, settings)
        staged = dist_utils.broadcast_object(staged, info)
        names = json.loads((dataset / "identifiers.json").read_text(encoding="utf-8"))
        cfg = adaptation_config(source.config, dataset, out, settings)
        weights, rows = _initial_weights(source, names)

        def attempt(cfg: TrainConfig) -> tuple[int, Trainer]:
            train = PuzzleLoader(
                [dataset],
                "train",
                global_batch_size=cfg.global_batch_size,
                rank=info.rank,
                world_size=info.world_size,
                seed=cfg.seed,
                epochs_per_iter=cfg.epochs,
            )
            trainer = Trainer.create(cfg, info, (train, None), lambda: (weights, source.description))
            trainer.show_progress = settings.progress
            if settings.minutes is not None:
                trainer.deadline = started + settings.minutes * 60.0
            try:
                if settings.steps == 0:
                    if trainer.resumed_from is None:
                        trainer.save_checkpoint()
                    return exit_codes.OK, trainer
                return trainer.train(), trainer
            finally:
                trainer.close()

        batch = batch_for(cfg, dataset, settings.overrides, info.device, info.world_size)
        log.info("adaptation batch: %s", batch.describe())
        code, trainer, batch = train_within_memory(attempt, cfg, batch)
        if code == exit_codes.SAVED_RETRY and trainer.stop_reason != DEADLINE:
            raise AdaptationStopped(
                f"adaptation stopped by {trainer.stop_reason or 'a stop request'} at step "
                f"{trainer.progress.step} (saved in {out}); run the same command again to resume"
            )
        newest = find_complete(out)[-1]
        result = AdaptResult(
            out=out,
            checkpoint=newest.path,
            dataset=dataset,
            step=newest.step,
            stop_reason=trainer.stop_reason,
            tasks=len(staged.kept),
            skipped=staged.skipped,
            rows_copied=rows.copied if rows else 0,
            rows_from_mean=rows.from_mean if rows else 0,
            seconds=time.monotonic() - started,
            trained_tasks=rows.trained_tasks if rows else (),
            batch=batch.to_dict(),
        )
        result.notes += batch.notes()
        if rows is None:
            result.notes.append("the model has no puzzle embedding: only its weights adapt")
        if result.trained_tasks:
            result.notes.append(trained_warning(len(result.trained_tasks), result.tasks))
        if trainer.stop_reason == DEADLINE:
            result.notes.append(f"--minutes {settings.minutes} ran out at step {newest.step}")
        if info.is_main:
            _write_summary(result, settings, source)
    return result


def claim_out(out: Path, sources: list[Path]) -> None:
    """Make `out` this adaptation's run directory: a new or empty folder (marked as an adaptation's), or
    one an earlier adaptation marked (resumed). Anything else is refused before a file is written."""
    from trm.safe_remove import MARKER, clear_killed_marker, read_marker, write_marker

    if out.is_symlink():  # checked first: every later check would follow it
        raise TRMError(
            f"--out {out}: it is a symbolic link (to {os.readlink(out)}); refusing to follow it, nothing was "
            "changed. Pass the folder's real path or a new folder"
        )
    for source in sources:
        if out.resolve() == source.resolve() or out.resolve() in source.resolve().parents:
            raise TRMError(f"--out {out}: it holds {source}, which this command reads; choose a new folder")
    if out.exists() and not out.is_dir():
        raise TRMError(f"--out {out}: it is a file, not a folder; choose a new or empty folder")
    clear_killed_marker(out)  # an adaptation killed while it claimed the folder
    if out.is_dir() and any(out.iterdir()):
        record = read_marker(out)
        if record is None or record.get("kind") != ADAPT_KIND:
            raise TRMError(
                f"--out {out}: refusing to use it: it holds files an adaptation did not write (no {MARKER} "
                "marker of `trm adapt`); nothing was changed. Choose a new or empty folder (an adaptation "
                "folder itself is resumed)"
            )
        return
    out.mkdir(parents=True, exist_ok=True)
    write_marker(out, tool="trm adapt", kind=ADAPT_KIND)


def stage_and_build(selected: SelectedTasks, out: Path, settings: AdaptSettings) -> StagedTasks:
    """Stage the task file in a temporary folder inside `out`, build (or reuse) `out/dataset` from it, and
    only then put the staged files at `out/inputs/`: a refused dataset leaves the earlier inputs as they were."""
    import tempfile

    from trm.safe_remove import remove_own_temp

    inputs = out / "inputs"
    # Staging folders of an adaptation killed here before: this one holds the run lock, so no other uses them.
    for leftover in out.glob(f"{STAGING_PREFIX}*{STAGING_SUFFIX}"):
        remove_own_temp(leftover)
    tmp = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, suffix=STAGING_SUFFIX, dir=out))
    try:
        staged = write_tasks(selected, tmp)
        dataset, reused = out / "dataset", (out / "dataset").exists()
        try:
            build_demonstrations(
                staged, dataset, num_aug=settings.num_aug, seed=settings.seed, progress=settings.progress
            )
        except DatasetInTheWay as err:
            if not reused:
                raise
            # The builder's own fix (--overwrite, --output-dir) names flags adapt does not have: give adapt's.
            raise TRMError(
                f"--out {out}: refusing to resume it: {err.problem} (an adaptation to another task "
                "file, or with other --num-aug/--seed, or damaged since); nothing was changed. Pass the task "
                "file and flags it was started with, or choose a new --out"
            ) from None
        old = out / ".inputs.old"
        if inputs.exists():
            remove_own_temp(old)
            os.replace(inputs, old)
        os.replace(tmp, inputs)
        remove_own_temp(old)
    except BaseException:
        remove_own_temp(tmp)
        raise
    return dataclasses.replace(staged, prefix=inputs / staged.prefix.name)


class AdaptationStopped(TRMError):
    """A signal stopped the adaptation after saving; the same command resumes it."""

    exit_code = exit_codes.SAVED_RETRY


def _write_summary(result: AdaptResult, settings: AdaptSettings, source: AdaptSource) -> None:
    summary = {
        "source": source.description,
        "settings": dataclasses.asdict(settings),
        "checkpoint": result.checkpoint.name,
        "step": result.step,
        "stop_reason": result.stop_reason,
        "tasks": result.tasks,
        "skipped": result.skipped,
        "rows": {"copied_from_trained": result.rows_copied, "from_mean": result.rows_from_mean},
        "trained_tasks": list(result.trained_tasks),
        "seconds": round(result.seconds, 3),
        "batch": result.batch,
        "notes": result.notes,
    }
    atomic_write_json(result.out / SUMMARY, summary)
