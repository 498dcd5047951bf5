"""W&B (offline) and TensorBoard with the real libraries: what a run logs is read back from their own files,
and the W&B key from a mounted Secret file is never written anywhere in the run directory."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.training.test_trainer_inprocess import run
from trm.errors import TRMError
from trm.training.metrics_log import wandb_api_key

FAKE_KEY = "local-0123456789abcdef0123456789abcdef01234567"  # a W&B key's shape; offline never sends it
BLOCK = 32768  # the .wandb transaction log: LevelDB's log format, 32 KiB blocks


def wandb_records(path: Path) -> Iterator[object]:
    """The protobuf `Record`s of a .wandb file (after its 7-byte `:W&B` header; chunks FULL or FIRST..LAST)."""
    wandb_pb = pytest.importorskip("wandb.proto.wandb_internal_pb2")
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, pending = 7, b""
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:  # a block's tail too short for a header is padding
            pos += BLOCK - pos % BLOCK
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL, LAST
            record = wandb_pb.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


@pytest.fixture
def offline_wandb(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ("WANDB_API_KEY", "WANDB_DISABLED", "WANDB_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    secret = tmp_path / "secret" / "wandb-api-key"
    secret.parent.mkdir()
    secret.write_text(FAKE_KEY + "\n")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_CONSOLE", "off")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_ENTITY", "trm-team")
    monkeypatch.setenv("WANDB_RUN_GROUP", "suite-7")
    monkeypatch.setenv("WANDB_API_KEY_FILE", str(secret))
    return secret


def test_offline_wandb_and_tensorboard_hold_every_metric_and_never_the_key(
    offline_wandb: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    pytest.importorskip("wandb.proto.wandb_internal_pb2")
    run_dir = tmp_path / "run"
    code, trainer = run(run_dir, "wandb=true", "tensorboard=true", "project_name=trm-test")
    assert code == 0
    steps = trainer.progress.step

    (wandb_file,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    records = list(wandb_records(wandb_file))
    (started,) = [r.run for r in records if r.WhichOneof("record_type") == "run" and r.run.run_id]
    assert (started.project, started.entity, started.run_group) == ("trm-test", "trm-team", "suite-7")
    history = [
        {i.key or "/".join(i.nested_key): i.value_json for i in r.history.item}
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]
    train = [h for h in history if "train/lm_loss" in h]
    assert [int(h["_step"]) for h in train] == list(range(1, steps + 1))
    assert all(float(h["perf/step_seconds"]) > 0 and "perf/examples_per_second" in h for h in train)

    events = event_accumulator.EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert {"train/lm_loss", "perf/step_seconds", "perf/tokens_per_second", "num_params"} <= set(tags)
    assert [e.step for e in events.Scalars("perf/step_seconds")] == list(range(1, steps + 1))
    assert "perf/mfu" not in tags  # CPU: no peak FLOP/s, so no MFU

    key = FAKE_KEY.encode()
    leaked = [p for p in run_dir.rglob("*") if p.is_file() and key in p.read_bytes()]
    assert leaked == []
    out, err = capfd.readouterr()
    assert FAKE_KEY not in out + err + caplog.text


def test_key_from_environment_or_secret_file_with_clear_errors(tmp_path: Path) -> None:
    assert wandb_api_key({}) is None
    assert wandb_api_key({"WANDB_API_KEY": "abc", "WANDB_API_KEY_FILE": "/nonexistent"}) == "abc"
    secret = tmp_path / "key"
    secret.write_text("  from-file\n")
    assert wandb_api_key({"WANDB_API_KEY_FILE": str(secret)}) == "from-file"
    with pytest.raises(TRMError, match=r"WANDB_API_KEY_FILE=.*/missing: cannot read it .*mount the Secret"):
        wandb_api_key({"WANDB_API_KEY_FILE": str(tmp_path / "missing")})
    secret.write_text("\n")
    with pytest.raises(TRMError, match="is empty"):
        wandb_api_key({"WANDB_API_KEY_FILE": str(secret)})
