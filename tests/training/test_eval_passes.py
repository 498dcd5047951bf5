"""URM's loop extrapolation: every evaluation also runs with loops + delta ACT steps (`arch.loop_deltas`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.training.test_trainer_inprocess import make_trainer
from trm import exit_codes
from trm.errors import TRMError
from trm.evaluation.runner import EvaluationStopped
from trm.training.config import compose, config_hash, math_dict
from trm.training.eval_passes import act_steps_raised, eval_passes
from trm.training.loop import Trainer
from trm.training.recipes import get_recipe

TINY_RUN = get_recipe("debug-tiny").with_changes(
    global_batch_size=4, epochs=2, eval_interval=1, evaluators=[], lr_warmup_steps=1
)
URM_TINY = (
    *(o for o in TINY_RUN.overrides if not o.startswith(("arch.", "arch="))),  # TRM's arch keys
    "arch=urm",
    *("arch.hidden_size=16", "arch.num_heads=2", "arch.num_layers=1", "arch.H_cycles=1"),
    *("arch.L_cycles=1", "arch.loops=2", "arch.puzzle_emb_ndim=8"),
)


def make(run_dir: Path, *extra: str) -> Trainer:
    return make_trainer(run_dir, *extra, base=URM_TINY)


def eval_rows(trainer: Trainer) -> list[dict]:
    import json

    rows = [json.loads(line) for line in (trainer.run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if any(k.startswith("eval/") for k in r)]


def test_urm_evaluates_at_loops_and_loops_plus_8_by_default(tmp_path):
    trainer = make(tmp_path / "run")
    try:
        assert trainer.train() == exit_codes.OK
    finally:
        trainer.close()
    rows = eval_rows(trainer)
    assert rows
    for row in rows:  # every slot runs the full step limit in evaluation: 2, then 2 + 8
        steps = {k: v for k, v in row.items() if k.endswith("/steps")}
        assert steps and all(v == 2 for k, v in steps.items() if not k.startswith("loops+8/"))
        assert {k.removeprefix("loops+8/") for k in steps if k.startswith("loops+8/")} == {
            k for k in steps if not k.startswith("loops+8/")
        }
        assert all(v == 10 for k, v in steps.items() if k.startswith("loops+8/"))
    assert trainer.components.model.config.loops == 2  # restored after the pass


def test_loop_deltas_zero_evaluates_once_and_never_changes_the_run_name(tmp_path):
    once = make(tmp_path / "once", "arch.loop_deltas=[0]")
    try:
        assert once.train() == exit_codes.OK
    finally:
        once.close()
    assert not any(k.startswith("loops+") for row in eval_rows(once) for k in row)
    default = compose(list(URM_TINY))
    assert "loop_deltas" not in math_dict(default)["arch"]
    assert config_hash(default) == config_hash(compose([*URM_TINY, "arch.loop_deltas=[0]"]))


@pytest.mark.parametrize("deltas", ["[]", "[0,0]", "[0,-2]"])
def test_bad_loop_deltas_are_a_clear_error(tmp_path, deltas):
    with pytest.raises(TRMError, match=r"arch\.loop_deltas=.*loops \+ delta >= 1"):
        make(tmp_path / "run", f"arch.loop_deltas={deltas}")


def test_passes_and_the_raised_step_limit():
    class Arch:
        loop_deltas = (0, 8, -1)

    assert [(p.delta, p.prefix) for p in eval_passes(Arch())] == [(0, ""), (8, "loops+8/"), (-1, "loops-1/")]
    assert [p.prefix for p in eval_passes(object())] == [""]  # architectures without loop_deltas

    class Config:
        loops = 16

    config = Config()
    with pytest.raises(RuntimeError), act_steps_raised(config, 8):
        assert config.loops == 24
        raise RuntimeError
    assert config.loops == 16


def test_a_stop_in_the_second_pass_keeps_no_votes_of_the_first(tmp_path, monkeypatch):
    """The resumed run evaluates both passes again, so the first pass's pooled votes are rolled back."""
    trainer = make(tmp_path / "run")
    calls = []

    class Votes:
        def __init__(self):
            self.pooled = {"n": 0}

        def state_dict(self):
            return {"pooled": self.pooled}

        def load_state_dict(self, state):
            self.pooled = state["pooled"]

    votes = Votes()
    trainer.components.evaluators.append(votes)

    def fake_evaluate(*_args, **_kwargs):
        calls.append(trainer.components.model.config.loops)
        if len(calls) == 2:
            raise EvaluationStopped(0, 0)
        votes.pooled["n"] += 1  # the pass pools its votes in place, as the ARC evaluator does
        return {"eval/all/steps": 2.0}

    monkeypatch.setattr("trm.evaluation.runner.evaluate", fake_evaluate)
    try:
        assert trainer._evaluate_and_log() is False
    finally:
        trainer.components.evaluators.remove(votes)
        trainer.close()
    assert calls == [2, 10] and votes.pooled == {"n": 0}
    assert trainer.components.model.config.loops == 2
