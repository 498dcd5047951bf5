"""The batch runner: named experiments through the trainer, side by side on GPU slots or one at a time on CPU.

For every experiment it builds (if missing) and verifies the dataset, starts the trainer with the
experiment's overrides into `<checkpoint dir>/<run name>`, writes `<log dir>/<name>_stdout.log` and
`_stderr.log`, and rewrites `<log dir>/batch_results.json` atomically whenever a run starts or ends (the
schema is `results_document`; docs/experiments.md documents it). The same batch run again skips the
runs whose final checkpoint says finished and starts the others, which resume from their newest complete
checkpoint (the trainer's own resume). SIGTERM/SIGINT/SIGHUP of the batch are forwarded as SIGTERM to the
running trainers, which save and exit 75; the batch then exits 75 (`exit_codes.SAVED_RETRY`). A failed run
is recorded with the tail of its stderr; without `continue_on_failure` the batch starts nothing more, asks
the other running trainers to save and stop, and exits `exit_codes.RUNS_FAILED` (so it does at the end
when any run failed). With `max_hours` and `sync_to` a batch has the launcher's guards
(`trm.experiments.guards`): the budget stops it the same way and it exits `exit_codes.BUDGET_STOPPED`;
each run is copied to SYNC_TO while it trains and when it ends.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tqdm import tqdm

from trm import __version__, exit_codes, runlock
from trm.errors import TRMError
from trm.experiments import outcome, placement
from trm.experiments.guards import BatchBudget, BatchSync
from trm.experiments.suite import Dataset, Experiment, validate
from trm.io import atomic_write_json
from trm.launch.plan.plan import merge_overrides

SCHEMA_VERSION = 1
RESULTS = "batch_results.json"
EXPERIMENT_FILE = "experiment.json"
LOG_TAIL_LINES = 20
# Statuses of a run in batch_results.json; `running` only while the batch that started it is alive.
STATUSES = ("pending", "running", "finished", "failed", "interrupted", "skipped")


def utc(t: float | None) -> str | None:
    """ISO-8601 UTC with seconds (None stays None)."""
    return None if t is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def batch_id(names: Sequence[str]) -> str:
    """The same selection is the same batch (its logs and results), whatever order it was given in."""
    return "batch-" + hashlib.sha256(",".join(sorted(names)).encode()).hexdigest()[:10]


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of a log (progress-bar redraws split on carriage returns)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 64 * 1024))
            text = f.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    kept = [line for line in text.replace("\r", "\n").splitlines() if line.strip()]
    return "\n".join(kept[-lines:])


@dataclass
class Options:
    """How a batch runs (the command line's flags)."""

    data_dir: Path
    checkpoint_dir: Path
    log_dir: Path | None = None
    """Default: `<checkpoint_dir>/batches/<batch id>`."""
    continue_on_failure: bool = False
    dry_run: bool = False
    gpus_per_run: int = 1
    num_gpus: int | None = None
    """GPUs to use: None every visible one, 0 the CPU."""
    extra: tuple[str, ...] = ()
    """Overrides after the experiment's (the `run NAME key=value` form)."""
    python: str = sys.executable
    poll_s: float = 0.5
    max_hours: float | None = None
    """The launcher's MAX_HOURS for the whole batch (every session together; None: no limit)."""
    stop_margin_minutes: float = 10.0
    """The launcher's STOP_MARGIN_MINUTES: the budget stop comes this long before max_hours."""
    sync_to: str = ""
    """The launcher's SYNC_TO: each run is copied to SYNC_TO/<run name> ("" : off)."""
    sync_every_minutes: float = 15.0
    ledger_every_s: float = 60.0
    """How often the budget's hours are written to the ledger while the batch runs."""


@dataclass
class Run:
    """One experiment of the batch: its record in batch_results.json and, while it runs, its process."""

    experiment: Experiment
    run_dir: Path
    status: str = "pending"
    exit_code: int | None = None
    started: float | None = None
    ended: float | None = None
    command: str | None = None
    resumed: bool = False
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    slot: placement.Slot | None = None
    exit_dir: Path | None = None
    handoff: Path | None = None
    """The run's handoff bundle (what a single launch leaves), rebuilt after each of its sessions."""
    sync: str | None = None
    """With SYNC_TO: how the run's last final upload went ('done' or 'failed: why')."""
    synced_to: str | None = None

    def record(self, log_dir: Path) -> dict[str, Any]:
        """The run's entry of batch_results.json (metrics read from its run directory now)."""
        exp = self.experiment
        rows = outcome.read_metrics(self.run_dir)
        best = outcome.best(self.run_dir)
        ended = self.ended if self.status != "running" else None
        stopped = self.status in ("failed", "interrupted")
        return {
            "name": exp.name,
            "suite": exp.suite,
            "title": exp.title,
            "label": exp.label,
            "recipe": exp.recipe,
            "swept": exp.swept,
            "status": self.status,
            "exit_code": self.exit_code,
            "started": utc(self.started),
            "ended": utc(ended),
            "wall_seconds": round(ended - self.started, 3) if ended and self.started else None,
            "resumed": self.resumed,
            "run_dir": str(self.run_dir),
            "final_metrics": outcome.final_metrics(rows),
            "best_metric": best.metric if best else None,
            "best_metrics": {"step": best.step, **best.metrics} if best else {},
            "best_checkpoint": str(best.checkpoint) if best and best.checkpoint else None,
            "handoff": str(self.handoff) if self.handoff else None,
            "synced_to": self.synced_to,
            "sync": self.sync,
            "command": self.command,
            "stdout_log": str(log_dir / f"{exp.name}_stdout.log"),
            "stderr_log": str(log_dir / f"{exp.name}_stderr.log"),
            "log_tail": log_tail(log_dir / f"{exp.name}_stderr.log") if stopped else None,
        }


class Table:
    """One line per run: status, steps done of the run's total, elapsed time (tqdm, on a terminal)."""

    def __init__(self, runs: Sequence[Run], stream: IO[str], live: bool) -> None:
        width = max(len(r.experiment.name) for r in runs)
        self.bars = {
            r.experiment.name: tqdm(
                total=None,
                desc=f"{r.experiment.name:<{width}} {r.status:<11}",
                position=i,
                leave=True,
                file=stream,
                disable=not live,
                dynamic_ncols=True,
                bar_format="{desc} {n_fmt}/{total_fmt} steps |{bar:24}| {elapsed}",
            )
            for i, r in enumerate(runs)
        }
        self.width = width

    def show(self, run: Run) -> None:
        bar = self.bars[run.experiment.name]
        bar.set_description_str(f"{run.experiment.name:<{self.width}} {run.status:<11}", refresh=False)
        total, step = outcome.step_limit(run.run_dir), outcome.last_step(run.run_dir)
        if total is not None:
            bar.total = total
        if step is not None:
            bar.n = step
        bar.refresh()

    def write(self, line: str) -> None:
        next(iter(self.bars.values())).write(line)

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()


def write_experiment_file(run_dir: Path, exp: Experiment, batch: str) -> Path:
    """`<run dir>/experiment.json`: the experiment, its swept values and its batch, in the format of a W&B
    config file (`{key: {"value": …}}`, JSON being YAML), so `WANDB_CONFIG_PATHS` puts them in the run's
    config."""
    path = run_dir / EXPERIMENT_FILE
    values = {
        "experiment": exp.name,
        "suite": exp.suite,
        "label": exp.label,
        "swept": exp.swept,
        "batch": batch,
    }
    atomic_write_json(path, {key: {"value": value} for key, value in values.items()})
    return path


def host_facts(slots: Sequence[placement.Slot], gpus: Sequence[Any]) -> dict[str, Any]:
    """Where the batch ran (batch_results.json `batch.host`)."""
    import torch

    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "trm_stack": __version__,
        "cpu_count": os.cpu_count(),
        "gpus": [
            {"index": g.index, "name": g.name, "uuid": g.uuid, "memory_mib": g.memory_mib} for g in gpus
        ],
        "slots": [s.label for s in slots],
    }


class Batch:
    """Runs the selected experiments; `run()` returns the batch's exit code."""

    def __init__(
        self,
        experiments: Sequence[Experiment],
        options: Options,
        environ: Mapping[str, str] | None = None,
        out: IO[str] | None = None,
        gpus: Sequence[Any] | None = None,
    ) -> None:
        if not experiments:
            raise TRMError("no experiments selected")
        self.options = options
        self.environ = dict(os.environ if environ is None else environ)
        self.out = out or sys.stdout
        self.id = batch_id([e.name for e in experiments])
        self.log_dir = options.log_dir or options.checkpoint_dir / "batches" / self.id
        self.runs = [Run(e, options.checkpoint_dir / e.run_name_for(options.extra)) for e in experiments]
        detect = gpus is None and options.num_gpus != 0
        self.gpus = list(placement.detect_gpus(self.environ) if detect else gpus or [])
        devices = placement.visible_devices(self.gpus)
        if options.num_gpus is not None:
            if options.num_gpus > len(devices):
                raise TRMError(
                    f"--num-gpus {options.num_gpus} but {len(devices)} GPU(s) are visible; use --num-gpus "
                    f"{len(devices)} or fewer (0 trains on CPU)"
                )
            devices = devices[: options.num_gpus]
        self.slots = placement.make_slots(self.gpus, devices, options.gpus_per_run)
        self.started = time.time()
        self.ended: float | None = None
        self.stop_reason: str | None = None
        self.halted_by: str | None = None
        self.exit_code: int | None = None
        self.budget: BatchBudget | None = None
        self.budget_stopped = False
        self.sync: BatchSync | None = None
        self.records_sync: str | None = None
        self._ledger_written = time.monotonic()
        self._children: list[subprocess.Popen[bytes]] = []
        self._ready: set[str] = set()

    # -- planning --------------------------------------------------------------------------------
    def validate(self) -> dict[str, Any]:
        """Compose every experiment before anything runs (TRMError names the experiment and the key)."""
        return validate(
            [r.experiment for r in self.runs],
            self.options.data_dir,
            self.options.checkpoint_dir,
            self.options.extra,
        )

    def overrides(self, run: Run, slot: placement.Slot, global_batch_size: int) -> list[str]:
        """The trainer's overrides of `run` on `slot`: the experiment's, then the slot's batch layout."""
        exp = run.experiment
        base = exp.train_overrides(self.options.data_dir, self.options.checkpoint_dir, self.options.extra)
        return merge_overrides(base, placement.hardware_overrides(slot, global_batch_size))

    def launch_line(
        self, run: Run, slot: placement.Slot, global_batch_size: int
    ) -> tuple[list[str], dict[str, str]]:
        """(command, environment additions) that start `run` on `slot`."""
        exit_dir = self.log_dir / f"{run.experiment.name}_exit_codes"
        cmd = placement.command(
            self.options.python, slot, self.overrides(run, slot, global_batch_size), exit_dir
        )
        env = placement.environment(slot, self.environ)
        env.update(self.tracking_env(run))
        return cmd, env

    def tracking_env(self, run: Run) -> dict[str, str]:
        """W&B: one group per batch, the experiment (name, suite, swept values) in the run's config."""
        return {
            "WANDB_RUN_GROUP": self.id,
            "WANDB_CONFIG_PATHS": str(run.run_dir / EXPERIMENT_FILE),
            "TRM_EXPERIMENT": run.experiment.name,
        }

    def dataset_commands(self, dataset: Dataset) -> tuple[list[str], list[str]]:
        """`python -m trm data <builder> …` and `python -m trm data verify DIR` (the launcher's data step)."""
        target = self.options.data_dir / dataset.name
        py = self.options.python
        build = [py, "-m", "trm", "data", dataset.builder, "--output-dir", str(target), *dataset.build_args]
        return build, [py, "-m", "trm", "data", "verify", str(target)]

    def uses_own_dataset(self, run: Run) -> bool:
        """Whether the run reads the experiment's dataset (an override may point data_paths elsewhere)."""
        path = f"data_paths=[{self.options.data_dir / run.experiment.dataset.name}]"
        overrides = run.experiment.train_overrides(
            self.options.data_dir, self.options.checkpoint_dir, self.options.extra
        )
        return path in overrides

    # -- the results file ----------------------------------------------------------------------------
    def document(self) -> dict[str, Any]:
        """batch_results.json: schema_version, the batch, one record per run in selection order."""
        o = self.options
        return {
            "schema_version": SCHEMA_VERSION,
            "batch": {
                "id": self.id,
                "started": utc(self.started),
                "ended": utc(self.ended),
                "exit_code": self.exit_code,
                "stop_reason": self.stop_reason,
                "halted_by": self.halted_by,
                "command": shlex.join([Path(sys.executable).name, "-m", "trm", *sys.argv[1:]])
                if sys.argv and sys.argv[0].endswith("__main__.py")
                else None,
                "experiments": [r.experiment.name for r in self.runs],
                "continue_on_failure": o.continue_on_failure,
                "gpus_per_run": o.gpus_per_run,
                "extra_overrides": list(o.extra),
                "data_dir": str(o.data_dir),
                "checkpoint_dir": str(o.checkpoint_dir),
                "log_dir": str(self.log_dir),
                "max_hours": o.max_hours,
                "hours_spent": round(self.budget.spent_hours(), 4) if self.budget else None,
                "sync_to": o.sync_to or None,
                "records_sync": self.records_sync,
                "host": host_facts(self.slots, self.gpus),
            },
            "runs": [r.record(self.log_dir) for r in self.runs],
        }

    def _check_log_dir(self) -> None:
        """Refuse a log folder holding another batch's results, or a results file that is no batch's: this
        batch would overwrite them (and add its hours to that batch's ledger). The same selection resumes."""
        path = self.log_dir / RESULTS
        if not path.exists():
            return
        try:
            found = json.loads(path.read_text(encoding="utf-8"))["batch"]["id"]
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
            found = None
        if found == self.id:
            return
        held = (
            f"the results of {found}" if isinstance(found, str) else f"a {RESULTS} that is no batch's results"
        )
        raise TRMError(
            f"--log-dir {self.log_dir}: refusing to use it: it holds {held}, not of this selection ({self.id}); "
            f"nothing was changed. Choose another --log-dir (the default <checkpoint dir>/batches/{self.id} is "
            "this selection's own)"
        )

    def write_results(self) -> Path:
        path = self.log_dir / RESULTS
        atomic_write_json(path, self.document())
        return path

    # -- running ---------------------------------------------------------------------------------
    def _on_signal(self, signum: int, _frame: object) -> None:
        self.request_stop(f"received {signal.Signals(signum).name}")

    def request_stop(self, reason: str) -> None:
        """Stop starting runs and ask every running trainer to save and exit (SIGTERM)."""
        if self.stop_reason is None:
            self.stop_reason = reason
        for child in self._children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    def _spawn(
        self, cmd: list[str], env: dict[str, str], stdout: Path, stderr: Path
    ) -> subprocess.Popen[bytes]:
        stdout.parent.mkdir(parents=True, exist_ok=True)
        banner = f"===== {utc(time.time())}: {shlex.join(cmd)}\n".encode()
        with open(stdout, "ab") as out, open(stderr, "ab") as err:
            out.write(banner)
            err.write(banner)
            out.flush()
            err.flush()
            child = subprocess.Popen(
                cmd, stdout=out, stderr=err, env={**self.environ, **env}, start_new_session=True
            )
        self._children.append(child)
        if self.stop_reason is not None:  # a stop arrived while it was starting
            child.send_signal(signal.SIGTERM)
        return child

    def _prepare_data(self, run: Run) -> int:
        """Build the run's dataset if missing, then verify it (once per batch); the exit code of the step."""
        dataset = run.experiment.dataset
        if dataset.name in self._ready or not self.uses_own_dataset(run):
            return exit_codes.OK
        build, verify = self.dataset_commands(dataset)
        steps = [verify] if (self.options.data_dir / dataset.name).exists() else [build, verify]
        name = run.experiment.name
        for cmd in steps:
            child = self._spawn(
                cmd, {}, self.log_dir / f"{name}_stdout.log", self.log_dir / f"{name}_stderr.log"
            )
            code = child.wait()
            self._children.remove(child)
            if code != 0:
                return code if self.stop_reason is None else exit_codes.SAVED_RETRY
        self._ready.add(dataset.name)
        return exit_codes.OK

    def _start(self, run: Run, slot: placement.Slot, table: Table) -> bool:
        """Prepare the data and start the trainer; False when the data step failed (the run is recorded)."""
        run.started, run.ended, run.exit_code = time.time(), None, None
        run.resumed = outcome.has_checkpoint(run.run_dir)
        run.status = "running"
        code = self._prepare_data(run)
        cfg = self.validate_one(run)
        cmd, env = self.launch_line(run, slot, cfg.global_batch_size)
        run.command = shlex.join([*(f"{k}={v}" for k, v in env.items() if k == "CUDA_VISIBLE_DEVICES"), *cmd])
        if code != exit_codes.OK:
            self._finish(run, code, table)
            return False
        run.run_dir.mkdir(parents=True, exist_ok=True)
        write_experiment_file(run.run_dir, run.experiment, self.id)
        run.slot = slot
        run.exit_dir = self.log_dir / f"{run.experiment.name}_exit_codes"
        name = run.experiment.name
        run.process = self._spawn(
            cmd, env, self.log_dir / f"{name}_stdout.log", self.log_dir / f"{name}_stderr.log"
        )
        if self.sync is not None:
            self.sync.start(run.run_dir, self._handoff_dir(run))
            run.synced_to = self.sync.target(run.run_dir)
        how = "resuming" if run.resumed else "started"
        table.write(f"{name}: {how} on {slot.label} -> {run.run_dir}")
        self.write_results()
        return True

    def validate_one(self, run: Run) -> Any:
        return run.experiment.compose(self.options.data_dir, self.options.checkpoint_dir, self.options.extra)

    def _finish(self, run: Run, code: int, table: Table) -> None:
        run.exit_code, run.ended = code, time.time()
        stopped_early = self.stop_reason is not None and code in (-signal.SIGTERM, 128 + signal.SIGTERM)
        if code == exit_codes.OK:
            run.status = "finished"
        elif code == exit_codes.SAVED_RETRY or stopped_early:
            # Exit 75: saved. Killed by the forwarded SIGTERM: stopped before its handlers were installed
            # (still starting up), so nothing was lost either; the next batch resumes it.
            run.status = "interrupted"
        else:
            run.status = "failed"
        if run.process is not None:
            self._children.remove(run.process)
            run.process = None
        if run.status != "failed":
            self._handoff(run, table)
        took = f"{run.ended - (run.started or run.ended):.1f} s"
        line = f"{run.experiment.name}: {run.status} (exit {code}, {took})"
        if self.sync is not None and run.run_dir.is_dir():
            run.synced_to, run.sync = (
                self.sync.target(run.run_dir),
                self.sync.finish(run.run_dir, self._handoff_dir(run)),
            )
            line += (
                f"; copied to {run.synced_to}"
                if run.sync == "done"
                else f"; copy to {run.synced_to} {run.sync}"
            )
        if run.status == "failed":
            line += f"; see {self.log_dir / f'{run.experiment.name}_stderr.log'}"
            if not self.options.continue_on_failure and self.halted_by is None:
                self.halted_by = run.experiment.name
                self.request_stop(f"{run.experiment.name} failed (no --continue-on-failure)")
        table.write(line)
        table.show(run)
        self.write_results()

    def _handoff(self, run: Run, table: Table) -> None:
        """The handoff bundle a single launch leaves (run.info, handoff.json, plot, submission), under
        LOG_DIR/handoff/NAME; a bundle that cannot be built is reported, the batch goes on."""
        from trm.launch.handoff.handoff import build_bundle

        out = self._handoff_dir(run)
        try:
            run.handoff = build_bundle(run.run_dir, out)
        except (TRMError, OSError, ValueError) as err:
            table.write(f"{run.experiment.name}: no handoff bundle ({err})")

    def _handoff_dir(self, run: Run) -> Path:
        return self.log_dir / "handoff" / run.experiment.name

    def guard_lines(self) -> list[str]:
        """What the budget and the sync will do (the dry run's and the start's lines)."""
        o = self.options
        budget = (
            f"budget: --max-hours {o.max_hours:g} for the whole batch (stop {o.stop_margin_minutes:g} min before; "
            f"hours kept in {self.log_dir / 'ledger.json'}); exit {exit_codes.BUDGET_STOPPED} when it stops the batch"
            if o.max_hours is not None
            else "budget: none (--max-hours / MAX_HOURS unset)"
        )
        sync = (
            f"sync: each run to {o.sync_to.rstrip('/')}/<run name> every {o.sync_every_minutes:g} min and at its "
            f"end; the batch's records to {o.sync_to.rstrip('/')}/batches/{self.id}"
            if o.sync_to
            else "sync: off (--sync-to / SYNC_TO unset)"
        )
        return [budget, sync]

    def plan_lines(self) -> list[str]:
        """The --dry-run text: slots, budget and sync, then per run what would happen and the exact commands."""
        return [
            f"batch {self.id}: {len(self.runs)} experiment(s); slots: {', '.join(s.label for s in self.slots)}",
            f"logs and {RESULTS}: {self.log_dir}",
            *self.guard_lines(),
            "",
            *self.run_lines(),
        ]

    def run_lines(self) -> list[str]:
        """Per run: what would happen and the exact commands."""
        lines = []
        for i, run in enumerate(self.runs):
            slot = self.slots[i % len(self.slots)]
            cfg = self.validate_one(run)
            cmd, env = self.launch_line(run, slot, cfg.global_batch_size)
            what = {"skipped": "skip (finished)"}.get(
                run.status, "resume" if outcome.has_checkpoint(run.run_dir) else "start"
            )
            lines.append(f"{run.experiment.name}  [{what}]  {run.experiment.title}: {run.experiment.label}")
            if self.uses_own_dataset(run):
                build, verify = self.dataset_commands(run.experiment.dataset)
                if not (self.options.data_dir / run.experiment.dataset.name).exists():
                    lines.append(f"  $ {shlex.join(build)}")
                lines.append(f"  $ {shlex.join(verify)}")
            prefix = [f"{k}={v}" for k, v in env.items() if k in ("CUDA_VISIBLE_DEVICES", "WANDB_RUN_GROUP")]
            lines.append(f"  $ {shlex.join([*prefix, *cmd])}")
        return lines

    def run(self) -> int:
        """Run every pending experiment; returns 0, exit_codes.SAVED_RETRY, exit_codes.RUNS_FAILED or
        exit_codes.BUDGET_STOPPED (0 also when the batch's budget was already spent: nothing ran)."""
        if self.options.sync_to and not self.options.dry_run:  # rclone first: before anything is composed
            self.sync = BatchSync(self.options.sync_to, self.options.sync_every_minutes, self.log_dir)
        self.validate()
        for run in self.runs:
            if outcome.is_finished(run.run_dir):
                run.status = "skipped"
        self._check_log_dir()
        if self.options.dry_run:
            print("\n".join(self.plan_lines()), file=self.out)
            return exit_codes.OK
        self.log_dir.mkdir(parents=True, exist_ok=True)
        # One batch per log folder: a second one of the same selection would record its runs (refused by
        # their trainers' run locks) as failed over this one's results and add its hours to the ledger.
        advice = "Wait for it to end or stop it (SIGTERM: its trainers save), then run the same command again"
        with runlock.owned(self.log_dir, "experiment batch", advice):
            return self._run_owned()

    def _run_owned(self) -> int:
        """`run` once the batch holds its log folder's lock."""
        refusal = self._open_budget()
        if refusal is not None:
            print(f"batch {self.id}: {refusal}", file=self.out)
            return exit_codes.OK
        previous = {
            s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        }
        table = Table(self.runs, sys.stderr, live=sys.stderr.isatty())
        try:
            for line in self.guard_lines():
                table.write(line)
            self._loop(table)
        finally:
            table.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if self.budget is not None:
                self.budget.record()
        self.ended = time.time()
        failed = [r.experiment.name for r in self.runs if r.status == "failed"]
        if self.budget_stopped:
            self.exit_code = exit_codes.BUDGET_STOPPED
        elif self.stop_reason is not None and self.halted_by is None:
            self.exit_code = exit_codes.SAVED_RETRY
        elif failed:
            self.exit_code = exit_codes.RUNS_FAILED
        else:
            self.exit_code = exit_codes.OK
        path = self.write_results()
        if self.sync is not None:
            self.records_sync = self.sync.records(self.id)
            path = self.write_results()
        counts = {s: sum(r.status == s for r in self.runs) for s in STATUSES}
        summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        print(self.handoff_line(), file=self.out)
        print(f"batch {self.id}: {summary}; exit {self.exit_code}; results: {path}", file=self.out)
        if self.exit_code == exit_codes.BUDGET_STOPPED:
            assert self.budget is not None
            print(
                f"stopped by the budget ({self.budget.spent_hours():.4g} h of --max-hours "
                f"{self.options.max_hours:g}) after the running trainers saved: raise --max-hours (MAX_HOURS) "
                "and run the same command again to continue",
                file=self.out,
            )
        elif self.exit_code == exit_codes.SAVED_RETRY:
            print(
                "stopped after the running trainers saved: run the same command again to resume",
                file=self.out,
            )
        elif failed:
            print(f"failed: {', '.join(failed)} (the tail of each stderr log is in {RESULTS})", file=self.out)
        return self.exit_code

    def _open_budget(self) -> str | None:
        """Open the budget of a batch about to run: the refusal when it is spent, else None (a new session)."""
        o = self.options
        if o.max_hours is None:
            return None
        gpus = len({d for slot in self.slots for d in slot.devices})
        self.budget = BatchBudget.open(self.log_dir, o.max_hours, o.stop_margin_minutes, gpus)
        refusal = self.budget.refusal()
        if refusal is None:
            self.budget.record(new_session=True)
        return refusal

    def handoff_line(self) -> str:
        """Where the batch's results are: the runs' handoff bundles, and what SYNC_TO holds."""
        bundles = [r for r in self.runs if r.handoff is not None]
        line = f"handoff: {len(bundles)} bundle(s) under {self.log_dir / 'handoff'}"
        if self.sync is None:
            return line + "; no SYNC_TO: copy the run directories and the log dir off the host"
        tried = [r for r in self.runs if r.sync is not None]
        copied = sum(r.sync == "done" for r in tried)
        return (
            f"{line}; SYNC_TO: {copied} of {len(tried)} run(s) copied to {self.sync.remote}/<run name>, the "
            f"batch's records {self.records_sync} ({self.sync.remote}/batches/{self.id}; log: "
            f"{self.log_dir / 'sync.log'})"
        )

    def _check_budget(self) -> None:
        """Stop the batch as the launcher's cost guard stops a run once the budget is spent; keep the
        ledger current."""
        if self.budget is None:
            return
        if self.budget.due() and not self.budget_stopped:
            self.budget_stopped = True
            self.request_stop(
                f"MAX_HOURS budget spent ({self.budget.spent_hours():.4g} h of {self.options.max_hours:g})"
            )
        now = time.monotonic()
        if now - self._ledger_written >= self.options.ledger_every_s:
            self.budget.record()
            self._ledger_written = now

    def _loop(self, table: Table) -> None:
        for run in self.runs:
            if run.status == "skipped":
                table.write(f"{run.experiment.name}: skipped (finished in {run.run_dir})")
            table.show(run)
        self.write_results()
        queue = [r for r in self.runs if r.status == "pending"]
        free = list(self.slots)
        while queue or any(r.process is not None for r in self.runs):
            while queue and free and self.stop_reason is None:
                slot = free.pop(0)
                if not self._start(queue.pop(0), slot, table):
                    free.append(slot)
            for run in self.runs:
                if run.process is None:
                    continue
                code = run.process.poll()
                if code is None:
                    table.show(run)
                    continue
                assert run.slot is not None and run.exit_dir is not None
                slot = run.slot
                self._finish(run, placement.exit_code(slot, code, run.exit_dir), table)
                free.append(slot)
            self._check_budget()
            if self.stop_reason is not None:
                queue.clear()
            time.sleep(self.options.poll_s)
