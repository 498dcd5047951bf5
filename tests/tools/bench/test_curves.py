"""The curve harness (tools.bench.curves): reading both trainers' logs, variants, resume identity, and a
real ours-against-ours run on a tiny Sudoku set; upstream's side where TRM_UPSTREAM is set."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tools.bench import curve_data, curve_output, curves
from trm.errors import TRMError


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def trainers_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The harness's runs of our trainer (`python -m trm.train`, not SIGTERM-stopped) in this process, with
    the harness's trainer environment: the comparisons are what these tests check, and a trainer's start
    (torch's import) is half of a tiny run. The resume test keeps real processes (and `curves._run`)."""
    from tests.e2e.test_train import in_process

    run = curves._run

    def here(cmd: list[str], cwd: Path | None, what: str) -> None:
        if cmd[1:3] != ["-m", "trm.train"]:
            return run(cmd, cwd, what)
        if code := in_process(cmd):  # in the settings of trainer_env: eager, no W&B, one thread
            raise TRMError(f"{what} failed (exit {code})")

    monkeypatch.setattr(curves, "_run", here)


def test_steps_without_a_halted_sequence_carry_no_accuracy(tmp_path):
    # upstream logs 0 for the per-halted metrics when nothing halted (count 0); ours logs nothing
    rows = [
        {"step": 0, "num_params": 10.0},
        {
            "step": 1,
            "train/count": 0.0,
            "train/lm_loss": 2.5,
            "train/accuracy": 0.0,
            "train/q_halt_accuracy": 0.0,
        },
        {
            "step": 2,
            "train/count": 1.0,
            "train/lm_loss": 2.4,
            "train/accuracy": 0.3,
            "train/q_halt_accuracy": 1.0,
        },
        {"step": 3, "train/count": 1.0, "train/lm_loss": 2.3, "train/accuracy": 0.4},
    ]
    got = curves.read_jsonl(write_jsonl(tmp_path / "m.jsonl", rows), steps=2)
    assert got["train/lm_loss"] == {1: 2.5, 2: 2.4}
    assert got["train/accuracy"] == {2: 0.3}
    assert got["train/q_halt_accuracy"] == {2: 1.0}
    assert got["train/exact_accuracy"] == {}


def test_identical_names_the_first_differing_step():
    a = {m: {1: 1.0, 2: 2.0, 3: 3.0} for m in curves.METRICS}
    b = {m: dict(v) for m, v in a.items()}
    assert curves.identical(a, b) is None
    b["train/q_halt_accuracy"][3] = 3.0000001
    b["train/lm_loss"].pop(2)
    assert curves.identical(a, b) == 2


@pytest.mark.parametrize("text", ["lr=1e-3", "name:", "name: lr", ": lr=1e-3"])
def test_bad_variant_says_how_to_write_it(text):
    with pytest.raises(TRMError, match="NAME: key=value"):
        curves.parse_variant(text)


def test_variant_replaces_the_recipe_keys():
    name, overrides = curves.parse_variant("fast: lr=3e-3 +arch.extra=1")
    assert name == "fast"
    changed = curves.with_overrides(curves.SETUPS["sudoku"].recipe.overrides, overrides)
    assert [o for o in changed if o.startswith("lr=")] == ["lr=3e-3"]
    assert changed[-1] == "+arch.extra=1"


def test_generated_sudokus_are_solved_grids_with_the_blanks_asked(tmp_path):
    curve_data.write_sudoku_csvs(tmp_path, train=5, test=2, blanks=7)
    lines = (tmp_path / "train.csv").read_text().splitlines()
    assert lines[0] == "source,question,answer,rating" and len(lines) == 6
    for line in lines[1:]:
        _, question, answer, _ = line.split(",")
        grid = np.array(list(answer), dtype=int).reshape(9, 9)
        boxes = grid.reshape(3, 3, 3, 3).transpose(0, 2, 1, 3).reshape(9, 9)
        for block in (grid, grid.T, boxes):
            assert all(sorted(row) == list(range(1, 10)) for row in block)
        assert question.count(".") == 7
        assert all(q in (".", a) for q, a in zip(question, answer, strict=True))


def test_one_seed_is_refused(tmp_path, capsys):
    assert curves.main(["--seeds", "1", "--variant", "x: lr=1e-3", "--out", str(tmp_path)]) == 2
    assert "--seeds 1" in capsys.readouterr().err


@pytest.mark.e2e  # four trainer runs (in this process)
def test_ours_against_ours_end_to_end(tmp_path, monkeypatch):
    trainers_in_process(monkeypatch)
    out = tmp_path / "out"
    argv = [
        "--setup",
        "sudoku",
        "--steps",
        "8",
        "--seeds",
        "2",
        "--variant",
        "hot: lr=5e-3",
        "--out",
        str(out),
    ]
    assert curves.main(argv) == 0
    result = json.loads((out / "sudoku-hot.json").read_text())
    assert (out / "sudoku-hot.png").read_bytes()[:4] == b"\x89PNG"
    assert result["labels"] == ["trm-stack", "trm-stack hot"]
    assert result["measured"] is True
    assert [m["metric"] for m in result["metrics"]] == list(curves.METRICS)
    loss = result["metrics"][0]
    assert loss["steps"] == [4, 8]  # every steps/10, but at least halt_max_steps (4) apart
    for side in result["runs"].values():
        assert len(side) == 2 and sorted(map(int, side[0]["train/lm_loss"])) == list(range(1, 9))
    assert result["verdict"].startswith(("indistinguishable", "part at step"))


@pytest.mark.e2e  # upstream's pretrain.py in a subprocess
@pytest.mark.skipif(
    not os.environ.get("TRM_UPSTREAM"), reason="needs TRM_UPSTREAM (a TinyRecursiveModels checkout)"
)
def test_upstream_metrics_are_recorded(tmp_path):
    setup = curves.SETUPS["sudoku"]
    ours, theirs = curves.build_data(setup, tmp_path)
    recipe = setup.recipe.with_changes(epochs=(e := curves.epochs_for(ours, 6, 32)), eval_interval=e)
    got = curves.run_upstream(
        recipe.overrides, Path(os.environ["TRM_UPSTREAM"]), theirs, tmp_path / "up", 0, 6
    )
    assert sorted(got["train/lm_loss"]) == [1, 2, 3, 4, 5, 6]
    assert all(0.0 < v < 5.0 for v in got["train/lm_loss"].values())


def test_recorded_command_leaves_out_the_scratch_directory():
    argv = ["--setup", "arc", "--keep", "/scratch/x", "--seeds", "3", "--keep=/y"]
    assert curves.recorded_argv(argv) == ["--setup", "arc", "--seeds", "3"]


def test_resume_step_is_checked():
    assert curves._resume_step("5", 10) == 5
    assert all(10 <= curves._resume_step("random", 100) <= 75 for _ in range(50))
    with pytest.raises(TRMError, match=r"--resume-at 9: give a step in 1\.\.8"):
        curves._resume_step("9", 10)


def test_logged_step_ignores_a_half_written_line(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    assert curves.logged_step(metrics) == 0
    metrics.write_text('{"step": 0}\n{"step": 1, "train/lm_loss": 2.0}\n{"step": 2, "train/lm')
    assert curves.logged_step(metrics) == 1


def test_resume_identity_names_each_seeds_first_difference():
    a = {m: {1: 1.0, 2: 2.0} for m in curves.METRICS}
    b = {m: dict(v) for m, v in a.items()}
    assert curves.resume_identity([a, a], [a, b], at=1)["verdict"] == "identical"
    b["train/lm_loss"][2] = 2.5
    got = curves.resume_identity([a, a], [a, b], at=1)
    assert got["identical"] is False and got["first_difference"] == [None, 2]
    assert got["verdict"] == "not identical (first differing step per seed: [None, 2])"


@pytest.mark.e2e  # six trainer processes, one of them stopped by SIGTERM
def test_stopped_and_resumed_runs_are_identical(tmp_path):
    out = tmp_path / "out"
    argv = ["--setup", "sudoku", "--steps", "10", "--seeds", "2", "--resume-at", "4", "--out", str(out)]
    assert curves.main(argv) == 0
    result = json.loads((out / "sudoku-resume.json").read_text())
    assert result["resume_at"] == 4
    assert all(4 <= s < 10 for s in result["resumed_from"])
    assert result["identical"] is True and result["verdict"] == "identical"


def test_upstream_runner_records_what_upstream_logs(tmp_path, monkeypatch):
    import types

    import torch

    from tools.bench import upstream_trainer

    logged = []
    fake = types.ModuleType("wandb")

    def init(**kwargs):
        fake.log = lambda data, step=None: logged.append((step, data))  # init binds log, as wandb's does
        return "run"

    fake.init = init
    monkeypatch.setitem(sys.modules, "wandb", fake)
    metrics = tmp_path / "upstream.jsonl"
    upstream_trainer.install_metrics_hook(metrics)
    assert fake.init(project="p") == "run"
    fake.log({"train/lm_loss": torch.tensor(2.5), "train/count": torch.tensor(1.0)}, step=3)
    assert logged[0][0] == 3  # still logged
    assert [json.loads(x) for x in metrics.read_text().splitlines()] == [
        {"step": 3, "train/lm_loss": 2.5, "train/count": 1.0}
    ]


@pytest.mark.e2e  # four trainer runs (in this process), each evaluating in-run
def test_full_against_subset_evaluation_end_to_end(tmp_path, monkeypatch):
    trainers_in_process(monkeypatch)
    out = tmp_path / "out"
    argv = ["--setup", "sudoku", "--steps", "24", "--seeds", "2", "--evals", "2", "--subset-eval", "0.1",
            "--top-k", "2", "--out", str(out)]  # fmt: skip
    assert curves.main(argv) == 0
    result = json.loads((out / "sudoku-subset0.1.json").read_text())
    assert result["eval_schedule"] == {
        "epochs": 3, "eval_interval": 1, "min_eval_interval": 0, "fraction": 0.1, "top_k": 2
    }  # fmt: skip
    assert result["identical"] is True and result["first_difference"] == [None, None]
    assert all(w == {"steps": [16, 24], "first_difference": None} for w in result["weights"])
    for seed in result["best"]["per_seed"]:
        assert seed["n"] == 512 and seed["scores_agree"] is True and sorted(seed["candidates"]) == [16, 24]
    assert result["verdict"].startswith("training identical at every step; same best checkpoint on")


def _fake_trainers(monkeypatch, tmp_path: Path, pair_s: float) -> tuple[list[float], list[tuple[int, str]]]:
    """Both sides as instant fakes on a fake clock: each run takes pair_s / 2; no data is built."""
    clock = [0.0]
    seen: list[tuple[int, str]] = []

    def run_ours(run: curves.OursRun):
        clock[0] += pair_s / 2
        seen.append((run.seed, run.device))
        return {
            m: {s: 1.0 + 0.01 * ((run.seed + s) % 3) for s in range(1, run.steps + 1)} for m in curves.METRICS
        }

    monkeypatch.setattr(curves, "run_ours", run_ours)
    monkeypatch.setattr(curves, "build_data", lambda setup, work: (tmp_path, tmp_path))
    monkeypatch.setattr(curves, "epochs_for", lambda data, steps, batch: 1)
    monkeypatch.setattr(curves, "time", SimpleNamespace(monotonic=lambda: clock[0]))

    def no_matplotlib(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'matplotlib'")

    monkeypatch.setattr(curve_output, "plot", no_matplotlib)
    return clock, seen


def test_a_time_budget_stops_starting_seed_pairs_and_the_json_says_how_to_draw_the_png(tmp_path, monkeypatch):
    _, seen = _fake_trainers(monkeypatch, tmp_path, pair_s=20.0)
    argv = ["--steps", "8", "--seeds", "6", "--variant", "hot: lr=5e-3", "--device", "cuda",
            "--time-budget-s", "65", "--out", str(tmp_path / "out"), "--keep", str(tmp_path / "work")]  # fmt: skip
    assert curves.main(argv) == 0
    # pairs end at 20, 40, 60 s; a fourth would end at 80 > 65: not started
    assert sorted({s for s, _ in seen}) == [0, 1, 2] and {d for _, d in seen} == {"cuda"}
    result = json.loads((tmp_path / "out" / "sudoku-hot-cuda.json").read_text())
    assert (result["seeds"], result["seeds_planned"], result["stopped_for_time"]) == (3, 6, True)
    assert result["device"] == "cuda" and result["time_budget_s"] == 65
    assert result["plot"].startswith("not drawn (No module named 'matplotlib'): python -m tools.bench.curves")
    assert not (tmp_path / "out" / "sudoku-hot-cuda.png").exists()
    assert curves.past_budget(40, 20, 60) is False and curves.past_budget(41, 20, 60) is True
    assert curves.past_budget(1e9, 1e9, None) is False


def test_replot_draws_the_png_of_a_json_from_its_runs(tmp_path, monkeypatch):
    _fake_trainers(monkeypatch, tmp_path, pair_s=1.0)
    argv = ["--steps", "8", "--seeds", "2", "--variant", "hot: lr=5e-3", "--out", str(tmp_path / "out"),
            "--keep", str(tmp_path / "work")]  # fmt: skip
    assert curves.main(argv) == 0
    path = tmp_path / "out" / "sudoku-hot.json"
    before = json.loads(path.read_text())
    drawn = []
    monkeypatch.setattr(
        curve_output,
        "plot",
        lambda comparisons, labels, title, best=None: drawn.append(comparisons) or b"PNG",
    )
    assert curves.main(["--replot", str(path)]) == 0
    assert (tmp_path / "out" / "sudoku-hot.png").read_bytes() == b"PNG"
    after = json.loads(path.read_text())
    assert after["plot"] == "sudoku-hot.png" and after["metrics"] == before["metrics"]  # recomputed, the same
    assert [c.as_dict() for c in drawn[0][0]] == before["metrics"]  # one row: equal steps
    path.write_text("{}")
    assert curves.main(["--replot", str(path)]) == 2


def test_each_sides_training_flops_count_its_depth_per_step(tmp_path):
    from trm.model.registry import model_config
    from trm.training.throughput import act_step_flops

    data = tmp_path / "data"
    (data / "train").mkdir(parents=True)
    meta = {"seq_len": 81, "vocab_size": 11, "num_puzzle_identifiers": 1, "total_groups": 64,
            "mean_puzzle_examples": 8.0}  # fmt: skip
    (data / "train" / "dataset.json").write_text(json.dumps(meta))
    setup = curves.SETUPS["sudoku"]
    base = setup.recipe.with_changes(epochs=2, eval_interval=2).overrides  # 2 x 64 x 8 / 32 = 32 steps
    variant = curves.with_overrides(base, ["depth_curriculum.ramp=0.5", "depth_curriculum.stages=2"])
    plain, shallow_first = curves.train_flops(base, data, 20), curves.train_flops(variant, data, 20)
    arch = setup.recipe.config.arch
    model = model_config(arch, batch_size=1, seq_len=81, vocab_size=11, num_puzzle_identifiers=1,
                         forward_dtype="float32")  # fmt: skip
    full = 32 * act_step_flops(model).train
    shallow = 32 * act_step_flops(dataclasses.replace(model, H_cycles=1, L_cycles=1)).train
    assert plain[0] == 0 and plain[20] == pytest.approx(20 * full)
    # Steps 1-16 (half of the 32-step schedule) at H 1, L 1; then H 2, L 2.
    assert shallow_first[16] == pytest.approx(16 * shallow)
    assert shallow_first[20] == pytest.approx(16 * shallow + 4 * full)
