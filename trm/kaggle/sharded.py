"""`infer --ranks N`: adaptation and inference on every GPU, task groups split across rank processes.

The coordinator (the `infer` process) splits the challenges into groups (trm.kaggle.groups), writes each
group's tasks and a job file into the work folder, starts one rank process per GPU (trm.kaggle.ranks) and
waits for them until the budget's end plus `WAIT_GRACE_S`. Each rank runs its groups one after the other:
adapt the group's tasks without trained rows (its own adaptation run, `group-K/`), infer its tasks, and
write the group's per-task attempts atomically (`groups/group-K.json`) before starting the next group.
The coordinator merges the groups' attempts into submission.json (atomically). A group without a result
(its rank failed, was killed, or ran out of time) gets the un-adapted bundle's predictions, computed by the
coordinator within `FALLBACK_MINUTES`, and the log says which tasks and why: the other groups keep their work.

Work folder (`--adapt-dir`, default `adapt/` next to --out): `job.json`, `ranks.json` (process ids while
running, outcomes after), `ranks/rank-R.log`, `groups/group-K_challenges.json`, `groups/group-K.json`,
`group-K/` (trm adapt's run folder of the group: resumed by the same command). Results carry the run's id,
so a result left by an earlier run is never merged.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trm.errors import TRMError
from trm.evaluation.voting import validate_submission
from trm.io import atomic_write_json
from trm.kaggle.groups import groups_of_rank, split_tasks
from trm.kaggle.infer import InferenceReport, check_arguments, infer_tasks
from trm.kaggle.testset import read_challenges

log = logging.getLogger(__name__)

JOB, RANKS = "job.json", "ranks.json"
SHARDED_KIND = "sharded inference"  # the work folder's creation marker (trm.safe_remove)
WAIT_GRACE_S = 120.0  # past the budget's end, before the coordinator stops ranks still running
STOP_GRACE_S = 30.0  # SIGTERM to SIGKILL for a rank stopped at the deadline
FALLBACK_MINUTES = 5.0  # the coordinator's un-adapted inference of the groups without a result
MIN_MINUTES = 1 / 60


@dataclass(frozen=True)
class Job:
    """What every rank reads from job.json."""

    run_id: str
    weights: str
    work: str
    groups: list[list[str]]
    ranks: int
    device: str
    num_aug: int
    batch_size: int
    early_halt: bool
    seed: int
    deadline: float
    """Wall clock (time.time()) by which every rank has written its groups."""
    adapt: dict[str, Any] | None

    def settings(self) -> Any:
        from trm.adapt.run import AdaptSettings

        if self.adapt is None:
            return None
        return AdaptSettings(**{**self.adapt, "overrides": tuple(self.adapt["overrides"])})


def group_challenges(work: Path, index: int) -> Path:
    return work / "groups" / f"group-{index}_challenges.json"


def group_result(work: Path, index: int) -> Path:
    return work / "groups" / f"group-{index}.json"


def claim_work(work: Path, sources: list[Path]) -> None:
    """Make `work` this command's folder: new, empty, or marked by an earlier `infer --ranks`."""
    from trm.safe_remove import MARKER, clear_killed_marker, read_marker, write_marker

    for source in sources:
        if work.resolve() == source.resolve() or work.resolve() in source.resolve().parents:
            raise TRMError(f"--adapt-dir {work}: it holds {source}, which this command reads; choose another")
    if work.exists() and not work.is_dir():
        raise TRMError(f"--adapt-dir {work}: it is a file, not a folder; choose a new or empty folder")
    clear_killed_marker(work)  # an `infer --ranks` killed while it claimed the folder
    if work.is_dir() and any(work.iterdir()):
        record = read_marker(work)
        if record is None or record.get("kind") != SHARDED_KIND:
            raise TRMError(
                f"--adapt-dir {work}: refusing to use it: it holds files `infer --ranks/--groups` did not write "
                f"(no {MARKER} marker of that kind; a single-group adaptation folder is one of them); "
                "nothing was changed. Choose a new or empty folder"
            )
        return
    work.mkdir(parents=True, exist_ok=True)
    write_marker(work, tool="trm infer", kind=SHARDED_KIND)


# --- a rank -------------------------------------------------------------------------------------------


def run_rank(job: Job, rank: int, *, progress: bool = False) -> int:
    """Run rank `rank`'s groups in order, each result written as soon as it is done; 0 when all were."""
    from trm.kaggle.bundle import load_bundle

    work = Path(job.work)
    dev = torch.device(job.device)
    mine = groups_of_rank(len(job.groups), job.ranks, rank)
    settings = job.settings()
    adapt_left = None if settings is None or settings.minutes is None else settings.minutes
    failed = 0
    base = None
    for i, index in enumerate(mine):
        started, left = time.perf_counter(), len(mine) - i
        record: dict[str, Any] = {
            "run_id": job.run_id,
            "group": index,
            "rank": rank,
            "tasks": job.groups[index],
        }
        try:
            if base is None:
                base = load_bundle(job.weights, dev, batch_size=job.batch_size, early_halt=job.early_halt)
            group_settings = settings
            if settings is not None and adapt_left is not None:
                group_settings = dataclasses.replace(settings, minutes=max(adapt_left / left, MIN_MINUTES))
            report, submission = _run_group(job, index, base, dev, group_settings, left, progress)
            if report.adapted is not None and adapt_left is not None:
                adapt_left = max(adapt_left - report.adapted.seconds / 60.0, 0.0)
            record.update(status="done", submission=submission, report=_summary(report))
        except Exception as err:  # one group's failure must not cost the rank's other groups
            log.exception("group %d failed", index)
            failed += 1
            record.update(status="failed", error=f"{type(err).__name__}: {(str(err) or '-').splitlines()[0]}")
        record["seconds"] = round(time.perf_counter() - started, 3)
        atomic_write_json(group_result(work, index), record, indent=None)
        log.info("group %d: %s in %.1f s", index, record["status"], record["seconds"])
    return 1 if failed else 0


def _run_group(
    job: Job, index: int, base: Any, dev: torch.device, settings: Any, left: int, progress: bool
) -> tuple[InferenceReport, dict[str, Any]]:
    """Adapt and infer one group within an equal share of the rank's time left."""
    challenges = group_challenges(Path(job.work), index)
    share = max((job.deadline - time.time()) / left, 1.0)
    return infer_tasks(
        base,
        read_challenges(challenges),
        dev,
        num_aug=job.num_aug,
        batch_size=job.batch_size,
        early_halt=job.early_halt,
        seed=job.seed,
        max_minutes=share / 60.0,
        started=time.perf_counter(),
        save_predictions=None,
        progress=progress,
        adapt=settings,
        adapt_challenges=challenges,
        adapt_dir=Path(job.work) / f"group-{index}",
    )


def _summary(report: InferenceReport) -> dict[str, Any]:
    a = report.adapted
    return {
        "rows_run": report.rows_run,
        "rows_planned": report.rows_planned,
        "rounds_complete": report.rounds_complete,
        "stopped_by_budget": report.stopped_by_budget,
        "skipped": report.skipped,
        "unseen_tasks": report.unseen_tasks,
        "trained_tasks": report.trained_tasks,
        "notes": report.notes,
        "adapted": None
        if a is None
        else {
            "tasks": a.tasks,
            "step": a.step,
            "seconds": round(a.seconds, 3),
            "checkpoint": str(a.checkpoint),
        },
    }


# --- the coordinator ----------------------------------------------------------------------------------


def run_sharded(
    weights: str | Path,
    challenges: str | Path,
    out: str | Path,
    *,
    ranks: int,
    groups: int,
    num_aug: int = 1000,
    batch_size: int | None = None,
    device: str = "auto",
    max_minutes: float | None = None,
    early_halt: bool = False,
    seed: int = 0,
    progress: bool = True,
    adapt: Any = None,
    adapt_dir: str | Path | None = None,
) -> InferenceReport:
    """Write `out` from `groups` task groups run by `ranks` rank processes (in this process when `ranks`
    is 1); see the module doc."""
    from trm.kaggle.bundle import load_bundle
    from trm.kaggle.package import local_bundle
    from trm.kaggle.ranks import gpu_devices

    started, wall = time.perf_counter(), time.time()
    dev, batch_size = check_arguments(challenges, out, device, batch_size, max_minutes)
    if num_aug < 1:
        raise TRMError(f"--num-aug {num_aug}: must be at least 1 (the original task)")
    weights, source = local_bundle(weights, progress)
    load_bundle(weights, torch.device("cpu"))  # a damaged bundle stops here, once, before any rank starts
    data = read_challenges(challenges)
    split = split_tasks(data, groups)
    work = Path(adapt_dir) if adapt_dir is not None else Path(out).resolve().parent / "adapt"
    claim_work(work, [Path(challenges), Path(weights)])
    for index, tasks in enumerate(split):
        atomic_write_json(group_challenges(work, index), {t: data[t] for t in tasks}, indent=None)
    budget = (max_minutes * 60.0) if max_minutes is not None else 365 * 86400.0
    job = Job(
        run_id=uuid.uuid4().hex,
        weights=str(Path(weights).resolve()),
        work=str(work.resolve()),
        groups=split,
        ranks=min(ranks, len(split)),
        device=dev.type,
        num_aug=num_aug,
        batch_size=batch_size,
        early_halt=early_halt,
        seed=seed,
        deadline=wall + budget,
        adapt=None if adapt is None else dataclasses.asdict(dataclasses.replace(adapt, progress=False)),
    )
    atomic_write_json(work / JOB, dataclasses.asdict(job))
    log.info("%d task group(s) on %d rank(s): work folder %s", len(split), job.ranks, work)
    if job.ranks == 1:
        outcomes = {0: "exit 0" if run_rank(job, 0, progress=progress) == 0 else "exit 1"}
    else:
        gpus = gpu_devices(os.environ) if dev.type == "cuda" else []
        outcomes = _launch(job, work, gpus)
    report, submission = _merge(job, work, data, dev, outcomes, started)
    atomic_write_json(out, submission, indent=None)
    report.seconds = time.perf_counter() - started
    if source is not None:
        report.notes.append(f"weights: {source['reference']} (bundle {weights})")
    return report


def _launch(job: Job, work: Path, gpus: list[str]) -> dict[int, str]:
    """Start the ranks, wait for them (ranks.json says who runs and how each ended); rank → outcome."""
    from trm.kaggle.ranks import pid_record, rank_environment, start_rank, wait_ranks

    procs = []
    for rank in range(job.ranks):
        env = rank_environment(os.environ, gpus[rank] if gpus else None)
        command = [sys.executable, "-m", "trm.kaggle.sharded", str(work / JOB), str(rank)]
        procs.append(start_rank(rank, command, env, work / "ranks" / f"rank-{rank}.log"))
    atomic_write_json(work / RANKS, pid_record(procs))
    wait_ranks(procs, job.deadline + WAIT_GRACE_S, STOP_GRACE_S)
    atomic_write_json(work / RANKS, pid_record(procs))
    for p in procs:
        if not p.ok:
            log.warning("rank %d: %s (log %s)", p.rank, p.outcome, p.log)
    return {p.rank: p.outcome for p in procs}


def _read_result(job: Job, work: Path, index: int) -> tuple[dict[str, Any] | None, str]:
    """The group's result when this run wrote it done; else (None, why)."""
    path = group_result(work, index)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, "no result"
    except (OSError, ValueError) as err:
        return None, f"{path.name} unreadable ({err})"
    if not isinstance(record, dict) or record.get("run_id") != job.run_id:
        return None, "no result of this run"
    if record.get("status") != "done":
        return None, f"failed: {record.get('error')}"
    if sorted(record.get("submission") or {}) != sorted(job.groups[index]):
        return None, f"{path.name} does not cover the group's tasks"
    return record, ""


def _merge(
    job: Job,
    work: Path,
    data: dict[str, Any],
    dev: torch.device,
    outcomes: dict[int, str],
    started: float,
) -> tuple[InferenceReport, dict[str, Any]]:
    """The groups' attempts merged in the file's task order, the un-adapted bundle's predictions for the
    groups without a result (said in the log and the notes); the report and the validated submission."""
    report = InferenceReport(
        tasks=len(data),
        test_inputs=sum(len(t["test"]) for t in data.values()),
        rows_planned=0,
        rows_run=0,
        rounds_complete=job.num_aug,
        skipped={},
        seconds=0.0,
        device=f"{job.ranks} rank(s) on {dev.type}",
        batch_size=job.batch_size,
    )
    attempts: dict[str, Any] = {}
    missing: list[tuple[int, str]] = []
    for index, tasks in enumerate(job.groups):
        rank = index % job.ranks
        record, why = _read_result(job, work, index)
        if record is None:
            missing.append((index, f"rank {rank}: {outcomes.get(rank, 'not started')}; group: {why}"))
            continue
        attempts.update(record["submission"])
        _add(report, record["report"])
        adapted = record["report"]["adapted"]
        done = "not adapted" if adapted is None else f"adapted ({adapted['step']} step(s))"
        report.groups.append({"group": index, "rank": rank, "tasks": len(tasks), "result": done})
        report.notes += [f"group {index}: {note}" for note in record["report"]["notes"]]
    if missing:
        attempts.update(_fallback(job, data, dev, missing, report))
    report.unseen_tasks = sum(1 for t in data if t in _unseen(job, data))
    report.trained_tasks = len(data) - report.unseen_tasks
    submission = {t: attempts[t] for t in data}
    validate_submission(submission, {t: {"test": data[t]["test"]} for t in data}, attempts=2)
    report.seconds = time.perf_counter() - started
    return report, submission


def _add(report: InferenceReport, part: dict[str, Any]) -> None:
    report.rows_run += part["rows_run"]
    report.rows_planned += part["rows_planned"]
    report.rounds_complete = min(report.rounds_complete, part["rounds_complete"])
    report.stopped_by_budget |= part["stopped_by_budget"]
    report.skipped.update(part["skipped"])


def _unseen(job: Job, data: dict[str, Any]) -> set[str]:
    from trm.kaggle import bundle as B
    from trm.kaggle.testset import unseen_task_ids

    path = Path(job.weights) / B.IDENTIFIERS
    identifiers = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    return set(unseen_task_ids(data, identifiers))


def _fallback(
    job: Job, data: dict[str, Any], dev: torch.device, missing: list[tuple[int, str]], report: InferenceReport
) -> dict[str, Any]:
    """The un-adapted bundle's attempts for the groups without a result, within FALLBACK_MINUTES."""
    from trm.kaggle.bundle import load_bundle

    tasks = {t: data[t] for index, _ in missing for t in job.groups[index]}
    bundle = load_bundle(job.weights, dev, batch_size=job.batch_size, early_halt=job.early_halt)
    part, attempts = infer_tasks(
        bundle,
        tasks,
        dev,
        num_aug=job.num_aug,
        batch_size=job.batch_size,
        early_halt=job.early_halt,
        seed=job.seed,
        max_minutes=FALLBACK_MINUTES,
        started=time.perf_counter(),
        save_predictions=None,
        progress=False,
        adapt=None,
    )
    _add(report, dataclasses.asdict(part))
    for index, why in missing:
        names = ", ".join(job.groups[index])
        line = (
            f"group {index} ({why}): its {len(job.groups[index])} task(s) get the un-adapted bundle's predictions "
            f"({part.rounds_complete} augmentation round(s)): {names}"
        )
        log.warning(line)
        report.notes.append(line)
        report.groups.append(
            {
                "group": index,
                "rank": index % job.ranks,
                "tasks": len(job.groups[index]),
                "result": f"fallback ({why})",
            }
        )
    report.groups.sort(key=lambda g: g["group"])
    return attempts


def cpu_threads(ranks: int) -> int:
    """Threads of each of `ranks` CPU ranks: the cores shared out. The thread count decides the order of
    floating-point sums, so a CPU run matches a one-rank run in the last bits only at equal threads."""
    return max(1, (os.cpu_count() or 1) // ranks)


def main(argv: list[str] | None = None) -> int:
    """A rank: `python -m trm.kaggle.sharded JOB_JSON RANK` (started by the coordinator)."""
    args = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s rank %(process)d: %(message)s")
    job = Job(**json.loads(Path(args[0]).read_text(encoding="utf-8")))
    if job.device == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(cpu_threads(job.ranks))  # the ranks share the cores: more threads only contend
    return run_rank(job, int(args[1]))


if __name__ == "__main__":
    sys.exit(main())
