"""eval_save_outputs: the predictions file of an evaluation is written atomically."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trm.evaluation import runner


def test_a_save_that_fails_half_way_leaves_the_earlier_predictions_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "step_1_all_preds.0"
    earlier = {"preds": [torch.arange(6).reshape(2, 3), torch.arange(3).reshape(1, 3)]}
    runner.save_predictions(path, earlier)
    before = path.read_bytes()
    assert torch.equal(torch.load(path)["preds"], torch.cat(earlier["preds"]))

    def disk_full(obj, f, *args, **kwargs):  # writes part of the file, then the disk is full
        if isinstance(f, (str, Path)):
            Path(f).write_bytes(b"PK\x03\x04 torn")
        else:
            f.write(b"PK\x03\x04 torn")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(runner.torch, "save", disk_full)
    with pytest.raises(OSError, match="No space left"):
        runner.save_predictions(path, {"preds": [torch.zeros(1, 3)]})
    assert path.read_bytes() == before  # the earlier evaluation's file, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # and no temp file left beside it
