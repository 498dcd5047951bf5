"""The model benchmark's plumbing (timings themselves are never asserted)."""

from __future__ import annotations

import torch

from tests.helpers import small_config
from trm.bench.model import Runner, build_ours, main, step_flops, time_interleaved


def test_bad_upstream_path_exits_2_with_message(tmp_path, capsys):
    assert main(["--upstream", str(tmp_path), "--steps", "1", "--no-compile"]) == 2
    assert "not a TinyRecursiveModels checkout" in capsys.readouterr().err


def test_runner_trains_and_reports_each_variant():
    config = small_config()
    head = build_ours(config, torch.device("cpu"))
    before = head.model.inner.lm_head.weight.detach().clone()
    runners = [Runner("ours/eager", head, config, torch.device("cpu"), compiled=False)]
    (timing,) = time_interleaved(runners, steps=2, warmup=1)
    assert timing.name == "ours/eager" and timing.median_s > 0 and len(runners[0].times) == 3
    assert not torch.equal(head.model.inner.lm_head.weight, before)


def test_step_flops_counts_gradient_cycles_three_times():
    base = small_config(H_cycles=1, L_cycles=1)  # 2 applications with gradient: 6 forward-equivalents
    deeper = small_config(H_cycles=2, L_cycles=1)  # plus 2 gradient-free applications
    b, s, d = base.batch_size, base.total_seq_len, base.hidden_size
    heads = 2 * b * s * d * base.vocab_size * 3
    assert step_flops(base) - heads == 3 * (step_flops(deeper) - step_flops(base))


def test_attention_split_counts_every_block_application_and_bounds_the_ratio(capsys):
    from trm.bench.model import Timing, attention_applications, print_attention_split, time_attention

    assert attention_applications(small_config(H_cycles=1, L_cycles=1, L_layers=1)) == (2, 0)
    assert attention_applications(small_config(H_cycles=3, L_cycles=4, L_layers=2)) == (10, 20)
    assert time_attention(small_config(), torch.device("cpu"), repeats=1) > 0
    results = {("ours", False): Timing("ours", 1.0, 0.5), ("upstream", False): Timing("upstream", 1.0, 0.7)}
    print_attention_split(results, attention_s=0.3)
    out = capsys.readouterr().out
    assert "60% of ours" in out
    assert "ours 200.0 ms, upstream 400.0 ms (2.00x)" in out
    assert "cannot exceed 2.33x" in out
