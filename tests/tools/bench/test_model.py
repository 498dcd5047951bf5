"""The model benchmark's plumbing (timings themselves are never asserted; no reference checkout needed)."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import small_config
from tools.bench.model import Runner, build_ours, main, step_flops, time_interleaved, tiny_config
from trm.model.registry import ARCHS, get_spec


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
    from tools.bench.model import Timing, attention_applications, print_attention_split, time_attention

    assert attention_applications(small_config(H_cycles=1, L_cycles=1, L_layers=1)) == (2, 0)
    assert attention_applications(small_config(H_cycles=3, L_cycles=4, L_layers=2)) == (10, 20)
    assert time_attention(small_config(), torch.device("cpu"), repeats=1) > 0
    results = {("ours", False): Timing("ours", 1.0, 0.5), ("upstream", False): Timing("upstream", 1.0, 0.7)}
    print_attention_split(results, attention_s=0.3)
    out = capsys.readouterr().out
    assert "60% of ours" in out
    assert "ours 200.0 ms, upstream 400.0 ms (2.00x)" in out
    assert "cannot exceed 2.33x" in out


def _no_references(monkeypatch):
    monkeypatch.delenv("TRM_UPSTREAM", raising=False)
    monkeypatch.delenv("TRM_URM", raising=False)


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_every_architecture_has_a_tiny_cpu_model_that_steps(arch, monkeypatch, capsys):
    _no_references(monkeypatch)
    config = tiny_config(arch)
    assert type(config) is get_spec(arch).config
    assert (config.hidden_size, config.puzzle_emb_ndim, config.forward_dtype) == (64, 0, "float32")
    head = build_ours(config, torch.device("cpu"))
    assert type(head.model) is get_spec(arch).model
    argv = [
        "--arch",
        arch,
        "--device",
        "cpu",
        "--no-compile",
        "--steps",
        "1",
        "--warmup",
        "0",
        "--batch-size",
        "2",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"arch={arch} " in out and "batch=2 " in out
    assert "ours/eager" in out and "upstream/eager" not in out and "reference/eager" not in out


def test_reference_checkout_comes_from_the_architectures_variable(tmp_path, monkeypatch, capsys):
    _no_references(monkeypatch)
    monkeypatch.setenv("TRM_URM", str(tmp_path))  # URM's reference is the URM checkout
    assert main(["--arch", "urm", "--steps", "1", "--no-compile", "--batch-size", "2"]) == 2
    err = capsys.readouterr().err
    assert f"TRM_URM={tmp_path} is not a URM checkout" in err
    monkeypatch.delenv("TRM_URM")
    monkeypatch.setenv("TRM_UPSTREAM", str(tmp_path))  # upstream TRM's checkout is not URM's reference
    assert main(["--arch", "urm", "--steps", "1", "--warmup", "0", "--no-compile", "--batch-size", "2"]) == 0
    assert "reference/eager" not in capsys.readouterr().out
    assert main(["--arch", "hrm", "--steps", "1", "--no-compile", "--batch-size", "2"]) == 2
    assert "not a TinyRecursiveModels checkout" in capsys.readouterr().err


def test_unknown_architecture_is_refused_by_the_command_line(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--arch", "gpt"])
    assert exc.value.code == 2
    assert "invalid choice: 'gpt'" in capsys.readouterr().err


class BreakingHead(torch.nn.Module):
    """Our loss head with one graph break in front of it (stands for a model that breaks)."""

    def __init__(self, head: torch.nn.Module) -> None:
        super().__init__()
        self.head = head

    def initial_carry(self, batch):
        return self.head.initial_carry(batch)

    def forward(self, carry, batch):
        torch._dynamo.graph_break()
        return self.head(carry, batch)


@pytest.mark.e2e  # tens of seconds: out of the default suite, run by make test-e2e
def test_compile_time_is_measured_per_model_from_a_fresh_start(monkeypatch, capsys):
    """Each model's first compiled step is timed `repeats` times, interleaved, with its own graphs and
    breaks (not the sum over the models timed before it). Dynamo's eager backend keeps it fast."""
    import functools

    from tools.bench.model import print_compiles, time_compiles

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    config = small_config(puzzle_emb_ndim=0, puzzle_emb_len=0)
    device = torch.device("cpu")
    order = []

    def builder(name, breaks):
        def build():
            order.append(name)
            head = build_ours(config, device)
            return BreakingHead(head) if breaks else head

        return name, build

    timings = time_compiles([builder("ours", False), builder("upstream", True)], config, device, repeats=2)
    assert order == ["ours", "upstream", "ours", "upstream"]
    ours, theirs = timings
    assert len(ours.seconds) == len(theirs.seconds) == 2 and min(ours.seconds + theirs.seconds) > 0
    assert (ours.graphs, ours.graph_breaks) == (1, 0)  # the training step: one graph, no break
    assert (theirs.graphs, theirs.graph_breaks) == (1, 1)  # nothing to capture before its break
    print_compiles(timings, "upstream")
    out = capsys.readouterr().out
    assert "graphs=1 graph_breaks=0" in out and "graphs=1 graph_breaks=1" in out
    assert f"compile time: upstream / ours = {theirs.median_s / ours.median_s:.2f}x" in out
