"""The SDPA backend micro-bench (tools.bench.sdpa) on CPU: part of the harness the GPU check's call 2 runs."""

from __future__ import annotations

import json

from tools.bench import sdpa


def test_sdpa_bench_runs_the_math_backend_on_cpu_and_names_why_the_others_cannot(capsys) -> None:
    assert (sdpa.HEAD_DIM, sdpa.HEADS, sdpa.SEQ) == (64, 8, 916)  # the paper shape (hidden 512, 900 + 16)
    assert sdpa.main(["--device", "cpu", "--batch", "1", "--seq", "32", "--repeats", "2", "--json"]) == 0
    out = capsys.readouterr().out
    result = json.loads(out.strip().splitlines()[-1])
    backends = result["backends"]
    assert list(backends) == ["cudnn", "flash", "efficient", "math"]
    assert backends["math"]["ms"] > 0 and result["fastest"] == "math" and result["measured"] is True
    assert all(
        backends[b] == {"unsupported": f"{b} runs on CUDA only"} for b in ("cudnn", "flash", "efficient")
    )
    assert "(measured, median of 2)" in out and "math" in out


def test_sdpa_bench_refuses_cuda_without_a_gpu(capsys, monkeypatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert sdpa.main(["--device", "cuda"]) == 2
    assert "use --device cpu" in capsys.readouterr().err
