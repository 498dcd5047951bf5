"""The step A/B part on tools.bench.train's table."""

from __future__ import annotations

from tests.tools.gpu.check.helpers import fake_ctx
from tools.gpu.check import step

TRAIN_TABLE = """paper setup on cuda, batch 192, torch threads default
  trm-stack: 4.52 steps/s (0.221 s/step median of 40, MFU 34.9%)
  upstream:  4.41 steps/s (0.227 s/step median of 21, MFU 34.0%)
  ratio:     1.03x (misses the 1.3x goal)
"""


def test_step_ab_reads_the_trainer_bench_and_wants_twenty_timed_steps_each(tmp_path, monkeypatch) -> None:
    data = step.parse_step_ab(TRAIN_TABLE)
    assert data["ours"] == {"s_per_step": 0.221, "steps_per_s": 4.52, "timed_steps": 40, "mfu": 0.349}
    assert data["upstream"]["timed_steps"] == 21 and data["ratio_vs_upstream"] == 1.03
    calls = []

    def fake_run(cmd, ctx, *, timeout_s, log_name, env=None):
        calls.append((cmd, env))
        return 0, TRAIN_TABLE

    monkeypatch.setattr(step, "run_command", fake_run)
    ctx = fake_ctx(tmp_path)
    assert step.step_ab(ctx).status == "fail"  # no upstream checkout: nothing to compare with
    ctx = fake_ctx(tmp_path, TRM_UPSTREAM="/opt/upstream")
    outcome = step.step_ab(ctx)
    assert outcome.status == "pass" and "1.03x" in outcome.summary, outcome
    cmd, env = calls[-1]
    assert cmd[cmd.index("--setup") + 1] == "paper" and int(cmd[cmd.index("--steps") + 1]) >= 20 + 5
    assert env["TRM_UPSTREAM"] == "/opt/upstream"
    monkeypatch.setattr(
        step, "run_command", lambda *a, **k: (0, TRAIN_TABLE.replace("median of 21", "median of 9"))
    )
    short = step.step_ab(ctx)
    assert short.status == "fail" and short.summary.endswith("too few timed steps: upstream")
