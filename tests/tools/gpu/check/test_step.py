"""The step A/B part on tools.bench.train's table."""

from __future__ import annotations

import json

from tests.tools.gpu.check.helpers import fake_ctx
from tools.bench import train
from tools.gpu.check import step


def bench_output(ours: list[float], theirs: list[float]) -> str:
    """What `tools.bench.train --json` prints: its table, then its figures (from its own writer) as JSON."""
    record = train.results(train.SETUPS["tiny"], ours, train.summary(theirs))
    record["ours"]["mfu"] = 0.349
    return "paper setup on cuda, batch 192, torch threads default\n  ...\n" + json.dumps(record) + "\n"


def test_step_ab_reads_the_trainer_bench_and_wants_twenty_timed_steps_each(tmp_path, monkeypatch) -> None:
    output = bench_output([0.221] * 39 + [0.2], [0.227] * 21)
    data = step.step_ab_figures(json.loads(output.splitlines()[-1]))
    assert data["ours"] == {"s_per_step": 0.221, "min_s_per_step": 0.2, "steps_per_s": 1 / 0.221,
                            "timed_steps": 40, "mfu": 0.349}  # fmt: skip
    assert data["upstream"]["timed_steps"] == 21 and data["ratio_vs_upstream"] == 0.227 / 0.221
    calls = []

    def fake_run(cmd, ctx, *, timeout_s, log_name, env=None):
        calls.append((cmd, env))
        return 0, output

    monkeypatch.setattr(step, "run_command", fake_run)
    ctx = fake_ctx(tmp_path)
    assert step.step_ab(ctx).status == "fail"  # no upstream checkout: nothing to compare with
    ctx = fake_ctx(tmp_path, TRM_UPSTREAM="/opt/upstream")
    outcome = step.step_ab(ctx)
    assert outcome.status == "pass" and "1.03x" in outcome.summary and "0.200 min" in outcome.summary, outcome
    cmd, env = calls[-1]
    assert cmd[cmd.index("--setup") + 1] == "paper" and int(cmd[cmd.index("--steps") + 1]) >= 20 + 5
    assert "--json" in cmd and env["TRM_UPSTREAM"] == "/opt/upstream"
    monkeypatch.setattr(step, "run_command", lambda *a, **k: (0, bench_output([0.221] * 40, [0.227] * 9)))
    short = step.step_ab(ctx)
    assert short.status == "fail" and short.summary.endswith("too few timed steps: upstream")


def test_prefetch_ab_runs_ours_with_and_without_the_setting_and_states_the_ratio(
    tmp_path, monkeypatch
) -> None:
    setup = train.SETUPS["tiny"]
    record = train.with_variant(
        setup, train.results(setup, [0.220] * 21, None), ["loader_prefetch=2"], [0.210] * 20 + [0.2]
    )
    calls = []

    def fake_run(cmd, ctx, *, timeout_s, log_name, env=None):
        calls.append(cmd)
        return 0, "paper setup on cuda\n" + json.dumps(record) + "\n"

    monkeypatch.setattr(step, "run_command", fake_run)
    outcome = step.prefetch_ab(fake_ctx(tmp_path))
    assert outcome.status == "pass", outcome
    assert "0.2100 s/step median (0.2000 min) against 0.2200 (0.2200) without: 1.048x" in outcome.summary
    assert outcome.data["measured"] is True and outcome.data["setting"] == "loader_prefetch=2"
    (cmd,) = calls
    assert cmd[cmd.index("--set") + 1] == "loader_prefetch=2" and cmd[cmd.index("--setup") + 1] == "paper"
    monkeypatch.setattr(step, "run_command", lambda *a, **k: (1, "Traceback ...\n"))
    assert step.prefetch_ab(fake_ctx(tmp_path)).status == "fail"
