"""infer's output files (--out, --save-predictions): a folder, a path under a file or a user's file there is
refused before anything is loaded, and every byte of it stays; infer's own earlier outputs are replaced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trm.errors import TRMError
from trm.kaggle.infer import _save_predictions, check_arguments, run_inference

CHALLENGES = {"t1": {"train": [], "test": [{"input": [[1]]}]}}


@pytest.fixture
def challenges(tmp_path: Path) -> Path:
    path = tmp_path / "challenges.json"
    path.write_text(json.dumps(CHALLENGES))
    return path


def _refused(tmp_path: Path, challenges: Path, **paths: Path) -> str:
    """The one-line refusal of run_inference; the bundle path does not exist, so reaching it would fail
    differently: the refusal comes before anything is loaded."""
    with pytest.raises(TRMError) as err:
        run_inference(tmp_path / "no-bundle", challenges, device="cpu", **paths)  # type: ignore[arg-type]
    assert len(str(err.value).splitlines()) == 1
    return str(err.value)


def test_a_folder_or_a_path_under_a_file_is_refused_before_the_work(tmp_path: Path, challenges: Path) -> None:
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "mine.txt").write_text("mine")
    why = _refused(tmp_path, challenges, out=folder)
    assert why.startswith(f"--out {folder}: refusing") and "results/submission.json" in why
    assert [p.name for p in folder.iterdir()] == ["mine.txt"]
    why = _refused(tmp_path, challenges, out=challenges / "submission.json")
    assert "is a file, not a folder" in why
    why = _refused(tmp_path, challenges, out=tmp_path / "s.json", save_predictions=folder)
    assert why.startswith(f"--save-predictions {folder}: refusing") and "predictions.npz" in why


def test_a_users_file_at_out_is_never_overwritten(tmp_path: Path, challenges: Path) -> None:
    solutions = tmp_path / "arc-agi_test_solutions.json"  # JSON, but grids, not attempts: not ours
    solutions.write_text(json.dumps({"t1": [[[1]]]}))
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    for path in (solutions, notes):
        before = path.read_bytes()
        why = _refused(tmp_path, challenges, out=path)
        assert "is not a submission written by infer" in why and "nothing was changed" in why
        assert path.read_bytes() == before
    with pytest.raises(TRMError, match=r"is not an \.npz of predictions written by infer"):
        run_inference(tmp_path / "b", challenges, tmp_path / "s.json", device="cpu", save_predictions=notes)
    assert notes.read_bytes() == b"my notes"


def test_infers_own_outputs_may_be_replaced(tmp_path: Path, challenges: Path) -> None:
    earlier = tmp_path / "submission.json"
    earlier.write_text(json.dumps({"t1": [{"attempt_1": [[0]], "attempt_2": [[0]]}], "t2": []}))
    check_arguments(challenges, earlier, "cpu", None, None)  # no error
    check_arguments(challenges, tmp_path / "new" / "submission.json", "cpu", None, None)
    predictions = tmp_path / "predictions.npz"
    _save_predictions(predictions, [], [], [], [])
    with pytest.raises(TRMError) as err:  # past the output checks: the missing bundle is what stops it
        run_inference(tmp_path / "no-bundle", challenges, earlier, device="cpu", save_predictions=predictions)
    assert "refusing" not in str(err.value)
