"""`python -m trm.eval --puzzle-ids blank|shuffled` on a tiny trained model: the model sees the ablated
identifiers, the evaluators the true ones, and the results land next to (not over) the normal ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.hub.conftest import TrainedRun
from trm import eval as trm_eval
from trm.evaluation.ablation import identifier_map
from trm.model.sparse_embedding import SparsePuzzleEmbedding
from trm.training.checkpointing.layout import find_complete


def test_blank_maps_everything_to_the_blank_row_and_shuffled_is_a_fixed_derangement() -> None:
    assert identifier_map("trained", 10, 0, seed=0) is None
    assert identifier_map("blank", 10, 0, seed=0).tolist() == [0] * 10
    mapping = identifier_map("shuffled", 10, 0, seed=3)
    assert mapping[0] == 0 and sorted(mapping.tolist()) == list(range(10))
    assert all(int(mapping[i]) != i for i in range(1, 10))
    assert torch.equal(mapping, identifier_map("shuffled", 10, 0, seed=3))
    assert not torch.equal(mapping, identifier_map("shuffled", 10, 0, seed=4))


@pytest.fixture
def seen_ids(monkeypatch: pytest.MonkeyPatch) -> list[torch.Tensor]:
    """Every identifier batch the puzzle-embedding table is asked for."""
    seen: list[torch.Tensor] = []
    original = SparsePuzzleEmbedding.forward

    def recording(self, ids):
        seen.append(ids.detach().clone())
        return original(self, ids)

    monkeypatch.setattr(SparsePuzzleEmbedding, "forward", recording)
    return seen


def _evaluate(trained: TrainedRun, out: Path, mode: str) -> tuple[dict, dict]:
    checkpoint = find_complete(trained.run_dir)[-1].path
    argv = [
        str(checkpoint),
        f"data_paths=[{trained.dataset}]",
        "--output-dir",
        str(out),
        "--puzzle-ids",
        mode,
    ]
    assert trm_eval.main(argv) == 0
    folder = out if mode == "trained" else out / f"puzzle_ids-{mode}"
    [metrics] = folder.glob("evaluator_ARC_step_*/metrics.json")
    return json.loads(metrics.read_text()), json.loads((metrics.parent / "submission.json").read_text())


def test_ablation_changes_what_the_model_sees_and_its_scores_but_not_the_tasks(
    trained: TrainedRun, tmp_path: Path, seen_ids: list[torch.Tensor]
) -> None:
    normal, normal_submission = _evaluate(trained, tmp_path, "trained")
    true_ids = torch.cat(seen_ids)
    assert (true_ids != 0).all()  # every test puzzle has its own trained row
    seen_ids.clear()

    blank, blank_submission = _evaluate(trained, tmp_path, "blank")
    assert (torch.cat(seen_ids) == 0).all()
    seen_ids.clear()

    shuffled, shuffled_submission = _evaluate(trained, tmp_path, "shuffled")
    identifiers = json.loads((trained.dataset / "identifiers.json").read_text())
    mapping = identifier_map("shuffled", len(identifiers), 0, seed=0)
    assert torch.equal(torch.cat(seen_ids), mapping[true_ids.long()].to(true_ids.dtype))

    assert (normal["puzzle_ids"], blank["puzzle_ids"], shuffled["puzzle_ids"]) == (
        "trained",
        "blank",
        "shuffled",
    )
    # The trained rows matter to this model: its loss changes when they are taken away.
    assert blank["eval/all/lm_loss"] != pytest.approx(normal["eval/all/lm_loss"], rel=1e-6)
    assert shuffled["eval/all/lm_loss"] != pytest.approx(normal["eval/all/lm_loss"], rel=1e-6)
    # Votes still go to the true tasks: every submission answers the same test inputs.
    assert set(blank_submission) == set(shuffled_submission) == set(normal_submission)
    assert blank["eval/all/count"] == normal["eval/all/count"]
