"""A run whose in-run evaluations read a subset: metrics named apart, the subset in run.json, the subset
score and its Wilson interval in the manifests, the top-k re-evaluated at the end, and a bit-exact resume
that keeps all of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.training.test_trainer_inprocess import assert_same_state, metric_rows, run
from trm import exit_codes
from trm.training.checkpointing import layout as ckpt
from trm.training.checkpointing.best import BEST_FILE
from trm.training.loop import Trainer

SUBSET = ("eval_subset.fraction=0.5", "eval_subset.seed=3", "eval_subset.full_every=2", "best.top_k=2")
SCORE = "subset/eval/all/exact_accuracy"


def eval_rows(run_dir: Path) -> dict[int, dict]:
    return {r["step"]: r for r in metric_rows(run_dir) if any("exact_accuracy" in k for k in r if "/" in k)}


def test_subset_evaluations_are_named_apart_and_recorded(tmp_path: Path) -> None:
    code, _trainer = run(tmp_path / "r", *SUBSET, "checkpoint.keep=0")
    assert code == exit_codes.OK
    rows = {s: {k for k in r if not k.startswith("train/")} for s, r in eval_rows(tmp_path / "r").items()}
    # Evaluation 1 reads the subset only; evaluation 2 (full_every=2) the subset and the full set.
    assert SCORE in rows[4] and not any(k.startswith(("eval/all/", "ARC/")) for k in rows[4])
    assert {SCORE, "eval/all/exact_accuracy", "eval/all/count"} <= rows[8]
    assert rows[4] - {"step"} <= {k for k in rows[8] if k.startswith("subset/")} | {
        "eval/seconds", "eval/wall_share"
    }  # fmt: skip
    record = json.loads((tmp_path / "r" / "run.json").read_text())
    subset = record["eval_subset"]
    assert (subset["mode"], subset["fraction"], subset["seed"]) == ("rows", 0.5, 3)
    assert subset["examples"] == {"all": [4, 8]} and len(subset["sha256"]) == 64
    manifests = {c.step: c.manifest for c in ckpt.find_complete(tmp_path / "r")}
    assert manifests[4]["best_metric"] == SCORE and manifests[4]["best_top_k"] == 2
    low, high = (manifests[4]["eval_metrics"][f"{SCORE}/wilson_{end}"] for end in ("low", "high"))
    assert 0 <= low <= manifests[4]["eval_metrics"][SCORE] <= high <= 1
    best = json.loads((tmp_path / "r" / BEST_FILE).read_text())
    assert best["evaluation"] == "full" and best["metric"] == "eval/all/exact_accuracy"
    assert {c["step"]: c["full_from"] for c in best["candidates"]} == {8: "in-run", 4: "re-evaluated"}
    assert record["best"]["step"] == best["step"] and record["best"]["evaluation"] == "full"


def test_a_full_run_is_unchanged(tmp_path: Path) -> None:
    code, _ = run(tmp_path / "plain")
    assert code == exit_codes.OK
    record = json.loads((tmp_path / "plain" / "run.json").read_text())
    assert record["eval_subset"] is None and "best" not in record
    assert not (tmp_path / "plain" / BEST_FILE).exists()
    assert not any(k.startswith("subset/") for r in metric_rows(tmp_path / "plain") for k in r)


def test_resume_keeps_the_subset_and_is_bit_exact(
    tmp_path: Path, straight_subset_run: tuple[Path, Trainer]
) -> None:
    straight_dir, straight = straight_subset_run
    code, _ = run(tmp_path / "split", *SUBSET, stop_at=5)  # after the first (subset) evaluation
    assert code == exit_codes.SAVED_RETRY
    code, resumed = run(tmp_path / "split", *SUBSET)
    assert code == exit_codes.OK and resumed.resumed_from is not None
    assert_same_state(straight, resumed)
    assert metric_rows(straight_dir) == metric_rows(tmp_path / "split")
    runs = [json.loads((d / "run.json").read_text()) for d in (straight_dir, tmp_path / "split")]
    assert runs[0]["eval_subset"] == runs[1]["eval_subset"]
    assert runs[0]["best"]["step"] == runs[1]["best"]["step"]


def run_stopped_at_test_batch(run_dir: Path, count: int) -> tuple[int, list[int]]:
    """A SUBSET run; SIGTERM just before the `count`-th test batch handed out (all evaluations counted):
    (exit code, the step of every test batch handed out)."""
    import os
    import signal

    from tests.training.test_trainer_inprocess import make_trainer, train

    trainer = make_trainer(run_dir, *SUBSET)
    steps: list[int] = []

    def before_test_batch(_index: int) -> None:
        steps.append(trainer.progress.step)
        if len(steps) == count:
            os.kill(os.getpid(), signal.SIGTERM)

    trainer.components.test_loader.before_test_batch = before_test_batch
    return train(trainer)[0], steps


@pytest.fixture(scope="module")
def straight_subset_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Trainer]:
    """The uninterrupted SUBSET run the stopped ones are compared with; read only (one run per module)."""
    run_dir = tmp_path_factory.mktemp("straight") / "run"
    code, trainer = run(run_dir, *SUBSET)
    assert code == exit_codes.OK
    return run_dir, trainer


@pytest.mark.parametrize(
    ("count", "stopped_at"),
    [
        (1, 4),  # the subset-only evaluation after step 4 (its one batch)
        (2, 8),  # the subset part of step 8's evaluation (full_every=2: subset, then the full set)
        (4, 8),  # the full part of step 8's evaluation, its subset part done, after its first batch
    ],
)
def test_a_stop_inside_a_subset_or_full_every_evaluation_resumes_bit_exactly(
    tmp_path: Path, straight_subset_run: tuple[Path, Trainer], count: int, stopped_at: int
) -> None:
    straight_dir, straight = straight_subset_run
    split = tmp_path / "split"
    code, steps = run_stopped_at_test_batch(split, count)
    assert code == exit_codes.SAVED_RETRY and steps[-1] == stopped_at
    newest = ckpt.find_complete(split)[-1]
    assert newest.step == stopped_at and not ckpt.load_torch(newest.path / ckpt.STATE)["progress"]["finished"]
    assert stopped_at not in eval_rows(split)  # the interrupted evaluation recorded nothing, not half of it

    code, resumed = run(split, *SUBSET)
    assert code == exit_codes.OK and resumed.resumed_from == newest.path and resumed.progress.finished
    assert_same_state(straight, resumed)
    assert metric_rows(straight_dir) == metric_rows(split)
    assert best_records(split) == best_records(straight_dir)  # the same choice, re-evaluations and all
    runs = [json.loads((d / "run.json").read_text()) for d in (straight_dir, split)]
    assert runs[0]["eval_subset"] == runs[1]["eval_subset"]


def test_a_candidates_full_evaluation_pets_the_watchdog_and_restores_the_weights(tmp_path: Path) -> None:
    import torch

    from trm.training.full_eval import InRunFullEvaluation

    code, trainer = run(tmp_path / "r", *SUBSET, "checkpoint.keep=0")
    assert code == exit_codes.OK
    before = {k: v.clone() for k, v in trainer.components.model.state_dict().items()}
    beats: list[int] = []
    evaluate = InRunFullEvaluation(
        trainer.cfg, trainer.info, trainer.components, tmp_path / "r", lambda: beats.append(1) is not None
    )
    first = ckpt.find_complete(tmp_path / "r")[0]
    metrics = evaluate(first)
    assert "eval/all/exact_accuracy" in metrics and len(beats) == 2  # one per test batch
    after = trainer.components.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_a_subset_run_trains_exactly_as_a_full_run(tmp_path: Path) -> None:
    """Evaluating a subset instead of the whole test set (and re-evaluating candidates at the end) leaves
    training alone: the same weights, optimizer and EMA state, and the same train metrics at every step."""
    code_full, full = run(tmp_path / "full", "checkpoint.keep=0")
    code_sub, sub = run(tmp_path / "sub", *SUBSET, "checkpoint.keep=0")
    assert code_full == code_sub == exit_codes.OK
    assert_same_state(full, sub)

    def train_rows(run_dir: Path) -> list[dict]:
        return [{k: v for k, v in r.items() if k.startswith("train/") or k == "step"} for r in metric_rows(run_dir)
                if any(k.startswith("train/") for k in r)]  # fmt: skip

    assert (
        train_rows(tmp_path / "full") == train_rows(tmp_path / "sub")
        and len(train_rows(tmp_path / "sub")) == 8
    )


def best_records(run_dir: Path) -> tuple[dict, dict]:
    """best.json and run.json's `best`, with the run directory's path taken out (runs are compared), and so
    the candidates' `checkpoint` identities (their state.pt holds the config, with the run's path)."""

    def local(text: str) -> dict:
        record = json.loads(text.replace(str(run_dir), "RUN"))
        for row in record.get("candidates", []):
            row.pop("checkpoint", None)
        return record

    return local((run_dir / BEST_FILE).read_text()), local(
        json.dumps(json.loads((run_dir / "run.json").read_text())["best"])
    )


def interrupt_candidates(monkeypatch, action) -> list[int]:
    """Run `action()` at the start of each best.top_k candidate's full evaluation; the steps it saw."""
    from trm.training.full_eval import InRunFullEvaluation

    original, seen = InRunFullEvaluation.__call__, []

    def call(self, checkpoint):
        seen.append(checkpoint.step)
        action()
        return original(self, checkpoint)

    monkeypatch.setattr(InRunFullEvaluation, "__call__", call)
    return seen


def test_sigterm_during_the_candidates_evaluation_saves_and_the_resume_chooses_the_same_best(
    tmp_path: Path, monkeypatch, straight_subset_run: tuple[Path, Trainer]
) -> None:
    import os
    import signal

    straight_dir, _ = straight_subset_run
    seen = interrupt_candidates(monkeypatch, lambda: os.kill(os.getpid(), signal.SIGTERM))
    code, stopped = run(tmp_path / "split", *SUBSET)
    # The stop ends the evaluation at its next test batch, nothing is recorded, and the run says "retry".
    assert code == exit_codes.SAVED_RETRY and stopped.stop_reason == "SIGTERM" and seen == [4]
    assert not (tmp_path / "split" / BEST_FILE).exists()
    assert "best" not in json.loads((tmp_path / "split" / "run.json").read_text())
    assert ckpt.find_complete(tmp_path / "split")[-1].manifest["step"] == 8
    monkeypatch.undo()
    code, resumed = run(tmp_path / "split", *SUBSET)
    assert code == exit_codes.OK and resumed.resumed_from is not None and resumed.progress.finished
    assert best_records(tmp_path / "split") == best_records(straight_dir)
    assert best_records(tmp_path / "split")[0]["candidates"][1]["full_from"] == "re-evaluated"
    code, _ = run(tmp_path / "split", *SUBSET)  # chosen: a further start has nothing to do
    assert code == exit_codes.OK and best_records(tmp_path / "split") == best_records(straight_dir)


def test_a_crash_during_the_candidates_evaluation_is_redone_by_the_resume(
    tmp_path: Path, monkeypatch, straight_subset_run: tuple[Path, Trainer]
) -> None:
    import pytest

    straight_dir, _ = straight_subset_run

    def crash() -> None:
        raise RuntimeError("killed")

    interrupt_candidates(monkeypatch, crash)
    with pytest.raises(RuntimeError, match="killed"):
        run(tmp_path / "split", *SUBSET)
    monkeypatch.undo()
    assert "best" not in json.loads((tmp_path / "split" / "run.json").read_text())
    seen = interrupt_candidates(monkeypatch, lambda: None)
    code, _ = run(tmp_path / "split", *SUBSET)
    assert code == exit_codes.OK and seen == [4]  # step 8's full score is its in-run evaluation's
    assert best_records(tmp_path / "split") == best_records(straight_dir)


def test_a_damaged_candidate_is_not_scored(tmp_path: Path, caplog) -> None:
    from trm.training.full_eval import InRunFullEvaluation

    code, trainer = run(tmp_path / "r", *SUBSET, "checkpoint.keep=0")
    assert code == exit_codes.OK
    first = ckpt.find_complete(tmp_path / "r")[0]
    state = first.path / ckpt.STATE
    data = bytearray(state.read_bytes())
    data[-1] ^= 0xFF  # same size, other bytes: only the sha256 tells
    state.write_bytes(bytes(data))
    evaluate = InRunFullEvaluation(trainer.cfg, trainer.info, trainer.components, tmp_path / "r")
    with caplog.at_level("WARNING"):
        assert evaluate(first) == {}
    assert "is damaged" in caplog.text and "sha256" in caplog.text
