"""The opt-in depth curriculum: its schedule, its checks, the trainer running it (resume across a depth
change is bit-exact, evaluation at full depth, off is today's run), its FLOPs and its compiled graphs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.training.test_trainer_inprocess import assert_same_state, metric_rows, run
from trm import exit_codes
from trm.errors import TRMError
from trm.model.registry import build_model, model_config
from trm.training import curriculum
from trm.training.config import compose, config_hash, math_dict
from trm.training.curriculum import Stage, stages
from trm.training.recipes import RECIPES, get_recipe
from trm.training.throughput import act_step_flops

# TINY (8 steps, evaluations after steps 4 and 8) at H 2, L 2: deep enough to have a shallower stage.
DEEP = ("arch.H_cycles=2", "arch.L_cycles=2")
# Steps 1-4 at (1, 1), steps 5-8 at (2, 2): the depth changes between the first pass and the second.
ON = (*DEEP, "depth_curriculum.ramp=0.5", "depth_curriculum.stages=2")


def test_cgar_schedule_thirds_of_the_first_60_percent() -> None:
    assert stages(3, 6, 0.6, 3, 1000) == [
        Stage(1, 300, 1, 2),
        Stage(301, 600, 2, 4),
        Stage(601, 1000, 3, 6),
    ]
    assert stages(3, 6, 0.0, 3, 1000) == [Stage(1, 1000, 3, 6)]  # off: every step at full depth
    # At H 2, L 2 the second third is already full depth: adjacent equal depths merge into one stage.
    assert stages(2, 2, 0.6, 3, 100) == [Stage(1, 30, 1, 1), Stage(31, 100, 2, 2)]
    schedule = stages(3, 6, 0.6, 3, 1000)
    assert curriculum.stage_at(schedule, 300) == Stage(1, 300, 1, 2)
    assert curriculum.stage_at(schedule, 301).H_cycles == 2
    assert curriculum.stage_at(schedule, 5000) == schedule[-1]  # past the schedule: full depth


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("depth_curriculum.ramp=1.0",), r"depth_curriculum\.ramp=1\.0 must be in \[0, 1\)"),
        (("depth_curriculum.ramp=-0.1",), r"depth_curriculum\.ramp=-0\.1 must be in \[0, 1\)"),
        (("depth_curriculum.stages=1",), r"depth_curriculum\.stages=1 must be an integer from 2 to 6"),
        (("depth_curriculum.stages=9",), r"depth_curriculum\.stages=9 must be an integer from 2 to 6"),
        (
            ("arch.H_cycles=1", "arch.L_cycles=1", "depth_curriculum.ramp=0.5"),
            r"arch\.H_cycles=1 arch\.L_cycles=1: there is no shallower depth",
        ),
        (
            ("arch=transformers_baseline", "depth_curriculum.ramp=0.5"),
            r"arch=transformers_baseline: it has no recursion cycles",
        ),
    ],
)
def test_bad_values_are_one_error_naming_the_key(overrides: tuple[str, ...], message: str) -> None:
    with pytest.raises(TRMError, match=message) as err:
        compose(["data_paths=[x]", *overrides])
    assert err.value.exit_code == exit_codes.CONFIG_ERROR


def test_off_keeps_every_existing_config_hash_and_on_changes_the_math() -> None:
    off = compose(["data_paths=[x]"])
    assert "depth_curriculum" not in math_dict(off)  # run names (config hashes) stay as they were
    assert config_hash(off) == config_hash(compose(["data_paths=[x]", "depth_curriculum.stages=4"]))
    on = compose(["data_paths=[x]", "depth_curriculum.ramp=0.6"])
    assert math_dict(on)["depth_curriculum"] == {"ramp": 0.6, "stages": 3}
    assert config_hash(on) != config_hash(off)


def test_only_the_curriculum_recipe_turns_it_on() -> None:
    on = [name for name, r in RECIPES.items() if r.config.depth_curriculum.ramp > 0]
    assert on == ["sudoku-curriculum"]
    recipe = get_recipe("sudoku-curriculum")
    assert "depth_curriculum.ramp=0.6" in recipe.overrides
    assert recipe.dataset == get_recipe("sudoku-mlp").dataset
    cfg = compose([*recipe.overrides, "data_paths=[x]"])
    assert curriculum.run_schedule(cfg, 100) == [
        Stage(1, 30, 1, 2),
        Stage(31, 60, 2, 4),
        Stage(61, 100, 3, 6),
    ]


def spy_depths(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bool, int, int]]:
    """Record (training?, H_cycles, L_cycles) at every call of the TRM core."""
    from trm.model.core import TRMCore

    seen: list[tuple[bool, int, int]] = []
    original = TRMCore.forward

    def forward(self, carry, batch):
        seen.append((self.training, self.config.H_cycles, self.config.L_cycles))
        return original(self, carry, batch)

    monkeypatch.setattr(TRMCore, "forward", forward)
    return seen


@pytest.mark.e2e
def test_training_steps_follow_the_schedule_and_evaluation_runs_at_full_depth(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = spy_depths(monkeypatch)
    code, trainer = run(tmp_path / "run", *ON)
    assert code == exit_codes.OK and trainer.progress.step == 8
    train = [(h, low) for training, h, low in seen if training]
    evaluation = {(h, low) for training, h, low in seen if not training}
    # TINY's ACT makes one core call per step plus its Q target's: the first 4 steps' calls are (1, 1).
    per_step = len(train) // 8
    assert train[: 4 * per_step] == [(1, 1)] * (4 * per_step)
    assert train[4 * per_step :] == [(2, 2)] * (4 * per_step)
    assert evaluation == {(2, 2)}  # both evaluations (after steps 4 and 8), in the middle of the ramp too
    assert (trainer.components.model.config.H_cycles, trainer.components.model.config.L_cycles) == (2, 2)
    record = json.loads((tmp_path / "run" / "run.json").read_text())["depth_curriculum"]
    assert [(s["first"], s["last"], s["H_cycles"], s["L_cycles"]) for s in record] == [
        (1, 4, 1, 1),
        (5, 8, 2, 2),
    ]
    assert record[0]["train_flops_per_example"] < record[1]["train_flops_per_example"]


@pytest.mark.e2e
def test_stop_and_resume_across_the_depth_change_is_bit_exact(tmp_path: Path) -> None:
    code, straight = run(tmp_path / "straight", *ON)
    assert code == exit_codes.OK
    code, _ = run(tmp_path / "split", *ON, stop_at=3)  # stopped in the shallow stage
    assert code == exit_codes.SAVED_RETRY
    code, resumed = run(tmp_path / "split", *ON)  # resumes at step 4, crosses into full depth at step 5
    assert code == exit_codes.OK and resumed.resumed_from == tmp_path / "split" / "step_3"
    assert_same_state(straight, resumed)
    assert metric_rows(tmp_path / "straight") == metric_rows(tmp_path / "split")


@pytest.mark.e2e
def test_off_runs_every_step_at_full_depth_and_on_trains_differently(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = spy_depths(monkeypatch)
    code, off = run(tmp_path / "off", *DEEP, "depth_curriculum.stages=5")  # ramp 0: stages do nothing
    assert code == exit_codes.OK
    assert {(h, low) for _, h, low in seen} == {(2, 2)}
    code, plain = run(tmp_path / "plain", *DEEP)
    assert_same_state(off, plain)  # bit-identical to a run that never names the curriculum
    assert metric_rows(tmp_path / "off") == metric_rows(tmp_path / "plain")
    run(tmp_path / "on", *ON)
    assert metric_rows(tmp_path / "on")[1] != metric_rows(tmp_path / "off")[1]


def test_architectures_without_cycles_train_at_their_one_depth() -> None:
    cfg = compose(["arch=transformers_baseline", "data_paths=[x]"])
    schedule = curriculum.run_schedule(cfg, 10)
    assert schedule == [Stage(1, 10, 1, None)]  # its arch has H_cycles (1) but no L_cycles
    model = model_config(
        cfg.arch, batch_size=1, seq_len=8, vocab_size=12, num_puzzle_identifiers=3, forward_dtype="float32"
    )
    with curriculum.at_depth(model, schedule[0]):  # a no-op: nothing to set
        pass
    assert curriculum.train_flops_per_example(model, schedule, 1, 10) == act_step_flops(model).train


def tiny_model_config(**arch: int):
    cfg = compose(
        [
            *get_recipe("debug-tiny").overrides,
            "data_paths=[x]",
            *DEEP,
            *(f"arch.{k}={v}" for k, v in arch.items()),
        ]
    )
    return model_config(cfg.arch, batch_size=2, seq_len=8, vocab_size=12, num_puzzle_identifiers=3)


def test_flops_count_each_step_at_its_depth() -> None:
    model = tiny_model_config()
    schedule = stages(2, 2, 0.5, 2, 8)
    shallow = act_step_flops(curriculum.depth_config(model, schedule[0])).train
    full = act_step_flops(model).train
    assert shallow < full
    # A window of steps 3..6: two shallow steps and two full ones.
    assert curriculum.train_flops_per_example(model, schedule, 3, 6) == pytest.approx((shallow + full) / 2)
    assert curriculum.train_flops_per_example(model, schedule, 9, 12) == pytest.approx(full)  # past the end
    cumulative = curriculum.cumulative_train_flops(model, schedule, 8, batch=32)
    assert cumulative[0] == 0 and cumulative[4] == pytest.approx(4 * 32 * shallow)
    assert cumulative[8] == pytest.approx(4 * 32 * (shallow + full))
    # Off: the full count at every step (what the MFU used before).
    assert curriculum.train_flops_per_example(model, stages(2, 2, 0.0, 3, 8), 1, 8) == pytest.approx(full)


@pytest.mark.e2e
@pytest.mark.torch_compile
def test_each_stage_compiles_once_and_a_stage_seen_before_reuses_its_graph() -> None:
    from torch._dynamo.testing import CompileCounter

    from trm.model import ACTLossHead

    config = tiny_model_config()
    torch.manual_seed(0)
    model = build_model(config)
    counter = CompileCounter()
    step = torch.compile(ACTLossHead(model, "softmax_cross_entropy"), backend=counter)
    batch = {
        "inputs": torch.randint(0, 12, (2, 8)),
        "labels": torch.randint(0, 12, (2, 8)),
        "puzzle_identifiers": torch.zeros(2, dtype=torch.int32),
    }
    schedule = stages(2, 2, 0.5, 2, 8)
    compiles = []
    carry = model.initial_carry(batch)
    for stage in (schedule[0], schedule[0], schedule[1], schedule[1], schedule[0]):
        with curriculum.at_depth(model.config, stage):
            carry, *_ = step(carry, batch)
        compiles.append(counter.frame_count)
    torch._dynamo.reset()
    assert compiles[1] == compiles[0]  # the same stage again: no recompile
    assert compiles[2] > compiles[1] and compiles[3] == compiles[2]  # the next stage: compiled once
    assert compiles[4] == compiles[3]  # back to a stage seen before: its graph is reused
