"""The optional bench parts on recorded outputs: the model bench, the checkpoint bench, the evaluation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.tools.gpu.check.helpers import fake_ctx
from tools.gpu.check import bench


def test_bench_output_parsing() -> None:
    output = "\n".join(
        [
            "config=paper device=cuda threads=16 batch=192 seq=916 hidden=512 H=3 L=4 layers=2 dtype=bfloat16",
            "ours/eager              412.3 ms/step   2.43 steps/s (first step 3.1 s) mfu=21.5%",
            "upstream/eager          530.0 ms/step   1.89 steps/s (first step 3.4 s) mfu=16.7%",
            "ours/compiled           301.9 ms/step   3.31 steps/s (first step 48.2 s) mfu=29.4%",
            "speedup eager: 1.29x vs upstream",
        ]
    )
    parsed = bench.parse_bench(output)
    assert parsed["variants"]["ours/compiled"] == {
        "ms_per_step": 301.9, "steps_per_s": 3.31, "mfu": 0.294, "first_step_s": 48.2
    }  # fmt: skip
    assert parsed["variants"]["upstream/eager"]["mfu"] == pytest.approx(0.167)
    assert parsed["speedup_vs_upstream"] == {"eager": 1.29}
    no_peak = bench.parse_bench("ours/eager   10.0 ms/step 100.00 steps/s (first step 0.1 s)")
    assert no_peak["variants"]["ours/eager"]["mfu"] is None


def test_bench_part_requires_the_upstream_comparison_when_asked(tmp_path: Path, monkeypatch) -> None:
    line = "ours/compiled           301.9 ms/step   3.31 steps/s (first step 48.2 s) mfu=29.4%"
    monkeypatch.setattr(bench, "run_command", lambda *a, **k: (0, line))
    outcome = bench.bench(fake_ctx(tmp_path))
    assert outcome.status == "pass" and "301.9 ms/step, MFU 29.4%, compile 48 s" in outcome.summary
    assert "upstream not compared" in outcome.summary
    failed = bench.bench(fake_ctx(tmp_path, TRM_UPSTREAM="/opt/upstream"))
    assert failed.status == "fail" and "no comparison came out" in failed.summary


MODES_OUTPUT = "\n".join(
    [
        "arch=trm config=paper device=cuda threads=16 batch=192 seq=916 hidden=512 dtype=bfloat16",
        "ours/eager              412.3 ms/step   2.43 steps/s (first step 3.1 s) mfu=21.5%",
        "ours/compiled           301.9 ms/step   3.31 steps/s (first step 48.2 s) mfu=29.4%",
        "ours/max-autotune-no-cudagraphs    270.0 ms/step   3.70 steps/s (first step 190.4 s) mfu=32.9%",
        "compile mode max-autotune-no-cudagraphs: 1.12x vs the default mode (ours; above 1: faster)",
    ]
)


def test_compile_modes_part_reads_the_modes_ratio(tmp_path: Path, monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(bench, "run_command", lambda cmd, *a, **k: calls.append(cmd) or (0, MODES_OUTPUT))
    outcome = bench.compile_modes(fake_ctx(tmp_path))
    assert outcome.status == "pass", outcome
    assert outcome.summary == (
        "paper step, max-autotune-no-cudagraphs 270.0 ms/step against default 301.9: 1.12x "
        "(first step 190 s against 48 s)"
    )
    assert outcome.data["speedup_vs_default_mode"] == {"max-autotune-no-cudagraphs": 1.12}
    assert calls[0][calls[0].index("--compile-mode") + 1] == bench.COMPILE_MODE
    monkeypatch.setattr(bench, "run_command", lambda *a, **k: (1, MODES_OUTPUT.rsplit("\n", 1)[0]))
    assert bench.compile_modes(fake_ctx(tmp_path)).status == "fail"


CHECKPOINT_JSON = {
    "device": "cuda:0", "identifiers": 1191730, "puzzle_emb_ndim": 512, "puzzle_table_mb": 2440.663,
    "checkpoint_mb": 4890.1, "sync_save_s": 9.5, "async_first_blocked_s": 2.1, "async_blocked_s": 0.41,
    "async_total_s": 9.9, "blocked_share": 0.0432, "target_share": 0.1, "identical": True, "files": {"a": "b"},
}  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "status"),
    [({}, "pass"), ({"identical": False}, "fail"), ({"device": "cpu"}, "fail")],
)
def test_checkpoint_part_reads_the_bench_json(tmp_path: Path, monkeypatch, changes, status) -> None:
    """The bench's stderr line comes first in the merged output; the state must have been on the GPU and
    every save must have written the same files."""
    record = {**CHECKPOINT_JSON, **changes}
    output = "cpu cores: 16, load average: 1.0, work dir: /x\n" + json.dumps(record, indent=2) + "\n"

    def fake_run(cmd, ctx, *, timeout_s, log_name, env=None):
        assert cmd[2:] == [
            "tools.bench.checkpoint",
            "--device",
            "cuda",
            "--json",
            "--dir",
            str(tmp_path / "checkpoint-bench"),
        ]
        return 0, output

    monkeypatch.setattr(bench, "run_command", fake_run)
    outcome = bench.checkpoint_save(fake_ctx(tmp_path))
    assert outcome.status == status, outcome
    assert "files" not in outcome.data and outcome.data["async_blocked_s"] == 0.41
    if status == "pass":
        assert "asynchronous blocks the loop 0.410 s (4.3%, target ≤ 10%)" in outcome.summary
    monkeypatch.setattr(bench, "run_command", lambda *a, **k: (1, "Traceback …\nRuntimeError: CUDA error"))
    broken = bench.checkpoint_save(fake_ctx(tmp_path))
    assert broken.status == "fail" and "without its JSON" in broken.summary


def test_eval_part_parses_rows_per_second(tmp_path: Path, monkeypatch) -> None:
    output = "\n".join(
        [
            "config=paper device=cuda threads=16 chunk=192 rows/pass=480 (batches of 192+48) halt_max_steps=16",
            "compiled: first pass (compiles) 41.5 s",
            "eager        812.4 rows/s (median of 2 passes: 0.59 0.60 s)",
            "compiled    1650.0 rows/s (median of 2 passes: 0.29 0.29 s)",
            "speedup compiled vs eager evaluation: 2.03x",
            "predictions identical in 99.6% of rows",
        ]
    )
    assert bench.parse_eval(output) == {
        "rows_per_s": {"eager": 812.4, "compiled": 1650.0},
        "first_compiled_pass_s": 41.5,
        "identical_predictions": pytest.approx(0.996),
    }
    monkeypatch.setattr(bench, "run_command", lambda *a, **k: (0, output))
    outcome = bench.evaluation(fake_ctx(tmp_path))
    assert outcome.status == "pass"
    assert outcome.summary == (
        "paper config: eager 812.4 rows/s, compiled 1650.0 rows/s (2.03x); compiling pass 41.5 s"
    )
    monkeypatch.setattr(bench, "run_command", lambda *a, **k: (0, output.replace("compiled    1650.0", "x")))
    assert bench.evaluation(fake_ctx(tmp_path)).status == "fail"
