"""`data import-upstream` on a URM-built directory: upstream's layout, but `dataset.json` without
`total_puzzles`, which the import derives from the group indices (the puzzle count) and writes back."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from trm.data.loader import PuzzleLoader
from trm.data.manifest import MANIFEST, read_verified_manifest
from trm.data.upstream_import import URM_BUILDER, import_upstream
from trm.errors import TRMError

SEQ_LEN = 900  # 30x30 ARC grids


def urm_metadata(total_groups: int, puzzles: int, examples: int, num_ids: int) -> dict:
    """The keys URM's `PuzzleDatasetMetadata` dumps (no `total_puzzles`)."""
    return {"pad_id": 0, "ignore_label_id": 0, "blank_identifier_id": 0, "vocab_size": 12, "seq_len": SEQ_LEN,
            "num_puzzle_identifiers": num_ids, "total_groups": total_groups,
            "mean_puzzle_examples": examples / puzzles, "sets": ["all"]}  # fmt: skip


def write_urm_dir(root: Path, groups: dict[str, list[int]]) -> dict[str, tuple[int, int, int]]:
    """A small directory in the layout URM's ARC builder writes. `groups[split]` lists the number of puzzles
    (original + augmented variants) per group; every puzzle has 2 examples. Returns (groups, puzzles,
    examples) per split."""
    rng = np.random.default_rng(0)
    names = ["<blank>"]
    counts = {}
    for split, sizes in groups.items():
        (root / split).mkdir(parents=True)
        puzzles = sum(sizes)
        examples = 2 * puzzles
        ids = np.arange(len(names), len(names) + puzzles, dtype=np.int32)
        names += [f"p{split}{i}|||t{i % 8}|||0123456789" for i in range(puzzles)]
        arrays = {
            "inputs": rng.integers(0, 12, (examples, SEQ_LEN), dtype=np.uint8),
            "labels": rng.integers(0, 12, (examples, SEQ_LEN), dtype=np.uint8),
            "puzzle_identifiers": ids,
            "puzzle_indices": np.arange(0, examples + 1, 2, dtype=np.int32),
            "group_indices": np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32),
        }
        for key, value in arrays.items():
            np.save(root / split / f"all__{key}.npy", value)
        counts[split] = (len(sizes), puzzles, examples)
    for split, (n_groups, puzzles, _examples) in counts.items():
        meta = urm_metadata(n_groups, puzzles, examples, len(names))
        (root / split / "dataset.json").write_text(json.dumps(meta))
    (root / "identifiers.json").write_text(json.dumps(names))
    (root / "test_puzzles.json").write_text(json.dumps({}))
    return counts


def test_cli_imports_a_urm_built_dir_and_derives_total_puzzles(tmp_path):
    root = tmp_path / "urm"
    counts = write_urm_dir(root, {"train": [3, 2, 4], "test": [1, 2]})
    before = json.loads((root / "train" / "dataset.json").read_text())
    proc = subprocess.run([sys.executable, "-m", "trm", "data", "import-upstream", str(root)],
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "manifest.json" in proc.stdout
    for split, (n_groups, puzzles, _examples) in counts.items():
        meta = json.loads((root / split / "dataset.json").read_text())
        assert meta["total_puzzles"] == puzzles != n_groups  # the puzzle count, not the group count
        assert meta["total_groups"] == n_groups
        if split == "train":
            assert {k: v for k, v in meta.items() if k != "total_puzzles"} == before
    manifest = read_verified_manifest(root)  # hashes cover the rewritten dataset.json
    assert manifest["builder"] == URM_BUILDER
    assert manifest["args"]["derived_total_puzzles"] == ["train", "test"]
    assert manifest["counts"]["train"] == {"groups": 3, "puzzles": 9, "examples": 18}
    loader = PuzzleLoader([root], "train", global_batch_size=4, seed=0)
    assert loader.metadata.total_puzzles == 9
    seen = sum(int((batch["labels"] != 0).any(dim=1).sum()) for _, batch, _ in loader.iter_train())
    assert seen > 0


def test_urm_dir_trains_on_the_same_batches_as_upstreams(smoke_dirs, tmp_path):
    """The same build with `total_puzzles` removed (what URM writes) imports to the same stream."""
    urm = tmp_path / "urm"
    shutil.copytree(smoke_dirs["materialized"], urm)
    (urm / MANIFEST).unlink()
    expected = {}
    for split in ("train", "test"):
        path = urm / split / "dataset.json"
        meta = json.loads(path.read_text())
        expected[split] = meta.pop("total_puzzles")
        path.write_text(json.dumps(meta))
    import_upstream(urm)
    for split in ("train", "test"):
        assert json.loads((urm / split / "dataset.json").read_text())["total_puzzles"] == expected[split]
    ours = PuzzleLoader([smoke_dirs["compact"]], "train", global_batch_size=16, seed=1)
    theirs = PuzzleLoader([urm], "train", global_batch_size=16, seed=1)
    for (_, a, _), (_, b, _) in zip(ours.iter_train(), theirs.iter_train(), strict=True):
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_inconsistent_urm_dir_is_refused_and_left_untouched(tmp_path):
    root = tmp_path / "urm"
    write_urm_dir(root, {"train": [2, 2], "test": [1]})
    path = root / "test" / "all__group_indices.npy"
    np.save(path, np.array([0, 2], dtype=np.int32))  # ends past the single test puzzle
    before = (root / "train" / "dataset.json").read_bytes()
    with pytest.raises(TRMError, match=r"test: not a complete upstream dataset: group_indices"):
        import_upstream(root)
    assert (root / "train" / "dataset.json").read_bytes() == before  # no total_puzzles written
    assert not (root / MANIFEST).exists()


def test_unreadable_dataset_json_names_the_file(tmp_path):
    root = tmp_path / "urm"
    write_urm_dir(root, {"train": [1], "test": [1]})
    (root / "train" / "dataset.json").write_text("[1, 2]")
    with pytest.raises(TRMError, match=r"train/dataset.json: expected a JSON object"):
        import_upstream(root)


@pytest.mark.parametrize("cut", ["missing", "truncated", "empty"])
def test_an_arc_build_killed_before_its_last_file_is_not_imported(tmp_path, cut):
    """Upstream's ARC builder writes test_puzzles.json last: without it (or torn) the build did not finish."""
    root = tmp_path / "urm"
    write_urm_dir(root, {"train": [2, 2], "test": [1]})
    puzzles = root / "test_puzzles.json"
    if cut == "missing":
        puzzles.unlink()
    else:
        puzzles.write_text('{"t0": {"train": [' if cut == "truncated" else "")
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    with pytest.raises(TRMError, match=r"test_puzzles\.json: (missing|unreadable).*rebuild"):
        import_upstream(root)
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before  # nothing written
    proc = subprocess.run(
        [sys.executable, "-m", "trm", "data", "import-upstream", str(root)], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "test_puzzles.json" in proc.stderr and "Traceback" not in proc.stderr


def test_a_damaged_imported_dataset_names_the_fix_that_works(tmp_path):
    """An imported dataset cannot be rebuilt by our builders, and a second import refuses its manifest: the
    error says to rebuild with its own builder into a new folder and import that."""
    root = tmp_path / "urm"
    write_urm_dir(root, {"train": [2, 1], "test": [1]})
    import_upstream(root)
    path = root / "train" / "all__inputs.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 1  # same size, one byte changed
    path.write_bytes(bytes(data))
    with pytest.raises(TRMError) as err:
        read_verified_manifest(root)
    message = str(err.value)
    assert "all__inputs.npy" in message and "import-upstream NEW_FOLDER" in message
    assert "build-arc" not in message and URM_BUILDER in message
    with pytest.raises(TRMError, match="already exists"):
        import_upstream(root)  # why the hint names a new folder
    with pytest.raises(TRMError, match="import-upstream NEW_FOLDER"):
        PuzzleLoader([root], "train", global_batch_size=2, seed=0)
