"""Choosing the best checkpoint of a run that evaluated a subset: the top-k by subset score are scored on
the full test set and the full-set best among them wins; the choice says which evaluation decided."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from trm.commands import main
from trm.training.checkpointing import layout as ckpt
from trm.training.checkpointing.best import BEST_FILE, FULL_COUNT, select_best

SUB = "subset/eval/all/exact_accuracy"
FULL = "eval/all/exact_accuracy"
# step -> (subset score, full score): the subset's best (300) is not the full set's best (200).
SCORES = {100: (0.40, 0.30), 200: (0.55, 0.62), 300: (0.60, 0.50), 400: (0.20, 0.70)}


def write(root: Path, step: int, metrics: dict, top_k: int | None = 2, weights: bytes = b"w") -> None:
    folder = ckpt.prepare_partial(root, step)
    (folder / "state.pt").write_bytes(weights)
    facts = {"step": step, "kind": ckpt.EVAL, "eval_metrics": metrics, "best_metric": SUB}
    if top_k is not None:
        facts["best_top_k"] = top_k
    ckpt.publish(root, step, facts)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    root = tmp_path / "run"
    for step, (sub, _full) in SCORES.items():
        write(root, step, {SUB: sub, f"{SUB}/wilson_low": sub - 0.1, f"{SUB}/wilson_high": sub + 0.1})
    return root


class FullSet:
    """A stand-in full evaluation that returns SCORES' full score and counts its calls."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, info: ckpt.CheckpointInfo) -> dict[str, float]:
        self.calls.append(info.step)
        return {FULL: SCORES[info.step][1], "eval/all/count": 100.0}


def test_top_k_full_re_evaluation_picks_the_full_set_best(run_dir: Path) -> None:
    full = FullSet()
    best = select_best(run_dir, 3, full)
    assert sorted(full.calls) == [100, 200, 300]  # the top 3 by subset score; 400 is not a candidate
    assert (best.info.step, best.metric, best.value, best.evaluation) == (200, FULL, 0.62, "full")
    record = json.loads((run_dir / BEST_FILE).read_text())
    assert record["step"] == 200 and record["ranked_by"] == SUB and record["evaluation"] == "full"
    row = {r["step"]: r for r in record["candidates"]}[300]
    assert row[SUB] == 0.60 and row[FULL] == 0.50 and row["wilson_95"] == pytest.approx([0.5, 0.7])
    assert row[FULL_COUNT] == 100.0  # the full evaluation's count: the report's interval of the choice
    again = FullSet()  # a second call reuses the recorded full scores and counts
    assert select_best(run_dir, 3, again).info.step == 200 and again.calls == []
    assert {r["step"]: r[FULL_COUNT] for r in json.loads((run_dir / BEST_FILE).read_text())["candidates"]} == {
        100: 100.0, 200: 100.0, 300: 100.0,
    }  # fmt: skip


def test_a_candidate_evaluated_fully_in_the_run_is_not_evaluated_again(run_dir: Path) -> None:
    # an in-run full evaluation (full_every), with its count
    write(run_dir, 300, {SUB: 0.60, FULL: 0.65, "eval/all/count": 90.0}, top_k=2)
    full = FullSet()
    best = select_best(run_dir, 2, full)
    assert full.calls == [200] and best.info.step == 300 and best.value == 0.65
    assert {r["step"]: r["full_from"] for r in best.candidates} == {300: "in-run", 200: "re-evaluated"}
    assert {r["step"]: r[FULL_COUNT] for r in best.candidates} == {300: 90.0, 200: 100.0}


def test_top_k_zero_lets_the_subset_decide_and_says_so(run_dir: Path) -> None:
    best = select_best(run_dir, 0, FullSet())
    assert (best.info.step, best.metric, best.evaluation) == (300, SUB, "subset")


@pytest.fixture
def cli_full_set(monkeypatch: pytest.MonkeyPatch) -> FullSet:
    """The full evaluation `python -m trm best` runs, replaced by a FullSet that records its calls."""
    full = FullSet()
    monkeypatch.setattr(
        "trm.training.standalone_eval.full_metrics",
        lambda path, out: full(ckpt.CheckpointInfo(int(path.name.split("_")[1]), path, {})),
    )
    return full


def test_trm_best_re_evaluates_the_runs_top_k(
    run_dir: Path, cli_full_set: FullSet, capsys: pytest.CaptureFixture[str]
) -> None:
    full = cli_full_set
    assert main(["best", str(run_dir), "--json"]) == 0  # the run's best.top_k: 2
    shown = json.loads(capsys.readouterr().out)
    assert sorted(full.calls) == [200, 300]
    assert (shown["step"], shown["metric"], shown["evaluation"]) == (200, FULL, "full")
    assert main(["best", str(run_dir), "--top-k", "0"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == str(run_dir / "step_300") and "(subset evaluation)" in err
    assert main(["best", str(run_dir), "--top-k", "-1"]) == 2
    assert "--top-k -1 must be ≥ 0" in capsys.readouterr().err


def test_trm_best_says_when_top_k_asks_for_more_than_retention_kept(
    run_dir: Path, cli_full_set: FullSet, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["best", str(run_dir), "--top-k", "6"]) == 0
    out, err = capsys.readouterr()
    warning = f"warning: --top-k is 6, but retention kept 4 checkpoints with {SUB}: evaluating 4"
    assert warning in err.splitlines()
    # all four still ranked: a warning, not an error
    assert sorted(cli_full_set.calls) == [100, 200, 300, 400]
    assert out.strip() == str(run_dir / "step_400")  # the full set's best
    assert main(["best", str(run_dir), "--top-k", "4"]) == 0  # as many as kept: nothing to say
    assert "warning" not in capsys.readouterr().err


def test_the_recorded_choice_is_what_packaging_and_trm_eval_get(run_dir: Path) -> None:
    from trm.training.checkpointing.best import best_checkpoint

    assert best_checkpoint(run_dir).info.step == 300  # before any full re-evaluation: the subset's best
    select_best(run_dir, 3, FullSet())
    chosen = best_checkpoint(run_dir)
    assert (chosen.info.step, chosen.metric, chosen.evaluation) == (200, FULL, "full")
    assert best_checkpoint(run_dir, SUB).info.step == 300  # an explicit metric reads the manifests


def test_a_candidate_without_a_full_score_is_not_chosen_and_says_so(run_dir: Path) -> None:
    full = FullSet()

    def damaged_200(info: ckpt.CheckpointInfo) -> dict[str, float]:
        return {} if info.step == 200 else full(info)  # the in-run evaluation skips a damaged checkpoint

    best = select_best(run_dir, 3, damaged_200)
    assert best.info.step == 300 and best.value == 0.50  # 200 (full 0.62) has no score: not chosen
    assert {r["step"]: r["full_from"] for r in best.candidates}[200] == "not evaluated"


def test_trm_best_refuses_a_run_its_trainer_still_owns(
    run_dir: Path, cli_full_set: FullSet, capsys: pytest.CaptureFixture[str]
) -> None:
    from trm.runlock import RunLock

    full = cli_full_set
    trainer = RunLock(run_dir, "trainer")
    assert trainer.try_acquire("python -m trm.train run_name=r") is None
    try:
        assert main(["best", str(run_dir)]) == 2
    finally:
        trainer.release()
    err = capsys.readouterr().err
    assert "in use by another process" in err and "python -m trm.train run_name=r" in err
    assert "`--top-k 0` prints the best by subset score" in err and "RUN_NAME" not in err
    assert full.calls == [] and not (run_dir / BEST_FILE).exists()  # nothing evaluated, nothing written
    assert main(["best", str(run_dir), "--top-k", "0"]) == 0  # reading the manifests needs no lock


@pytest.mark.usefixtures("cli_full_set")
def test_trm_best_records_its_choice_in_run_json_too(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (run_dir / "run.json").write_text(json.dumps({"config": {"run_name": "r"}, "best": {"step": 300}}))
    assert main(["best", str(run_dir), "--top-k", "3", "--json"]) == 0
    record = json.loads((run_dir / "run.json").read_text())
    assert record["config"] == {"run_name": "r"}  # the rest of run.json is kept
    assert (
        record["best"]
        == json.loads(capsys.readouterr().out)
        == {
            k: v
            for k, v in json.loads((run_dir / BEST_FILE).read_text()).items()
            if k not in ("ranked_by", "top_k")
        }
    )
    assert record["best"]["step"] == 200


def test_a_recorded_choice_whose_checkpoint_is_gone_falls_back_and_says_so(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    select_best(run_dir, 3, FullSet())  # chooses 200
    shutil.rmtree(run_dir / "step_200")
    assert main(["best", str(run_dir), "--top-k", "0"]) == 0  # --top-k 0 asks for the subset's best: no note
    assert "note:" not in capsys.readouterr().err
    from trm.training.checkpointing.best import best_checkpoint

    fallback = best_checkpoint(run_dir)
    assert (fallback.info.step, fallback.evaluation) == (300, "subset") and "chose step_200" in (
        fallback.note or ""
    )
    assert fallback.as_dict()["note"] == fallback.note


@pytest.mark.parametrize(
    ("flags", "evaluated", "warnings"),
    [
        ([], [200, 300], 0),  # the run's best.top_k: 2
        (["--top-k", "6"], [200, 300, 400], 1),  # retention kept 3 complete ones: said once
        (["--top-k", "0"], [], 0),
        (["--metric", SUB], [], 0),
        (["--json"], [200, 300], 0),
    ],
)
def test_trm_best_says_each_candidate_and_each_torn_checkpoint_once(
    run_dir: Path,
    cli_full_set: FullSet,
    flags: list[str],
    evaluated: list[int],
    warnings: int,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    (run_dir / "step_100" / ckpt.COMPLETE).unlink()  # torn: skipped, with a warning
    assert main(["best", str(run_dir), *flags]) == 0
    err = capsys.readouterr().err.splitlines()
    torn = [r.getMessage() for r in caplog.records if "skipping torn checkpoint" in r.getMessage()]
    assert len(torn) == 1 and str(run_dir / "step_100") in torn[0]
    assert sorted(cli_full_set.calls) == evaluated  # each candidate evaluated once
    said = [line for line in err if line.startswith("evaluating ")]
    assert sorted(said) == sorted(
        f"evaluating {run_dir / f'step_{s}'} on the full test set" for s in evaluated
    )
    assert sum(line.startswith("warning:") for line in err) == warnings


def test_a_second_choice_writes_the_record_the_first_wrote(run_dir: Path) -> None:
    # the rerun of a `trm best` killed between best.json and run.json must record what the first call did
    select_best(run_dir, 3, FullSet())
    first = (run_dir / BEST_FILE).read_bytes()
    again = FullSet()
    select_best(run_dir, 3, again)
    assert again.calls == [] and (run_dir / BEST_FILE).read_bytes() == first
    assert {r["full_from"] for r in json.loads(first)["candidates"]} == {"re-evaluated"}


def test_a_step_saved_again_since_the_choice_is_evaluated_again(run_dir: Path) -> None:
    """A rollback to step 200, then training on, saves a new step_300: its recorded full score was the old
    weights', so it is evaluated again; the steps that did not change keep theirs."""
    select_best(run_dir, 3, FullSet())
    shutil.rmtree(run_dir / "step_300")
    sub = SCORES[300][0]
    write(
        run_dir,
        300,
        {SUB: sub, f"{SUB}/wilson_low": sub - 0.1, f"{SUB}/wilson_high": sub + 0.1},
        weights=b"new",
    )
    again = FullSet()
    best = select_best(run_dir, 3, again)
    assert again.calls == [300] and best.info.step == 200
    rows = {r["step"]: r for r in best.candidates}
    assert rows[300]["full_from"] == "re-evaluated" and rows[300]["checkpoint"] != rows[200]["checkpoint"]


def test_a_record_from_before_checkpoint_identities_is_reused_as_before(run_dir: Path) -> None:
    select_best(run_dir, 3, FullSet())
    record = json.loads((run_dir / BEST_FILE).read_text())
    for row in record["candidates"]:
        del row["checkpoint"]
    (run_dir / BEST_FILE).write_text(json.dumps(record))
    again = FullSet()
    best = select_best(run_dir, 3, again)
    assert again.calls == [] and {r["full_from"] for r in best.candidates} == {BEST_FILE}
