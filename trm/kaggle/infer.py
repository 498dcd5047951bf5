"""Offline inference for Kaggle: one process, CPU or one GPU, no process group.

Builds the augmented test set in memory, runs every row for the full ACT schedule (or until it halts with
`early_halt`), votes with the evaluator's functions and writes a submission with two attempts for every
test input. Rows run round by round (every task's k-th augmentation before any (k+1)-th), so a
`max_minutes` budget that runs out leaves every task with about the same number of votes. `infer --ranks N`
(trm.kaggle.sharded) runs this per task group in one process per GPU.
"""

from __future__ import annotations

import io
import json
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from trm.errors import TRMError
from trm.evaluation.voting import VoteTable, build_submission, record_predictions, validate_submission
from trm.io import atomic_write_bytes, atomic_write_json
from trm.kaggle.bundle import load_bundle
from trm.kaggle.testset import TestSet, build_test_set, read_challenges, unseen_task_ids
from trm.oom import is_out_of_memory
from trm.safe_remove import check_file_replaceable

log = logging.getLogger(__name__)
# Rows per forward when --batch-size is not given: (CPU, CUDA). Attention over 916 positions is the
# memory cost, so CPU batches stay small.
DEFAULT_BATCH = (16, 256)


@dataclass
class InferenceReport:
    """What a run did (printed by the command, asserted by tests)."""

    tasks: int
    test_inputs: int
    rows_planned: int
    rows_run: int
    rounds_complete: int
    skipped: dict[str, str]
    seconds: float
    device: str
    stopped_by_budget: bool = False
    batch_size: int = 0
    notes: list[str] = field(default_factory=list)
    unseen_tasks: int = 0  # tasks without a trained puzzle row in the bundle
    trained_tasks: int = 0  # tasks with trained rows: the model trained on their demonstrations
    adapted: Any = None  # trm.adapt.run.AdaptResult when the model was adapted to the challenges first
    groups: list[dict[str, Any]] = field(default_factory=list)  # `--ranks/--groups`: how each group ended


def resolve_device(name: str) -> torch.device:
    """auto → cuda when available, else cpu; an explicit cuda without a GPU is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise TRMError(f"--device {name}: no CUDA GPU is visible; use --device cpu (or auto)")
    if not (name == "cpu" or name.startswith("cuda")):
        raise TRMError(f"--device {name}: use auto, cpu, cuda or cuda:N")
    return torch.device(name)


def predict_batch(
    model: Any, inputs: np.ndarray, embedding_ids: np.ndarray, device: torch.device
) -> tuple[np.ndarray, np.ndarray]:
    """Run a batch through every ACT step (until all slots halted); (preds uint8 [B, 900], q_halt [B]).
    Without early halting every slot halts at halt_max_steps: that many steps run and the halting flag is
    never read (no host sync between steps)."""
    batch = {
        "inputs": torch.from_numpy(inputs.astype(np.int32)).to(device),
        "puzzle_identifiers": torch.from_numpy(embedding_ids.astype(np.int32)).to(device),
    }
    with torch.inference_mode():
        carry = model.initial_carry(batch)
        fixed = model.eval_act_steps()
        for _ in range(fixed or model.config.halt_max_steps):
            carry, outputs = model(carry, batch)
            if fixed is None and bool(carry.halted.all()):
                break
        preds = outputs["logits"].argmax(dim=-1).to(torch.uint8).cpu().numpy()
        q_halt = outputs["q_halt_logits"].float().cpu().numpy()
    return preds, q_halt


def _save_predictions(path: Path, names: list[str], inputs: list, preds: list, q_halt: list) -> None:
    buffer = io.BytesIO()
    np.savez_compressed(
        buffer,
        identifiers=np.array(json.dumps(names)),
        inputs=np.concatenate(inputs) if inputs else np.zeros((0, 900), np.uint8),
        preds=np.concatenate(preds) if preds else np.zeros((0, 900), np.uint8),
        q_halt_logits=np.concatenate(q_halt) if q_halt else np.zeros(0, np.float32),
    )
    atomic_write_bytes(path, buffer.getvalue())


PREDICTION_ARRAYS = ("identifiers", "inputs", "preds", "q_halt_logits")  # what --save-predictions writes


def is_submission(path: Path) -> bool:
    """Whether `path` holds a submission in the format infer writes (`{task: [{"attempt_1": …}, …]}`)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(data, dict) and all(
        isinstance(entries, list)
        and all(isinstance(e, dict) and e and all(str(k).startswith("attempt_") for k in e) for e in entries)
        for entries in data.values()
    )


def is_predictions_file(path: Path) -> bool:
    """Whether `path` holds the arrays --save-predictions writes (an .npz of exactly PREDICTION_ARRAYS)."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
    except (OSError, zipfile.BadZipFile):
        return False
    return names == {f"{name}.npy" for name in PREDICTION_ARRAYS}


def run_inference(
    weights: str | Path,
    challenges: str | Path,
    out: str | Path,
    *,
    num_aug: int = 1000,
    batch_size: int | None = None,
    device: str = "auto",
    max_minutes: float | None = None,
    early_halt: bool = False,
    seed: int = 0,
    save_predictions: str | Path | None = None,
    progress: bool = True,
    adapt: Any = None,
    adapt_dir: str | Path | None = None,
) -> InferenceReport:
    """Write a Kaggle submission for `challenges` with the bundle at `weights`; see the module doc.

    `adapt` (trm.adapt.run.AdaptSettings): when some tasks have no trained row, first adapt the model to
    the file's demonstrations in `adapt_dir` (default: `adapt/` next to `out`) within its budget."""
    started = time.perf_counter()
    dev, batch_size = check_arguments(challenges, out, device, batch_size, max_minutes)
    if save_predictions is not None:
        check_file_replaceable(
            save_predictions,
            flag="--save-predictions",
            ours=is_predictions_file,
            what="an .npz of predictions written by infer",
            example="predictions.npz",
        )
    from trm.kaggle.package import local_bundle

    weights, source = local_bundle(weights, progress)  # hf://… → a bundle folder (see local_bundle)
    bundle = load_bundle(weights, dev, batch_size=batch_size, early_halt=early_halt)
    data = read_challenges(challenges)
    work = Path(adapt_dir) if adapt_dir is not None else Path(out).resolve().parent / "adapt"
    report, submission = infer_tasks(
        bundle,
        data,
        dev,
        num_aug=num_aug,
        batch_size=batch_size,
        early_halt=early_halt,
        seed=seed,
        max_minutes=max_minutes,
        started=started,
        save_predictions=save_predictions,
        progress=progress,
        adapt=adapt,
        adapt_challenges=challenges,
        adapt_dir=work,
    )
    atomic_write_json(out, submission, indent=None)
    report.seconds = time.perf_counter() - started
    if source is not None:
        report.notes.append(f"weights: {source['reference']} (bundle {weights})")
    return report


def check_arguments(
    challenges: str | Path, out: str | Path, device: str, batch_size: int | None, max_minutes: float | None
) -> tuple[torch.device, int]:
    """The device and batch size of a run; TRMError naming the flag of a bad value."""
    dev = resolve_device(device)
    if batch_size is None:
        batch_size = DEFAULT_BATCH[dev.type == "cuda"]
    if batch_size < 1:
        raise TRMError(f"--batch-size {batch_size}: must be at least 1")
    if Path(out).resolve() == Path(challenges).resolve():
        raise TRMError(f"--out {out} is the --challenges file: choose another --out (e.g. submission.json)")
    check_file_replaceable(
        out, flag="--out", ours=is_submission, what="a submission written by infer", example="submission.json"
    )
    if max_minutes is not None and max_minutes <= 0:
        raise TRMError(f"--max-minutes {max_minutes}: must be positive (or omit it for no limit)")
    return dev, batch_size


def infer_tasks(
    bundle: Any,
    data: dict[str, Any],
    dev: torch.device,
    *,
    num_aug: int,
    batch_size: int,
    early_halt: bool,
    seed: int,
    max_minutes: float | None,
    started: float,
    save_predictions: str | Path | None,
    progress: bool,
    adapt: Any = None,
    adapt_challenges: str | Path | None = None,
    adapt_dir: Path | None = None,
) -> tuple[InferenceReport, dict[str, Any]]:
    """Infer the tasks `data` (adapting first, in `adapt_dir`, to the file `adapt_challenges` that holds
    them, when `adapt` is given and tasks lack rows); the report and the validated submission.
    `max_minutes` counts from `started`."""
    unseen = unseen_task_ids(data, bundle.identifiers)
    adapted = None
    if unseen and adapt is not None:
        from trm.kaggle.adapt import adapt_bundle

        log.info(
            "%d of %d tasks have no trained row: adapting to the file's demonstrations",
            len(unseen),
            len(data),
        )
        if adapt_challenges is None or adapt_dir is None:
            raise TRMError(
                "adaptation needs the challenges file and its folder (adapt_challenges, adapt_dir)"
            )
        bundle, adapted = adapt_bundle(
            bundle, adapt_challenges, adapt_dir, adapt, dev, batch_size=batch_size, early_halt=early_halt
        )
    elif unseen:
        log.warning(unseen_warning(len(unseen), len(data)))
    test_set = build_test_set(
        data, num_aug=num_aug, identifiers=bundle.identifiers, unseen_id=bundle.unseen_id, seed=seed
    )
    table = VoteTable()
    report = _run_rows(
        bundle.model, test_set, table, dev, batch_size, max_minutes, started, save_predictions, progress
    )
    report.unseen_tasks, report.adapted = len(unseen), adapted
    report.trained_tasks = len(data) - len(unseen)
    if adapted is not None:
        report.notes += [f"adaptation: {note}" for note in adapted.notes]
    if unseen and adapted is None:
        report.notes.append(unseen_warning(len(unseen), len(data)))
    submission = build_submission(test_set.test_puzzles, table, attempts=2)
    validate_submission(submission, test_set.test_puzzles, attempts=2)
    report.seconds = time.perf_counter() - started
    return report, submission


def unseen_warning(unseen: int, total: int) -> str:
    """The line inference prints when tasks have no trained row and no adaptation ran."""
    return (
        f"{unseen} of {total} task(s) have no trained puzzle-embedding row: they use the bundle's mean row, "
        "the model never sees their demonstrations and they score about zero; pass --adapt-minutes M "
        "(test-time training on their demonstrations) to adapt first"
    )


def _run_rows(
    model: Any,
    test_set: TestSet,
    table: VoteTable,
    dev: torch.device,
    batch_size: int,
    max_minutes: float | None,
    started: float,
    save_predictions: str | Path | None,
    progress: bool,
) -> InferenceReport:
    rows = test_set.rows(test_set.max_variants)
    budget = None if max_minutes is None else max_minutes * 60.0
    report = InferenceReport(
        tasks=len(test_set.test_puzzles),
        test_inputs=sum(len(t["test"]) for t in test_set.test_puzzles.values()),
        rows_planned=len(rows),
        rows_run=0,
        rounds_complete=0,
        skipped=test_set.skipped,
        seconds=0.0,
        device=str(dev),
    )
    saved: tuple[list, list, list, list] = ([], [], [], [])
    bar = tqdm(total=len(rows), desc="infer", unit="row", disable=not progress, file=sys.stderr)
    per_row = 0.0  # seconds per row, measured
    pos = 0
    try:
        while pos < len(rows):
            chunk = rows[pos : pos + batch_size]
            if budget is not None and per_row > 0:
                left = budget - (time.perf_counter() - started)
                if left < per_row * len(chunk) * 1.1 + 5.0:
                    report.stopped_by_budget = True
                    break
            tasks = [test_set.tasks[t] for t, _, _ in chunk]
            inputs = np.stack([task.inputs[k, j] for task, (_, k, j) in zip(tasks, chunk, strict=True)])
            emb = np.array([task.embedding_ids[k] for task, (_, k, _) in zip(tasks, chunk, strict=True)])
            names = [task.names[k] for task, (_, k, _) in zip(tasks, chunk, strict=True)]
            t0 = time.perf_counter()
            try:
                preds, q_halt = predict_batch(model, inputs, emb, dev)
            except (RuntimeError, torch.cuda.OutOfMemoryError) as err:
                if not is_out_of_memory(err) or batch_size == 1:
                    raise
                batch_size //= 2
                report.notes.append(f"out of memory: batch size lowered to {batch_size}")
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
                continue
            elapsed = time.perf_counter() - t0
            rate = elapsed / len(chunk)
            per_row = rate if per_row == 0 else 0.7 * per_row + 0.3 * rate
            conf = 1.0 / (1.0 + np.exp(-q_halt.astype(np.float64)))
            record_predictions(table, test_set.test_puzzles, names, inputs, preds, conf)
            if save_predictions is not None:
                for store, value in zip(saved, (names, inputs, preds, q_halt), strict=True):
                    store.append(value)
            pos += len(chunk)
            bar.update(len(chunk))
    finally:
        bar.close()
    report.rows_run = pos
    report.batch_size = batch_size
    report.rounds_complete = _complete_rounds(test_set, pos)
    if report.stopped_by_budget:
        report.notes.append(
            f"--max-minutes reached: ran {pos} of {len(rows)} rows; every task got at least "
            f"{report.rounds_complete} augmentation(s)"
        )
    if save_predictions is not None:
        names_flat = [n for group in saved[0] for n in group]
        _save_predictions(Path(save_predictions), names_flat, saved[1], saved[2], saved[3])
    return report


def _complete_rounds(test_set: TestSet, rows_run: int) -> int:
    """How many augmentation rounds every task (that has that many variants) received in full."""
    per_round = np.zeros(test_set.max_variants, dtype=np.int64)
    for task in test_set.tasks:
        per_round[: len(task.names)] += task.inputs.shape[1]
    return int((np.cumsum(per_round) <= rows_run).sum())
