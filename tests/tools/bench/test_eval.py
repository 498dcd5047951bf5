"""The evaluation benchmark's plumbing (timings are never asserted)."""

from __future__ import annotations

import functools

import torch

from tests.helpers import small_config
from tools.bench import eval as eval_bench


def test_eval_bench_reports_rows_per_second_of_both_and_their_ratio(monkeypatch, capsys):
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    config = small_config(batch_size=4, puzzle_emb_ndim=0, puzzle_emb_len=0)
    monkeypatch.setitem(eval_bench.CONFIGS, "tiny", lambda arch: config)
    torch._dynamo.reset()
    try:
        assert eval_bench.main(["--device", "cpu", "--repeats", "1", "--batches", "2", "--chunk", "3"]) == 0
    finally:
        torch._dynamo.reset()
    out = capsys.readouterr().out
    assert "chunk=3 rows/pass=8 (batches of 3+1)" in out  # --chunk; a short last chunk: the padded path runs
    for variant in ("eager flag", "eager fixed", "compiled flag", "compiled fixed"):
        assert f"{variant} " in out and "rows/s" in out
    assert "eager: fixed steps vs flag read every step: " in out
    assert "speedup compiled vs eager evaluation: " in out
    assert "eager: predictions of both loops identical: True" in out
    assert "compiled: predictions of both loops identical: True" in out
    assert "predictions identical in 100.0% of rows" in out  # dynamo's eager backend: same kernels
