"""Metric sinks for rank 0: metrics.jsonl + metrics.csv (long format) in the run dir, optional W&B / TensorBoard.

W&B takes its project from `project_name`, and WANDB_ENTITY / WANDB_RUN_GROUP from the environment; the API
key only from WANDB_API_KEY or the file WANDB_API_KEY_FILE names (a mounted Secret). The key is handed to
W&B in memory and never logged or written by us.

Telemetry never stops or holds up training, except for a missing or refused W&B key (a TRMError, exit 2,
before the first step): W&B's start is limited to WANDB_INIT_TIMEOUT_S and its final upload to
WANDB_FINISH_TIMEOUT_S, and a sink that fails (W&B unreachable at start, TensorBoard's folder unwritable or
its disk full) is dropped with one warning while metrics.jsonl and metrics.csv go on.

Files are appended line by line and flushed; on resume the rows logged after the resumed checkpoint's
step (by a run killed before its next save) are dropped, so a resumed run logs exactly what an
uninterrupted one would.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trm.errors import TRMError
from trm.extras import install_hint
from trm.io import atomic_write_text
from trm.secrets import redact

log = logging.getLogger(__name__)

JSONL = "metrics.jsonl"
CSV = "metrics.csv"
CSV_HEADER = ("step", "wall_time", "name", "value")
TENSORBOARD_DIR = "tensorboard"  # TensorBoard's event files, under the run directory


KEY_FILE_VAR = "WANDB_API_KEY_FILE"
# wandb.init gives up after this many seconds (W&B's default is 90), and run.finish stops uploading after
# this many (W&B's default: never); what was not uploaded stays in <run_dir>/wandb for `wandb sync`.
WANDB_INIT_TIMEOUT_S = 60.0
WANDB_FINISH_TIMEOUT_S = 60.0
KEY_FIX = (
    "set WANDB_API_KEY, or WANDB_API_KEY_FILE naming a file that holds it (a key from wandb.ai/authorize), or "
    "run without uploading: WANDB_MODE=offline or wandb=false (launcher: WANDB=offline or off)"
)


def wandb_api_key(env: Mapping[str, str] = os.environ) -> str | None:
    """The W&B API key: WANDB_API_KEY, else the contents of the file WANDB_API_KEY_FILE names; None if neither.

    Errors name the file, never the key."""
    key = env.get("WANDB_API_KEY", "").strip()
    if key:
        return key
    path = env.get(KEY_FILE_VAR, "").strip()
    if not path:
        return None
    try:
        key = Path(path).read_text(encoding="utf-8").strip()
    except OSError as err:
        raise TRMError(
            f"{KEY_FILE_VAR}={path}: cannot read it ({err.strerror or err}); mount the Secret holding the "
            f"W&B API key there, or unset {KEY_FILE_VAR}"
        ) from None
    if not key:
        raise TRMError(f"{KEY_FILE_VAR}={path} is empty; put the W&B API key in it (one line)")
    return key


def wandb_wanted(setting: str) -> bool:
    """W&B is off by default: on with wandb=true, or wandb=auto and WANDB_MODE online/offline.

    WANDB_DISABLED set to anything but an empty string (as W&B reads it) or WANDB_MODE=disabled always wins.
    """
    if os.environ.get("WANDB_DISABLED", "").strip() or os.environ.get("WANDB_MODE") == "disabled":
        return False
    if setting == "true":
        return True
    return setting == "auto" and os.environ.get("WANDB_MODE") in ("online", "offline")


class MetricsLog:
    """Writes scalar metrics as `{step, wall_time, name: value...}` JSON lines and `step,wall_time,name,value`."""

    def __init__(self, run_dir: Path, *, resume_step: int | None = None) -> None:
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.jsonl_path = run_dir / JSONL
        self.csv_path = run_dir / CSV
        if resume_step is None:
            self._truncate(-1)
        else:
            self._truncate(resume_step)
        new_csv = not self.csv_path.exists() or self.csv_path.stat().st_size == 0
        self._jsonl = open(self.jsonl_path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())
        self._csv_file = open(self.csv_path, "a", encoding="utf-8", newline="")  # noqa: SIM115
        self._csv = csv.writer(self._csv_file)
        if new_csv:
            self._csv.writerow(CSV_HEADER)
        self._extra: list[Any] = []

    def _truncate(self, step: int) -> None:
        """Keep only rows with step ≤ `step` (−1: start empty)."""
        for path, keep in ((self.jsonl_path, _keep_jsonl), (self.csv_path, _keep_csv)):
            if path.exists():
                text = path.read_text(encoding="utf-8")
                kept = keep(text, step)
                if kept != text:
                    atomic_write_text(path, kept)

    def add_sink(self, sink: Any) -> None:
        """Also send every record to `sink.log(metrics: dict, step: int)` (W&B, TensorBoard)."""
        self._extra.append(sink)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Append one record (non-finite values are written as null / empty)."""
        if not metrics:
            return
        wall = round(time.time(), 3)
        clean = {k: (float(v) if math.isfinite(float(v)) else None) for k, v in metrics.items()}
        self._jsonl.write(json.dumps({"step": step, "wall_time": wall, **clean}) + "\n")
        for name, value in clean.items():
            self._csv.writerow((step, wall, name, "" if value is None else repr(value)))
        self._jsonl.flush()
        self._csv_file.flush()
        for sink in list(self._extra):
            try:
                sink.log(metrics, step)
            except Exception as err:  # a sink never stops training: the files above hold the metrics
                self._extra.remove(sink)
                _warn_sink_failed(sink, f"stopped at step {step}", err)
                _close_quietly(sink)

    def close(self) -> None:
        """Flush and close the files and sinks (a sink's failure to close is a warning)."""
        self._jsonl.close()
        self._csv_file.close()
        for sink in self._extra:
            try:
                sink.close()
            except Exception as err:
                _warn_sink_failed(sink, "failed to close", err)


def _warn_sink_failed(sink: Any, what: str, err: BaseException) -> None:
    log.warning(
        "%s %s (%s); the run goes on without it, every metric is in metrics.jsonl and metrics.csv",
        getattr(sink, "name", type(sink).__name__),
        what,
        _one_line(err),
    )


def _close_quietly(sink: Any) -> None:
    try:
        sink.close()
    except Exception:  # already reported: the sink failed
        log.debug("closing a failed sink failed too", exc_info=True)


def _one_line(err: BaseException) -> str:
    """`err` as one line, without a secret in it (the W&B key in use, tokens, URL credentials)."""
    text = f"{type(err).__name__}: {err}".splitlines()[0]
    try:
        key = wandb_api_key()
    except TRMError:
        key = None
    return redact(text, [key])


def _keep_jsonl(text: str, step: int) -> str:
    lines = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line torn by a kill mid-write
        if row.get("step", step + 1) <= step:
            lines.append(line)
    return "".join(line + "\n" for line in lines)


def _keep_csv(text: str, step: int) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_HEADER)
    for row in list(csv.reader(io.StringIO(text)))[1:]:
        if len(row) == 4 and row[0].isdigit() and int(row[0]) <= step:
            writer.writerow(row)
    return out.getvalue() if step >= 0 else ""


class WandbSink:
    """W&B run (only built when `wandb_wanted`): WANDB_ENTITY and WANDB_RUN_GROUP from the environment, the
    key from `wandb_api_key` (else W&B's own login), passed in memory only.

    A missing or refused key stops the run (TRMError, exit 2); W&B failing to start otherwise (unreachable,
    5xx, no answer within WANDB_INIT_TIMEOUT_S) is a warning and the run goes on without W&B."""

    name = "W&B"

    def __init__(self, project: str, name: str, config: dict[str, Any], run_dir: Path) -> None:
        self._run = None
        try:
            import wandb
        except ImportError:
            log.warning("W&B requested but not installed (%s). Logging to files only.", install_hint("wandb"))
            return
        key = wandb_api_key()
        settings = wandb.Settings(init_timeout=WANDB_INIT_TIMEOUT_S, finish_timeout=WANDB_FINISH_TIMEOUT_S)
        if key:
            settings.api_key = key
        try:
            self._run = wandb.init(
                project=project,
                entity=os.environ.get("WANDB_ENTITY", "").strip() or None,
                group=os.environ.get("WANDB_RUN_GROUP", "").strip() or None,
                name=name,
                config=config,
                dir=str(run_dir),
                resume="allow",
                id=_wandb_id(run_dir),
                settings=settings,
            )
        except Exception as err:
            refused = _key_refused(err)
            if refused:
                raise TRMError(refused) from None
            log.warning(
                "W&B did not start (%s); this run goes on without W&B (every metric is in metrics.jsonl and "
                "metrics.csv), the next start of the run tries again",
                _one_line(err),
            )

    def log(self, metrics: dict[str, float], step: int) -> None:
        if self._run is not None:
            self._run.log(metrics, step=step)

    def close(self) -> None:
        if self._run is not None:
            import wandb

            self._run.finish()
            wandb.teardown()  # waits until W&B's service has written everything (the .wandb file included)


def _key_refused(err: Exception) -> str | None:
    """The one-line error for a W&B start that failed for want of a valid key; None for any other failure."""
    from wandb.errors import AuthenticationError, CommError, UsageError

    where = os.environ.get("WANDB_BASE_URL", "").strip() or "api.wandb.ai"
    if isinstance(err, UsageError) and "api key" in str(err).lower():
        return f"W&B has no API key: {KEY_FIX}"
    # The status W&B reports, not one quoted in the server's answer (its JSON body follows the status).
    status = re.search(r"\b(?:error|status|HTTP) (40[13])\b", str(err).split("{", 1)[0])
    if isinstance(err, AuthenticationError) or (isinstance(err, CommError) and status):
        if (
            status and status.group(1) == "403"
        ):  # a valid key without access to the entity/project, or a proxy
            return f"W&B ({where}) refused the API key or its access to WANDB_ENTITY/project_name (HTTP 403): {KEY_FIX}"
        code = f"HTTP {status.group(1)}" if status else "authentication failed"
        return f"W&B ({where}) refused the API key ({code}): {KEY_FIX}"
    return None


def _wandb_id(run_dir: Path) -> str:
    import hashlib

    return hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:16]


class TensorBoardSink:
    """TensorBoard event files under `<run_dir>/tensorboard`."""

    name = "TensorBoard"

    def __init__(self, run_dir: Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise TRMError(
                f"tensorboard=true needs the tensorboard package: {install_hint('tensorboard')}; or set "
                "tensorboard=false (launcher: TENSORBOARD=0)."
            ) from None
        self._writer: Any = None
        try:
            self._writer = SummaryWriter(str(run_dir / TENSORBOARD_DIR))
        except OSError as err:  # the folder cannot be made or written (a file in its place, a full disk)
            _warn_sink_failed(self, f"cannot write {run_dir / TENSORBOARD_DIR}", err)

    def log(self, metrics: dict[str, float], step: int) -> None:
        if self._writer is not None:
            for name, value in metrics.items():
                self._writer.add_scalar(name, value, step)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
