"""Runs to report: read run directories (the trainer's) or a batch runner's `batch_results.json`.

A run directory holds `run.json` (the resolved config), `metrics.jsonl` (one JSON object per log: `step`,
`wall_time` and metric keys such as `train/lm_loss`, `eval/all/exact_accuracy`, `ARC/pass@2`,
`num_params`, `eval/seconds`), `step_N/` checkpoints and, when the launcher ran it, `launch/events.jsonl`.
A batch's runs may have failed before writing any of these: they are kept, with their status and no curve.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from trm import exit_codes
from trm.errors import TRMError
from trm.training.checkpointing.best import FULL, FULL_COUNT
from trm.training.config import RUN_ONLY_KEYS, headline_metric, is_run_only
from trm.training.early_stop import EARLY_STOP
from trm.training.recipes import flatten

BATCH_SCHEMA_VERSION = 1
RUN_JSON = "run.json"
METRICS = "metrics.jsonl"
TRAIN_LOSS = "train/lm_loss"
NUM_PARAMS = "num_params"
EVAL_SECONDS = "eval/seconds"
_STEP_DIR = re.compile(r"^step_(\d+)$")
# Keys of run.json's config that name a run rather than define it: never "swept".
_NOT_SWEPT = RUN_ONLY_KEYS | {"data_paths_test"}

Points = list[tuple[int, float]]


@dataclass
class RunRecord:
    """One run as the report sees it."""

    name: str
    suite: str
    status: str
    swept: dict[str, Any] = field(default_factory=dict)
    exit_code: int | None = None
    run_dir: Path | None = None
    config: dict[str, Any] | None = None
    series: dict[str, Points] = field(default_factory=dict)
    """metric name -> [(step, value)] in logged order (finite values only)."""
    train_times: list[tuple[int, float]] = field(default_factory=list)
    """(step, wall_time) of every log row with training metrics."""
    eval_spans: list[tuple[float, float]] = field(default_factory=list)
    """(wall_time, eval/seconds) of every evaluation."""
    wall_range: tuple[float, float] | None = None
    """The first and last wall_time of metrics.jsonl."""
    wall_seconds: float | None = None
    wall_source: str = "none"
    final_metrics: dict[str, float] = field(default_factory=dict)
    """From the batch runner (each metric's last value), used when the run directory has no metrics."""
    final_step: int | None = None
    best_metrics: dict[str, float] = field(default_factory=dict)
    """From the batch runner: the metrics of the best evaluation's row."""
    best_step: int | None = None
    best_checkpoint: str | None = None
    best_count: float | None = None
    """The number of items behind the best value, when the run's choice recorded it (run.json `best`)."""
    best_evaluation: str | None = None
    """`full` or `subset`: the evaluation behind the run's own choice of best checkpoint (run.json `best`,
    written by a run whose in-run evaluations read a subset); None: the best is the highest logged value."""
    notes: list[str] = field(default_factory=list)

    @property
    def num_params(self) -> int | None:
        points = self.series.get(NUM_PARAMS) or (
            [(0, self.final_metrics[NUM_PARAMS])] if NUM_PARAMS in self.final_metrics else []
        )
        return int(points[0][1]) if points else None

    @property
    def last_step(self) -> int | None:
        return max((p[-1][0] for p in self.series.values() if p), default=self.final_step)

    @property
    def headline(self) -> str | None:
        """The metric runs are compared by: ARC/pass@2, else the exact accuracy of eval set `all`."""
        return headline_metric([*self.series, *self.final_metrics, *self.best_metrics])

    def final(self, metric: str) -> tuple[int | None, float] | None:
        """(step, value) of the last logged value of `metric` (the batch's final_metrics as fallback)."""
        if self.series.get(metric):
            return self.series[metric][-1]
        return (self.final_step, self.final_metrics[metric]) if metric in self.final_metrics else None

    def best(self, metric: str) -> tuple[int | None, float] | None:
        """(step, value) of the highest value of `metric` (the later step on a tie, as `trm best`); for a
        run that chose its best checkpoint itself (a subset run: run.json `best`), that choice."""
        if self.best_evaluation is not None and metric in self.best_metrics:
            return self.best_step, self.best_metrics[metric]
        points = self.series.get(metric)
        if points:
            step, value = max(points, key=lambda p: (p[1], p[0]))
            return step, value
        return (self.best_step, self.best_metrics[metric]) if metric in self.best_metrics else None

    @property
    def steps_per_second(self) -> float | None:
        """Median over consecutive training logs of steps / (wall time less evaluation time between them).

        The median ignores the idle gap of an interrupted and resumed run (one interval among many).
        """
        rates = []
        for (s0, t0), (s1, t1) in zip(self.train_times, self.train_times[1:], strict=False):
            evaluating = sum(sec for t, sec in self.eval_spans if t0 < t <= t1)
            if s1 > s0 and t1 - t0 - evaluating > 0:
                rates.append((s1 - s0) / (t1 - t0 - evaluating))
        return statistics.median(rates) if rates else None


# ------------------------------------------------------------------------------------- run directories


def _read_json_object(path: Path, fix: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise TRMError(f"cannot read {path}: {err.strerror}; {fix}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise TRMError(f"{path} is not valid JSON ({err}); {fix}") from None
    if not isinstance(data, dict):
        raise TRMError(f"{path} holds a JSON {type(data).__name__}, not an object; {fix}")
    return data


def read_metrics_jsonl(path: Path, record: RunRecord) -> None:
    """Fill `record.series`, `train_times` and `eval_spans` from a metrics.jsonl (a torn last line is skipped)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise TRMError(f"cannot read {path}: {err.strerror}; check its permissions") from None
    for number, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                continue  # a line torn by a kill mid-write, as the trainer itself skips it on resume
            raise TRMError(
                f"{path} line {number} is not JSON; the trainer writes one object per line: remove the "
                "line (or the file, to report the run without curves)"
            ) from None
        if not isinstance(row, dict) or not isinstance(row.get("step"), int):
            raise TRMError(
                f"{path} line {number} has no integer `step`; this is not a trainer's metrics.jsonl"
            )
        step, wall = row["step"], row.get("wall_time")
        values = {
            k: float(v)
            for k, v in row.items()
            if k not in ("step", "wall_time") and isinstance(v, int | float) and not isinstance(v, bool)
        }
        for name, value in values.items():
            if value == value and abs(value) != float("inf"):
                record.series.setdefault(name, []).append((step, value))
        if isinstance(wall, int | float):
            first, last = record.wall_range or (wall, wall)
            record.wall_range = (min(first, wall), max(last, wall))
            if any(k.startswith("train/") for k in values):
                record.train_times.append((step, float(wall)))
            if EVAL_SECONDS in values:
                record.eval_spans.append((float(wall), values[EVAL_SECONDS]))


def _status_from_launcher(run_dir: Path) -> tuple[int | None, float | None]:
    """(exit code of the last launcher session, wall seconds of all sessions) from launch/events.jsonl."""
    from trm.launch.handoff.handoff import session_summary
    from trm.launch.supervision.supervisor import read_events

    events = read_events(run_dir / "launch" / "events.jsonl")
    if not events:
        return None, None
    summary = session_summary(events, None)
    return summary["last_exit_code"], summary["wall_seconds"]


def status_name(exit_code: int | None) -> str:
    """A one-word status from an exit code (see trm.exit_codes)."""
    if exit_code == exit_codes.OK:
        return "finished"
    if exit_code in (exit_codes.SAVED_RETRY, exit_codes.BUDGET_STOPPED):
        return "stopped"
    return "unknown" if exit_code is None else "failed"


def _newest_checkpoint_step(run_dir: Path) -> int | None:
    steps = [
        int(m.group(1))
        for p in run_dir.iterdir()
        if (m := _STEP_DIR.match(p.name)) and (p / "COMPLETE").exists()
    ]
    return max(steps, default=None)


def _read_run_choice(best: Any, record: RunRecord) -> None:
    """The run's own choice of best checkpoint (run.json `best`: metric, value, step, path, evaluation and
    the top-k candidates with their full scores and counts) into `record`'s best fields."""
    if not isinstance(best, Mapping):
        return
    metric, value, step = best.get("metric"), best.get("value"), best.get("step")
    if not isinstance(metric, str) or not isinstance(step, int) or isinstance(value, bool):
        return
    if not isinstance(value, int | float):
        return
    record.best_metrics, record.best_step = {metric: float(value)}, step
    record.best_evaluation = str(best.get("evaluation") or "full")
    if isinstance(best.get("path"), str):
        record.best_checkpoint = best["path"]
    listed = best.get("candidates")
    candidates: list[Any] = listed if isinstance(listed, list) else []
    counts = [c.get(FULL_COUNT) for c in candidates if isinstance(c, Mapping) and c.get("step") == step]
    if counts and isinstance(counts[0], int | float) and record.best_evaluation == FULL:
        record.best_count = float(counts[0])
    record.notes.append(
        f"best: the run's choice, step {step} on the {record.best_evaluation} evaluation"
        + (f" of its top {len(candidates)} by subset score" if candidates else "")
    )


def read_run_dir(run_dir: Path, record: RunRecord | None = None) -> RunRecord:
    """A run directory as a RunRecord (curves, status, wall time); fills `record` if given (batch runs)."""
    if not run_dir.is_dir():
        raise TRMError(
            f"run directory {run_dir} does not exist; pass the trainer's checkpoint_path "
            "(CHECKPOINT_DIR/RUN_NAME), the folder holding run.json and metrics.jsonl"
        )
    if not (run_dir / RUN_JSON).exists() and not (run_dir / METRICS).exists():
        raise TRMError(
            f"{run_dir} has neither {RUN_JSON} nor {METRICS}: it is not a run directory; pass the "
            "trainer's checkpoint_path (CHECKPOINT_DIR/RUN_NAME)"
        )
    fix = "it is written by the trainer (python -m trm.train); restore it from the run's copy or sync"
    run_json = _read_json_object(run_dir / RUN_JSON, fix) if (run_dir / RUN_JSON).exists() else {}
    config = run_json.get("config") if isinstance(run_json.get("config"), dict) else None
    if record is None:
        name = (config or {}).get("run_name") or run_dir.name
        record = RunRecord(name=str(name), suite="runs", status="unknown")
    record.run_dir, record.config = run_dir, config
    _read_run_choice(run_json.get("best"), record)
    if (run_dir / METRICS).exists():
        read_metrics_jsonl(run_dir / METRICS, record)
    else:
        record.notes.append(f"no {METRICS}")
    launcher_exit, launcher_wall = _status_from_launcher(run_dir)
    if record.status == "unknown":
        if launcher_exit is not None:
            record.exit_code, record.status = launcher_exit, status_name(launcher_exit)
        else:
            done = max(_newest_checkpoint_step(run_dir) or 0, record.last_step or 0)
            limit = run_json.get("step_limit")
            ended = run_json.get(EARLY_STOP) or (isinstance(limit, int) and done >= limit)
            record.status = "finished" if ended else "incomplete"  # early stopping ends a run as finished
    if record.wall_seconds is None:
        if launcher_wall:
            record.wall_seconds, record.wall_source = launcher_wall, "launcher sessions"
        elif record.wall_range is not None and record.wall_range[1] > record.wall_range[0]:
            first, last = record.wall_range
            record.wall_seconds, record.wall_source = float(last - first), "metrics.jsonl span"
    return record


# ------------------------------------------------------------------------------------- batch results


def _batch_error(path: Path, where: str, problem: str) -> TRMError:
    return TRMError(
        f"{path}: {where}{problem}; a batch_results.json is written by `python -m trm experiment batch` "
        f"(schema_version {BATCH_SCHEMA_VERSION}: {{schema_version, batch, runs: [{{name, suite, swept, "
        "status, run_dir, ...}]}); pass that file, or the run directories themselves"
    )


def _metrics_and_step(value: Any) -> tuple[dict[str, float], int | None]:
    """The numeric metrics of a batch entry's final_metrics/best_metrics, and its `step` (if any)."""
    if not isinstance(value, Mapping):
        return {}, None
    numbers = {
        str(k): float(v) for k, v in value.items() if isinstance(v, int | float) and not isinstance(v, bool)
    }
    step = numbers.pop("step", None)
    return numbers, None if step is None else int(step)


def _resolve_run_dir(value: Any, batch_path: Path) -> Path | None:
    """A run_dir as written (absolute, or relative to the working directory), else relative to the batch file."""
    if not isinstance(value, str) or not value:
        return None
    path = Path(value)
    if path.is_absolute() or path.is_dir():
        return path
    return batch_path.parent / path


def batch_record(entry: Mapping[str, Any], batch_path: Path) -> RunRecord:
    """A RunRecord from one `runs[]` entry, with the curves of its run directory when that exists."""
    swept = entry.get("swept") if isinstance(entry.get("swept"), Mapping) else {}
    exit_code, best = entry.get("exit_code"), entry.get("best_checkpoint")
    final_metrics, final_step = _metrics_and_step(entry.get("final_metrics"))
    best_metrics, best_step = _metrics_and_step(entry.get("best_metrics"))
    record = RunRecord(
        name=str(entry["name"]),
        suite=str(entry.get("suite") or "batch"),
        status=str(entry["status"]),
        swept=dict(swept),
        exit_code=exit_code if isinstance(exit_code, int) else None,
        final_metrics=final_metrics,
        final_step=final_step,
        best_metrics=best_metrics,
        best_step=best_step,
        best_checkpoint=best if isinstance(best, str) else None,
    )
    tail = [line for line in str(entry.get("log_tail") or "").splitlines() if line.strip()]
    if record.status not in ("finished", "skipped") and tail:
        record.notes.append(f"log: {tail[-1].strip()}")
    if record.best_checkpoint:
        record.notes.append(f"best checkpoint {record.best_checkpoint}")
    wall = entry.get("wall_seconds")
    if isinstance(wall, int | float) and not isinstance(wall, bool):
        record.wall_seconds, record.wall_source = float(wall), "batch"
    run_dir = _resolve_run_dir(entry.get("run_dir"), batch_path)
    if run_dir is not None and run_dir.is_dir() and any((run_dir / n).exists() for n in (RUN_JSON, METRICS)):
        read_run_dir(run_dir, record)
    else:
        record.run_dir = run_dir
        record.notes.append("no run directory" if run_dir is None else f"run directory {run_dir} not found")
    return record


def read_batch(path: Path) -> tuple[dict[str, Any], list[RunRecord]]:
    """The `batch` object and the runs of a batch_results.json, in file order (failed runs included)."""
    if not path.is_file():
        raise _batch_error(path, "", "no such file")
    data = _read_json_object(path, "pass the batch runner's batch_results.json")
    if data.get("schema_version") != BATCH_SCHEMA_VERSION:
        raise _batch_error(path, "", f"schema_version is {data.get('schema_version')!r}")
    runs = data.get("runs")
    if not isinstance(runs, list):
        raise _batch_error(path, "", "`runs` is missing or not a list")
    for index, entry in enumerate(runs):
        if not isinstance(entry, Mapping):
            raise _batch_error(path, f"runs[{index}]: ", "not an object")
        for key in ("name", "status"):
            if not isinstance(entry.get(key), str) or not entry[key]:
                raise _batch_error(path, f"runs[{index}]: ", f"`{key}` is missing or not a string")
    names = [entry["name"] for entry in runs]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise _batch_error(path, "", f"run names appear twice: {', '.join(twice)}")
    batch = data.get("batch") if isinstance(data.get("batch"), dict) else {}
    return batch, [
        batch_record(entry, path)
        for entry in tqdm(runs, desc="reading runs", unit="run", disable=None, leave=False)
    ]


def read_run_dirs(paths: Iterable[Path]) -> list[RunRecord]:
    """RunRecords of run directories, with the config keys that differ between them as `swept`."""
    paths = list(paths)
    records = [
        read_run_dir(p) for p in tqdm(paths, desc="reading runs", unit="run", disable=None, leave=False)
    ]
    seen: dict[str, int] = {}
    for record in records:  # two runs with one run_name (copies of a run): tell them apart
        seen[record.name] = seen.get(record.name, 0) + 1
    for record in records:
        if seen[record.name] > 1 and record.run_dir is not None:
            record.name = f"{record.name} ({record.run_dir})"
    flats = [flatten(r.config or {}) for r in records]
    swept = differing_keys(flats)
    for record, flat in zip(records, flats, strict=True):
        record.swept = {key: flat.get(key) for key in swept}
    return records


def differing_keys(configs: list[dict[str, Any]]) -> list[str]:
    """Sorted config keys (not naming keys such as run_name) whose values differ between the configs."""
    present = [c for c in configs if c]
    if len(present) < 2:
        return []
    keys = sorted(k for k in {k for c in present for k in c} - _NOT_SWEPT if not is_run_only(k))
    return [k for k in keys if len({json.dumps(c.get(k), sort_keys=True) for c in present}) > 1]
