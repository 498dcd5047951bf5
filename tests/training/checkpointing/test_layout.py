"""Checkpoint folders: atomic publication, torn ones skipped, hash verification, pruning, compatibility."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from trm.errors import TRMError
from trm.training.checkpointing import layout as ckpt

FACTS = {
    "dataset_fingerprint": "d1",
    "arch": {"hidden_size": 64},
    "global_batch_size": 8,
    "math": {"lr": 1e-3, "arch": {"hidden_size": 64}},
}


def write(root: Path, step: int, payload: bytes = b"weights") -> Path:
    folder = ckpt.prepare_partial(root, step)
    (folder / "state.pt").write_bytes(payload)
    return ckpt.publish(root, step, {"step": step, **FACTS})


def test_publish_writes_manifest_with_hashes_and_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRM_IMAGE_DIGEST", "sha256:abc")
    folder = write(tmp_path, 5)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert (folder / "COMPLETE").read_text() == "5\n"
    assert manifest["image_digest"] == "sha256:abc" and manifest["git_sha"]
    assert manifest["files"]["state.pt"]["bytes"] == 7 and len(manifest["files"]["state.pt"]["sha256"]) == 64
    assert not list(tmp_path.glob(".step_*"))


def test_torn_and_corrupt_checkpoints_are_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path, 1)
    write(tmp_path, 2)
    (tmp_path / "step_2" / "COMPLETE").unlink()  # torn: never finished
    write(tmp_path, 3)
    (tmp_path / "step_3" / "state.pt").write_bytes(b"WEIGHTS")  # same size, other bytes
    with caplog.at_level(logging.WARNING):
        assert [c.step for c in ckpt.find_complete(tmp_path)] == [1, 3]
    assert "step_2" in caplog.text and "COMPLETE" in caplog.text
    with caplog.at_level(logging.WARNING):  # the resume path verifies the bytes too
        assert [c.step for c in ckpt.find_complete(tmp_path, verify_hashes=True)] == [1]
    assert "sha256" in caplog.text


def test_prune_keeps_the_newest_and_drops_partials(tmp_path: Path) -> None:
    for step in (1, 2, 3):
        write(tmp_path, step)
    ckpt.prepare_partial(tmp_path, 4)
    ckpt.prune(tmp_path, keep=2)
    assert [c.step for c in ckpt.find_complete(tmp_path)] == [2, 3]
    assert not list(tmp_path.glob(".step_*"))


def test_republishing_a_step_replaces_it_atomically(tmp_path: Path) -> None:
    write(tmp_path, 7, b"old")
    write(tmp_path, 7, b"newer")
    assert (tmp_path / "step_7" / "state.pt").read_bytes() == b"newer"
    assert [c.step for c in ckpt.find_complete(tmp_path)] == [7]


def test_compatibility_rules(tmp_path: Path) -> None:
    manifest = {"step": 1, **FACTS}
    assert ckpt.check_compatible(manifest, dict(FACTS), tmp_path) == []
    with pytest.raises(TRMError, match=r"dataset fingerprint d1.*now give d2"):
        ckpt.check_compatible(manifest, {**FACTS, "dataset_fingerprint": "d2"}, tmp_path)
    with pytest.raises(TRMError, match=r"arch\.hidden_size: 64 -> 128"):
        ckpt.check_compatible(manifest, {**FACTS, "arch": {"hidden_size": 128}}, tmp_path)
    with pytest.raises(TRMError, match="global_batch_size=8"):
        ckpt.check_compatible(manifest, {**FACTS, "global_batch_size": 16}, tmp_path)
    warnings = ckpt.check_compatible(manifest, {**FACTS, "math": {**FACTS["math"], "lr": 1e-4}}, tmp_path)
    assert warnings == ["resuming with lr changed: 0.001 -> 0.0001"]


def test_every_use_verifies_first_and_names_the_damaged_file(tmp_path: Path) -> None:
    from trm.training.checkpointing.initial_weights import read_checkpoint_weights

    folder = write(tmp_path, 4)
    assert ckpt.verified_manifest(folder, "trm.eval")["files"]["state.pt"]["bytes"] == 7
    (folder / "state.pt").write_bytes(b"WEIGHTS")  # a flipped byte: same size
    with pytest.raises(
        TRMError, match=r"^trm\.eval: checkpoint .*step_4 is damaged or incomplete \(state\.pt does"
    ):
        ckpt.verified_manifest(folder, "trm.eval")
    with pytest.raises(TRMError, match=r"load_checkpoint=.*state\.pt does not match its sha256"):
        read_checkpoint_weights(str(folder))
    (folder / "state.pt").unlink()
    with pytest.raises(TRMError, match=r"\(state\.pt is missing\)"):
        ckpt.verified_manifest(folder, "adapt")


@pytest.mark.parametrize(
    ("manifest", "said"),
    [
        ("{not json", "unreadable manifest.json"),
        ('{"files": []}', "no `files` object"),
        ('{"files": {"state.pt": {"bytes": "7", "sha256": "x"}}}', "files.state.pt needs an integer `bytes`"),
        ('{"files": {"state.pt": {"bytes": 7, "sha256": null}}}', "files.state.pt needs an integer `bytes`"),
    ],
)
def test_a_manifest_with_wrong_value_types_is_one_line_not_a_traceback(
    tmp_path: Path, manifest: str, said: str
) -> None:
    folder = write(tmp_path, 4)
    (folder / "manifest.json").write_text(manifest)
    with pytest.raises(TRMError, match=said):
        ckpt.verified_manifest(folder, "package kaggle")
    assert ckpt.find_complete(tmp_path) == []  # discovery skips it with a warning, as a torn one


def test_the_bytes_loaded_are_the_bytes_verified(tmp_path: Path) -> None:
    import torch

    root = tmp_path / "run"
    folder = ckpt.prepare_partial(root, 1)
    ckpt.save_torch({"model": {"w": torch.ones(2)}}, folder / "state.pt")
    folder = ckpt.publish(root, 1, {"step": 1, **FACTS})
    manifest = ckpt.verified_manifest(folder, "publish-checkpoint")
    assert torch.equal(
        ckpt.load_verified(folder, "state.pt", manifest, "publish-checkpoint")["model"]["w"], torch.ones(2)
    )
    data = bytearray((folder / "state.pt").read_bytes())
    data[-30] ^= 0x01  # changed after the check
    (folder / "state.pt").write_bytes(bytes(data))
    with pytest.raises(TRMError, match=r"state\.pt does not match its sha256 .*changed while being read"):
        ckpt.load_verified(folder, "state.pt", manifest, "publish-checkpoint")
