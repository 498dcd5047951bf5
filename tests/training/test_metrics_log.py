"""Metric files and the W&B switch: long-format CSV, JSONL, truncation on resume, off by default."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from trm.training.metrics_log import MetricsLog, wandb_wanted


def test_jsonl_and_long_csv_and_truncation_on_resume(tmp_path: Path) -> None:
    log = MetricsLog(tmp_path)
    for step in (1, 2, 3):
        log.log(step, {"train/lm_loss": step / 10, "train/lr": 1e-3})
    log.log(3, {"ARC/pass@2": float("nan")})
    log.close()
    with open(tmp_path / "metrics.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["step", "wall_time", "name", "value"]
    assert [r[0] for r in rows[1:]] == ["1", "1", "2", "2", "3", "3", "3"]
    assert rows[1][2:] == ["train/lm_loss", "0.1"] and rows[-1][2:] == ["ARC/pass@2", ""]
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 4, "train/lm')  # torn by a kill

    resumed = MetricsLog(tmp_path, resume_step=2)  # the checkpoint was at step 2
    resumed.log(3, {"train/lm_loss": 0.25})
    resumed.close()
    steps = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]
    with open(tmp_path / "metrics.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["step", "wall_time", "name", "value"] and rows[-1][2:] == ["train/lm_loss", "0.25"]
    assert len(rows) == 1 + 4 + 1

    MetricsLog(tmp_path).close()  # a fresh run in the same directory starts empty
    assert (tmp_path / "metrics.jsonl").read_text() == ""


@pytest.mark.parametrize(
    ("setting", "env", "wanted"),
    [
        ("auto", {}, False),
        ("auto", {"WANDB_MODE": "offline"}, True),
        ("auto", {"WANDB_MODE": "online", "WANDB_DISABLED": "true"}, False),
        ("auto", {"WANDB_MODE": "online", "WANDB_DISABLED": ""}, True),
        ("true", {}, True),
        ("true", {"WANDB_MODE": "disabled"}, False),
        ("false", {"WANDB_MODE": "online"}, False),
    ],
)
def test_wandb_is_off_unless_asked(
    monkeypatch: pytest.MonkeyPatch, setting: str, env: dict, wanted: bool
) -> None:
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_DISABLED", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert wandb_wanted(setting) is wanted
