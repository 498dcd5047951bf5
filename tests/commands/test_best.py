"""`python -m trm best RUN_DIR` and `--best` of `package kaggle` and `trm.eval`: the checkpoint with the
highest evaluation metric, not the newest; clear errors when no checkpoint carries the metric."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trm.commands import main
from trm.training.checkpointing import layout as ckpt


def write(root: Path, step: int, metrics: dict | None, best_metric: str | None = "ARC/pass@2") -> None:
    folder = ckpt.prepare_partial(root, step)
    (folder / "state.pt").write_bytes(b"w")
    kind = ckpt.EVAL if metrics is not None else ckpt.ROLLING
    ckpt.publish(
        root, step, {"step": step, "kind": kind, "eval_metrics": metrics, "best_metric": best_metric}
    )


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    root = tmp_path / "run"
    write(root, 100, {"ARC/pass@2": 0.05, "ARC/pass@1": 0.04})
    write(root, 200, {"ARC/pass@2": 0.08, "ARC/pass@1": 0.03})
    write(root, 250, None)  # a rolling checkpoint: no metrics
    write(root, 300, {"ARC/pass@2": 0.06, "ARC/pass@1": 0.07})  # the last evaluation is not the best
    return root


def test_best_prints_the_path_and_json(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["best", str(run_dir)]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == str(run_dir / "step_200")
    assert "step 200: ARC/pass@2 = 0.08" in err
    assert main(["best", str(run_dir), "--metric", "ARC/pass@1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "path": str(run_dir / "step_300"), "step": 300, "metric": "ARC/pass@1", "value": 0.07,
        "evaluation": "full",
    }  # fmt: skip


def test_best_errors_name_the_metrics_available(run_dir: Path, tmp_path: Path, capsys) -> None:
    assert main(["best", str(run_dir), "--metric", "ARC/pass@3"]) == 2
    err = capsys.readouterr().err
    assert "no complete checkpoint in" in err and "'ARC/pass@3'" in err
    assert "metrics available: ARC/pass@1, ARC/pass@2" in err and "Traceback" not in err
    assert main(["best", str(tmp_path / "empty")]) == 2
    assert "holds no complete checkpoint" in capsys.readouterr().err
    assert main(["best", str(run_dir / "step_200")]) == 2
    assert f"pass its parent {run_dir}" in capsys.readouterr().err
    old = tmp_path / "old"
    write(old, 5, {"eval/all/exact_accuracy": 0.5}, best_metric=None)
    assert main(["best", str(old)]) == 2
    assert "pass --metric NAME (metrics available: eval/all/exact_accuracy)" in capsys.readouterr().err
    assert main(["best", str(old), "--metric", "eval/all/exact_accuracy"]) == 0


def test_package_kaggle_best_packages_the_best_checkpoint(run_dir: Path, tmp_path: Path, monkeypatch) -> None:
    import trm.kaggle.package as kaggle_package

    packaged = []

    def fake_package(checkpoint, out_dir, **kwargs):
        packaged.append(Path(checkpoint))
        return {"files": {}}

    monkeypatch.setattr(kaggle_package, "package_kaggle", fake_package)
    out = str(tmp_path / "bundle")
    assert main(["package", "kaggle", str(run_dir), out, "--best", "--no-wheels"]) == 0
    assert main(["package", "kaggle", str(run_dir), out, "--best", "--metric", "ARC/pass@1"]) == 0
    assert main(["package", "kaggle", str(run_dir), out, "--no-wheels"]) == 0
    assert packaged == [run_dir / "step_200", run_dir / "step_300", run_dir / "step_300"]


def test_eval_best_evaluates_the_best_checkpoint(run_dir: Path, monkeypatch, capsys) -> None:
    import trm.eval
    import trm.training.standalone_eval as standalone

    evaluated = []
    monkeypatch.setattr(standalone, "evaluate_checkpoint", lambda c, *a, **k: evaluated.append(c) or 0)
    assert trm.eval.main([str(run_dir), "--best"]) == 0
    assert evaluated == [run_dir / "step_200"]
    assert trm.eval.main([str(run_dir), "--best", "--metric", "nope"]) == 2
    assert "metrics available" in capsys.readouterr().err
