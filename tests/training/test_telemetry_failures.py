"""What a misbehaving W&B or TensorBoard costs a run: the real wandb client against a local HTTP server on
127.0.0.1 (a refused key, no answer, an answer that stops mid-run), TensorBoard's real writer on a folder it
cannot make or a disk that fills. A refused or missing key stops the run before training with one line
(exit 2); anything else is a warning, bounded in time, and metrics.jsonl keeps every metric."""

from __future__ import annotations

import errno
import json
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.training.test_telemetry_sinks import FAKE_KEY
from tests.training.test_trainer_inprocess import make_trainer, run
from trm import exit_codes
from trm.errors import TRMError
from trm.training import metrics_log
from trm.training.metrics_log import MetricsLog, TensorBoardSink, WandbSink


class FakeWandb(BaseHTTPRequestHandler):
    """`status` 401: every request refused; "hang": no request answered; "ok": just enough GraphQL for
    wandb-core to start a run, until `hang` is set."""

    status: int | str = "ok"
    hang = threading.Event()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.status == "hang" or self.hang.is_set():
            time.sleep(600)  # a daemon thread: never answers
            return
        code, data = (self.status, {}) if isinstance(self.status, int) else (200, self.answer(body))
        payload = json.dumps({"data": data, "errors": [{"message": "nope"}] if code != 200 else None})
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload.encode())

    do_GET = do_PUT = do_POST

    def answer(self, body: bytes) -> dict[str, object]:
        if not self.path.startswith("/graphql"):
            return {}
        query = json.loads(body)
        op, var = query.get("operationName") or "", query.get("variables") or {}
        if op == "UpsertBucket":
            project = {"id": "UA==", "name": var.get("project") or "p", "entity": {"id": "RQ==", "name": "e"}}
            bucket = {"id": "Qg==", "name": var.get("name") or "r", "displayName": "n", "project": project}
            return {"upsertBucket": {"bucket": bucket, "inserted": True}}
        if op == "CreateRunFiles":
            files = [{"name": f, "uploadUrl": f"http://{self.headers['Host']}/up/{f}"} for f in var["files"]]
            return {"createRunFiles": {"runID": "Ug==", "uploadHeaders": [], "files": files}}
        if op == "Viewer":
            return {"viewer": {"id": "VQ==", "entity": "e", "username": "u", "flags": "{}"}}
        return {"model": None, "project": None, "serverInfo": None}

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def local_wandb(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[type[FakeWandb]]:
    """W&B online against a server on 127.0.0.1 (set `.status` before starting W&B), with the fake key."""
    wandb = pytest.importorskip("wandb")
    wandb.teardown()  # W&B keeps a process-wide session (its key, its server) from an earlier test
    handler = type("Handler", (FakeWandb,), {"hang": threading.Event()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    for name in ("WANDB_DISABLED", "WANDB_API_KEY_FILE", "WANDB_ENTITY", "WANDB_RUN_GROUP", "WANDB_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # no ~/.netrc login to fall back on
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(home / name.lower()))
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    monkeypatch.setenv("WANDB_CONSOLE", "off")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_X_DISABLE_STATS", "true")
    yield handler
    wandb.teardown()
    handler.hang.clear()
    server.shutdown()


def no_key_in(run_dir: Path, *texts: str) -> None:
    key = FAKE_KEY.encode()
    assert [p for p in run_dir.rglob("*") if p.is_file() and key in p.read_bytes()] == []
    assert all(FAKE_KEY not in text for text in texts)


@pytest.mark.e2e
def test_a_refused_key_stops_before_training_with_one_line(
    local_wandb: type[FakeWandb],
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    local_wandb.status = 401
    run_dir = tmp_path / "run"
    with pytest.raises(TRMError) as caught:
        make_trainer(run_dir, "wandb=true")
    message = str(caught.value)
    assert caught.value.exit_code == exit_codes.CONFIG_ERROR
    assert "refused the API key (HTTP 401)" in message and "WANDB_API_KEY" in message and "\n" not in message
    assert not (run_dir / "metrics.jsonl").read_text()  # nothing trained
    out, err = capfd.readouterr()
    no_key_in(run_dir, message, out, err, caplog.text)


@pytest.mark.e2e
def test_a_missing_key_stops_with_one_line_naming_the_variables(
    local_wandb: type[FakeWandb], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("WANDB_API_KEY")
    with pytest.raises(
        TRMError, match=r"^W&B has no API key: set WANDB_API_KEY, or WANDB_API_KEY_FILE"
    ) as caught:
        WandbSink("p", "n", {}, tmp_path / "run")
    assert caught.value.exit_code == exit_codes.CONFIG_ERROR


@pytest.mark.e2e
def test_w_and_b_not_answering_at_start_costs_a_bounded_wait_and_a_warning(
    local_wandb: type[FakeWandb],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    local_wandb.status = "hang"
    monkeypatch.setattr(metrics_log, "WANDB_INIT_TIMEOUT_S", 2.0)
    run_dir = tmp_path / "run"
    start = time.monotonic()
    with caplog.at_level(logging.WARNING):
        code, trainer = run(run_dir, "wandb=true")
    assert code == 0
    assert time.monotonic() - start < 2.0 + 30  # W&B adds a 10 s grace to its own limit
    assert "W&B did not start (CommError: " in caplog.text and "goes on without W&B" in caplog.text
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "train/lm_loss" in r] == list(range(1, trainer.progress.step + 1))
    out, err = capfd.readouterr()
    no_key_in(run_dir, out, err, caplog.text)


@pytest.mark.e2e
def test_w_and_b_stopping_mid_run_never_holds_up_the_end_for_long(
    local_wandb: type[FakeWandb],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(metrics_log, "WANDB_FINISH_TIMEOUT_S", 2.0)
    run_dir = tmp_path / "run"
    sink = WandbSink("p", "n", {}, run_dir)
    assert sink._run is not None
    sink.log({"x": 0.0}, 0)
    local_wandb.hang.set()
    for step in range(1, 50):
        sink.log({"x": float(step)}, step)  # queued: never waits for the server
    closed = threading.Event()
    threading.Thread(target=lambda: (sink.close(), closed.set()), daemon=True).start()
    assert closed.wait(60), "run.finish still uploading to a server that never answers"
    out, err = capfd.readouterr()
    no_key_in(run_dir, out, err)


@pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnhandledThreadExceptionWarning"
)  # TensorBoard's writer thread
def test_tensorboard_on_a_full_disk_is_dropped_and_the_files_keep_every_metric(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    record_writer = pytest.importorskip("tensorboard.summary.writer.record_writer")
    log = MetricsLog(tmp_path)
    log.add_sink(TensorBoardSink(tmp_path))
    log.log(1, {"loss": 1.0})

    def no_space(self: object, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(record_writer.RecordWriter, "write", no_space)
    with caplog.at_level(logging.WARNING):
        for step in range(2, 40):
            log.log(step, {"loss": 1.0 / step})
            time.sleep(0.005)  # the writer's thread meets the full disk; a later log sees its error
        log.close()
    rows = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows == list(range(1, 40))
    assert caplog.text.count("TensorBoard stopped at step") == 1
    assert "No space left on device" in caplog.text and "every metric is in metrics.jsonl" in caplog.text


def test_tensorboard_folder_that_cannot_be_made_is_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("torch.utils.tensorboard")
    (tmp_path / "tensorboard").write_text("a file where the folder goes")
    log = MetricsLog(tmp_path)
    with caplog.at_level(logging.WARNING):
        log.add_sink(TensorBoardSink(tmp_path))
    log.log(1, {"loss": 1.0})
    log.close()
    assert "TensorBoard cannot write" in caplog.text and "FileExistsError" in caplog.text
    assert json.loads((tmp_path / "metrics.jsonl").read_text())["loss"] == 1.0


def test_only_the_status_w_and_b_reports_counts_as_a_refused_key() -> None:
    """A 4xx whose answer merely quotes a 401/403 in its JSON body is no refused key (a warning, the run goes
    on); a 403 may be the project's access rather than the key, and says so."""
    from wandb.errors import CommError

    from trm.training.metrics_log import _key_refused

    assert "(HTTP 401)" in (_key_refused(CommError("api.wandb.ai returned error 401: unauthorized")) or "")
    assert "access to WANDB_ENTITY/project_name (HTTP 403)" in (
        _key_refused(CommError('returned error 403: {"errors": ["permission denied"]}')) or ""
    )
    assert _key_refused(CommError('returned error 404: {"data": "see status 401 on the login page"}')) is None
    assert _key_refused(CommError("context deadline exceeded")) is None
