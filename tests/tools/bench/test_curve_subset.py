"""The curve harness's subset-evaluation comparison (tools.bench.curves --subset-eval, tools.bench.curve_subset)
on synthetic runs: the full run's best and its Wilson interval, the per-seed verdict, the checkpoints'
weights compared bit for bit, the evaluation schedule and the argument checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tools.bench import curve_output, curve_subset, curves
from trm.errors import TRMError
from trm.evaluation.subset import wilson_interval
from trm.training.checkpointing import layout as ckpt
from trm.training.checkpointing.best import BEST_FILE

FULL = "eval/all/exact_accuracy"
# The full run's score at each evaluation checkpoint, over 512 test rows: its best is step 200.
SCORES = {100: 0.80, 200: 0.84, 300: 0.83, 400: 0.84 - 0.0001}
N = 512.0


def write_checkpoint(root: Path, step: int, metrics: dict, model: dict, ema: dict | None = None) -> None:
    folder = ckpt.prepare_partial(root, step)
    torch.save(
        {"model": model, "ema": {"rate": 0.9, "shadow": ema} if ema is not None else None},
        folder / "state.pt",
    )
    facts = {"step": step, "kind": ckpt.EVAL, "eval_metrics": metrics}
    ckpt.publish(root, step, facts)


def full_run(root: Path, scores: dict[int, float] = SCORES, n: float = N) -> Path:
    for step, value in scores.items():
        write_checkpoint(root, step, {FULL: value, "eval/all/count": n}, {"w": torch.full((2,), float(step))})
    return root


def subset_run(root: Path, step: int, value: float, candidates: tuple[int, ...] = (300, 200, 100)) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    record = {"ranked_by": f"subset/{FULL}", "top_k": len(candidates), "step": step, "metric": FULL,
              "value": value, "evaluation": "full", "candidates": [{"step": s} for s in candidates]}  # fmt: skip
    (root / BEST_FILE).write_text(json.dumps(record))
    return root


def test_the_full_best_is_the_highest_score_latest_on_ties_with_its_wilson_interval() -> None:
    best = curve_subset.full_best({100: 0.5, 200: 0.7, 300: 0.7, 400: 0.6}, 100)
    assert (best.step, best.value, best.n) == (300, 0.7, 100)
    assert best.wilson == wilson_interval(70, 100)
    assert best.wilson[0] < 0.7 < best.wilson[1]
    with pytest.raises(TRMError, match="no evaluation checkpoint"):
        curve_subset.full_best({}, 100)


def test_the_verdict_is_same_within_or_outside_the_interval() -> None:
    best = curve_subset.full_best(SCORES, N)
    low = best.wilson[0]
    assert 0.80 < low < 0.83  # 0.84 over 512 rows: about 0.806
    assert curve_subset.verdict(best, 200, 0.84) == curve_subset.SAME
    assert curve_subset.verdict(best, 300, 0.83) == curve_subset.WITHIN
    assert curve_subset.verdict(best, 100, 0.80) == curve_subset.OUTSIDE
    # With few rows the interval is wide: the same 0.80 is then within it.
    assert curve_subset.verdict(curve_subset.full_best(SCORES, 50), 100, 0.80) == curve_subset.WITHIN


def test_a_seed_reads_the_chosen_score_from_the_full_run_and_flags_a_disagreement() -> None:
    chosen = {"step": 300, "value": 0.83, "candidates": [{"step": 300}, {"step": 200}]}
    row = curve_subset.compare_seed(SCORES, N, chosen)
    assert (row["full_best_step"], row["chosen_step"], row["chosen_full_value"]) == (200, 300, 0.83)
    assert row["scores_agree"] is True and row["verdict"] == curve_subset.WITHIN
    assert row["candidates"] == [300, 200] and row["full_scores"]["400"] == SCORES[400]
    # The subset run found another full score for the same checkpoint: the full run's is used, and flagged.
    row = curve_subset.compare_seed(SCORES, N, {**chosen, "value": 0.90})
    assert row["chosen_full_value"] == 0.83 and row["chosen_full_value_by_subset_run"] == 0.90
    assert row["scores_agree"] is False


def test_the_overall_line_counts_the_seeds() -> None:
    rows = [{"verdict": curve_subset.SAME}, {"verdict": curve_subset.WITHIN}, {"verdict": curve_subset.SAME}]
    assert (
        curve_subset.overall(rows) == "same best checkpoint on 2 of 3 seeds, within the Wilson interval on 1"
    )
    rows.append({"verdict": curve_subset.OUTSIDE})
    assert curve_subset.overall(rows).endswith(", OUTSIDE it on 1")


def test_runs_on_disk_are_compared_per_seed(tmp_path: Path) -> None:
    full = [full_run(tmp_path / "full-0"), full_run(tmp_path / "full-1")]
    subset = [subset_run(tmp_path / "subset-0", 200, 0.84), subset_run(tmp_path / "subset-1", 100, 0.80)]
    got = curve_subset.compare_runs(full, subset)
    assert [s["verdict"] for s in got["per_seed"]] == [curve_subset.SAME, curve_subset.OUTSIDE]
    assert got["per_seed"][0]["metric"] == FULL and got["per_seed"][0]["n"] == N
    assert got["verdict"] == "same best checkpoint on 1 of 2 seeds, OUTSIDE it on 1"


def test_a_subset_run_without_a_recorded_full_choice_is_an_error(tmp_path: Path) -> None:
    full = full_run(tmp_path / "full")
    with pytest.raises(TRMError, match=r"best\.json: the subset run recorded no best checkpoint"):
        curve_subset.compare_runs([full], [tmp_path / "nothing"])
    record = subset_run(tmp_path / "sub", 200, 0.84)
    (record / BEST_FILE).write_text(json.dumps({"step": 200, "value": 0.5, "evaluation": "subset"}))
    with pytest.raises(TRMError, match="made on the subset evaluation, not the full one"):
        curve_subset.compare_runs([full], [record])


def test_a_full_run_whose_evaluations_differ_in_size_is_refused(tmp_path: Path) -> None:
    root = full_run(tmp_path / "full", {100: 0.5})
    write_checkpoint(root, 200, {FULL: 0.6, "eval/all/count": 51.0}, {"w": torch.zeros(2)})
    with pytest.raises(TRMError, match=r"\[51\.0, 512\.0\] item counts"):
        curve_subset.read_full_run(root, FULL)


def test_weights_are_compared_at_every_common_step(tmp_path: Path) -> None:
    def run(name: str, at_300: float, ema_at_200: float) -> Path:
        root = tmp_path / name
        for step in (100, 200, 300):
            w = at_300 if step == 300 else float(step)
            ema = {"w": torch.tensor([ema_at_200 if step == 200 else 0.0])}
            write_checkpoint(root, step, {FULL: 0.5, "eval/all/count": N}, {"w": torch.tensor([w])}, ema)
        return root

    same = curve_subset.weights_identity(run("a", 300.0, 0.0), run("b", 300.0, 0.0))
    assert same == {"steps": [100, 200, 300], "first_difference": None}
    assert curve_subset.weights_identity(tmp_path / "a", run("c", 300.5, 0.0))["first_difference"] == 300
    assert curve_subset.weights_identity(tmp_path / "a", run("d", 300.0, 1e-9))["first_difference"] == 200
    with pytest.raises(TRMError, match="no checkpoint at the same step"):
        curve_subset.weights_identity(tmp_path / "a", tmp_path / "empty")


def test_the_schedule_evaluates_about_as_often_as_asked(tmp_path: Path) -> None:
    (tmp_path / "train").mkdir()
    meta = {"total_groups": 512, "mean_puzzle_examples": 1.0}
    (tmp_path / "train" / "dataset.json").write_text(json.dumps(meta))
    # 16 steps per epoch at batch 32: 600 steps and 12 evaluations -> every 3 epochs (48 steps), 39 epochs
    assert curves.eval_schedule(tmp_path, 600, 32, 12) == (39, 3, 0)
    assert curves.eval_schedule(tmp_path, 32, 32, 10) == (3, 1, 0)  # never under one epoch
    # From step 144 on, 6 evaluations up to step 240: every epoch, the first after pass 9 (144 = 9 x 16)
    assert curves.eval_schedule(tmp_path, 240, 32, 6, start=144) == (16, 1, 8)
    assert curves.eval_schedule(tmp_path, 240, 32, 6, start=150)[2] == 9  # the pass ending at 160


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--subset-eval", "1.0"], "--subset-eval 1.0: give the subset's share of the test set, in (0, 1)"),
        (["--subset-eval", "0.1", "--top-k", "0"], "--top-k 0: the subset run re-evaluates its top k"),
        (["--subset-eval", "0.1", "--evals", "1"], "--evals 1: choosing a best checkpoint needs 2 or more"),
        (["--subset-eval", "0.1", "--steps", "8", "--eval-from", "8"], "--eval-from 8: give a step in 0..7"),
    ],
)
def test_bad_subset_arguments_are_refused_before_anything_runs(tmp_path, capsys, argv, message) -> None:
    assert curves.main([*argv, "--out", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_outputs_named_after_a_fraction_keep_the_whole_name(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(curve_output, "plot", lambda *args: b"png")  # the file names are the point here
    a = [{m: {s: 1.0 for s in range(1, 9)} for m in curves.METRICS}] * 2
    comparisons = curves.compare(a, a, 8, 4)
    result = {"setup": "sudoku", "labels": ["x", "y"], "seeds": 2, "verdict": "identical"}
    curves.write_outputs(tmp_path / "sudoku-subset0.1", result, [comparisons])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sudoku-subset0.1.json", "sudoku-subset0.1.png"]
