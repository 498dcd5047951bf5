"""The evaluation benchmark's plumbing (timings are never asserted)."""

from __future__ import annotations

import functools

import torch

from tests.helpers import small_config
from tools.bench import eval as eval_bench
from tools.gpu.check.bench import parse_eval


def test_eval_bench_reports_rows_per_second_of_both_and_their_ratio(monkeypatch, capsys):
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    config = small_config(batch_size=4, puzzle_emb_ndim=0, puzzle_emb_len=0)
    monkeypatch.setitem(eval_bench.CONFIGS, "tiny", lambda arch: config)
    torch._dynamo.reset()
    try:
        argv = ["--device", "cpu", "--repeats", "1", "--batches", "2", "--chunk", "3", "--flag-loop"]
        assert eval_bench.main(argv) == 0
    finally:
        torch._dynamo.reset()
    out = capsys.readouterr().out
    assert "chunk=3 rows/pass=8 (batches of 3+1)" in out  # --chunk; a short last chunk: the padded path runs
    for name in (
        "eager",
        "eager flag-read",
        "compiled",
        "compiled flag-read",
    ):  # --flag-loop adds the old loop
        assert any(line.startswith(f"{name} ") and "rows/s" in line for line in out.splitlines()), name
    assert "speedup compiled vs eager evaluation: " in out
    assert "eager: fixed steps vs the flag read every step: " in out
    assert out.count("predictions identical: True") == 2  # both loops, eager and compiled
    assert "predictions identical in 100.0% of rows" in out  # dynamo's eager backend: same kernels
    # The GPU check reads the evaluator's own eager and compiled lines, not the flag-read ones.
    assert parse_eval(out)["rows_per_s"].keys() == {"eager", "compiled"}
