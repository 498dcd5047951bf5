"""The probe part on the record trm.launch.supervision.probe writes (GPU-free)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.tools.gpu.check.helpers import fake_ctx
from tools.gpu.check import probe


def _fake_probe(step_seconds: float | None, steps_timed: int):
    """A `run_command` that writes the record trm.launch.supervision.probe writes for an H100 at micro-batch 192."""

    def fake_run(cmd, ctx, *, timeout_s, log_name, env=None):
        assert (
            cmd[-2:] == ["select-config", "--probe"]
            and env["TASK"] == "arc2-smoke"
            and env["NUM_GPUS"] == "1"
        )
        assert env["PROBE_STEPS"] == str(probe.PROBE_STEPS["quick"])
        launch = Path(env["WORKSPACE"]) / "checkpoints" / "gpu-acceptance-probe" / "launch"
        launch.mkdir(parents=True)
        attempt = {"micro_batch_size": 192, "returncode": 0, "out_of_memory": False, "peak_mib": {"0": 41234},
                   "vram_mib": 81559, "step_seconds": step_seconds, "steps_timed": steps_timed}  # fmt: skip
        record = {"tier": "h100-80g", "table_micro_batch_size": 192, "chosen_micro_batch_size": 192,
                  "attempts": [attempt], "drift": []}  # fmt: skip
        (launch / "probe.json").write_text(json.dumps(record))
        return 0, "micro-batch 192 fits"

    return fake_run


def test_probe_part_reads_the_probe_record(tmp_path: Path, monkeypatch) -> None:
    """The record as trm.launch.supervision.probe writes it; the part compares it with the table (GPU-free)."""
    monkeypatch.setattr(probe, "run_command", _fake_probe(1.21, 2))
    outcome = probe.probe(fake_ctx(tmp_path))
    assert outcome.status == "pass", outcome
    assert outcome.data["peak_fraction_of_vram"] == round(41234 / 81559, 3)
    assert outcome.data["tier_min_vram_gib"] == 75
    assert outcome.summary == (
        "tier h100-80g micro-batch 192 → 192; peak 41234 MiB of 81559 MiB (51%); 1.21 s/step over 2 step(s)"
    )


def test_a_probe_that_timed_no_step_fails(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(probe, "run_command", _fake_probe(None, 0))
    outcome = probe.probe(fake_ctx(tmp_path))
    assert outcome.status == "fail" and outcome.summary.endswith("; no step timed")
