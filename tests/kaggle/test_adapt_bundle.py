"""The bundle meets tasks it has no rows for: a loud count without adaptation, adaptation within a budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.adapt.generated import write_tasks
from tests.helpers import SmokeCheckpoint, make_smoke
from trm.commands import main
from trm.evaluation.voting import validate_submission
from trm.kaggle import bundle as B
from trm.kaggle.infer import run_inference
from trm.kaggle.package import package_kaggle
from trm.model.upstream import PUZZLE_EMB_KEY


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> SmokeCheckpoint:
    return make_smoke(tmp_path_factory.mktemp("kaggle-adapt"))


@pytest.fixture(scope="module")
def bundle_dir(smoke: SmokeCheckpoint) -> Path:
    out = smoke.root / "bundle"
    package_kaggle(smoke.checkpoint, out, wheels=False, progress=False)
    return out


def test_without_adaptation_inference_counts_the_tasks_without_rows_loudly(
    smoke: SmokeCheckpoint, bundle_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hidden = write_tasks(smoke.root / "hidden", "hidden", 2, seed=3, colours=4)
    seen = next(iter(smoke.challenges))
    mixed = smoke.root / "mixed.json"
    mixed.write_text(json.dumps({seen: smoke.challenges[seen], **json.loads(hidden.read_text())}))
    report = run_inference(
        bundle_dir, mixed, smoke.root / "plain.json", num_aug=2, device="cpu", progress=False
    )
    assert report.unseen_tasks == 2 and report.adapted is None
    assert any("2 of 3 task(s) have no trained puzzle-embedding row" in n for n in report.notes)
    argv = [
        "infer",
        "--weights",
        str(bundle_dir),
        "--challenges",
        str(mixed),
        "--out",
        str(smoke.root / "p.json"),
    ]
    assert main([*argv, "--num-aug", "2", "--device", "cpu", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "WARNING: 2 of 3 task(s) have no trained puzzle-embedding row" in err and "--adapt-minutes" in err


@pytest.mark.kaggle
def test_bundle_adapts_to_a_hidden_task_file_then_votes(
    smoke: SmokeCheckpoint, bundle_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hidden = write_tasks(smoke.root / "hidden2", "hidden", 3, seed=4, colours=4)
    tasks = json.loads(hidden.read_text())
    config = B.read_config(bundle_dir)
    assert config["train"]["arch"]["hidden_size"] == 16  # what adaptation trains with
    work, out = smoke.root / "adapt-work", smoke.root / "submission.json"
    argv = ["infer", "--weights", str(bundle_dir), "--challenges", str(hidden), "--out", str(out)]
    budget = ["--adapt-steps", "3", "--adapt-minutes", "10", "--adapt-num-aug", "2", "--adapt-dir", str(work)]
    assert main([*argv, "--num-aug", "3", "--device", "cpu", "--quiet", *budget]) == 0
    printed = capsys.readouterr()
    assert "adapted to 3 task(s)" in printed.out and "WARNING" not in printed.err
    validate_submission(json.loads(out.read_text()), {t: {"test": tasks[t]["test"]} for t in tasks})

    # The adapted bundle has a trained row for every variant of every hidden task, moved off the mean.
    adapted = work / "bundle"
    names = json.loads((adapted / B.IDENTIFIERS).read_text())
    assert {n.split("|||")[0] for n in names[1:]} == set(tasks) and len(names) == 1 + 3 * 3
    table = torch.load(adapted / B.WEIGHTS, weights_only=True)[PUZZLE_EMB_KEY]
    start = torch.load(bundle_dir / B.WEIGHTS, weights_only=True)[PUZZLE_EMB_KEY][-1]  # the unseen row
    assert len(table) == len(names) + 1 and not torch.allclose(table[1:-1], start.expand(9, -1))
    assert json.loads((work / "adapt.json").read_text())["step"] == 3

    # Same command again: the finished adaptation is reused and the submission is the same.
    first = out.read_text()
    assert main([*argv, "--num-aug", "3", "--device", "cpu", "--quiet", *budget]) == 0
    assert out.read_text() == first
