from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from tests.helpers import SMOKE_BUILD
from trm.data.build_arc import build_arc_dataset
from trm.data.loader import PuzzleLoader
from trm.data.manifest import MANIFEST, read_verified_manifest, write_manifest
from trm.data.upstream_import import import_upstream
from trm.errors import TRMError


@pytest.fixture
def copies(smoke_dirs, tmp_path):
    out = {}
    for form, src in smoke_dirs.items():
        out[form] = tmp_path / form
        shutil.copytree(src, out[form])
    return out


def verify_cli(path):
    return subprocess.run(
        [sys.executable, "-m", "trm", "data", "verify", str(path)], capture_output=True, text=True
    )


def test_verify_accepts_a_fresh_build(smoke_dirs):
    for path in smoke_dirs.values():
        proc = verify_cli(path)
        assert proc.returncode == 0, proc.stderr
        assert "OK" in proc.stdout


def test_truncated_array_is_caught(copies):
    path = copies["materialized"] / "train" / "all__inputs.npy"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 900])
    with pytest.raises(TRMError, match=r"all__inputs.npy: \d+ bytes, manifest says"):
        read_verified_manifest(copies["materialized"])
    proc = verify_cli(copies["materialized"])
    assert proc.returncode == 2 and "truncated" in proc.stderr and "build-arc" in proc.stderr


@pytest.mark.parametrize(
    "rel", ["train/all__puzzle_colours.npy", "test/all__example_offsets.npy", "grids.npy"]
)
def test_edited_array_is_caught(copies, rel):
    path = copies["compact"] / rel
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(TRMError, match="sha256 differs"):
        read_verified_manifest(copies["compact"])
    with pytest.raises(TRMError, match="sha256 differs"):
        PuzzleLoader([copies["compact"]], "train", global_batch_size=8)


def test_edited_manifest_and_missing_manifest(copies):
    manifest = copies["compact"] / MANIFEST
    manifest.write_text(manifest.read_text().replace('"num_aug": 8', '"num_aug": 9'))
    with pytest.raises(TRMError, match="fingerprint"):
        read_verified_manifest(copies["compact"])
    manifest.unlink()
    with pytest.raises(TRMError, match=r"manifest.json: missing.*build-arc.*import-upstream"):
        PuzzleLoader([copies["compact"]], "train", global_batch_size=8)
    with pytest.raises(TRMError, match="not found"):
        PuzzleLoader([copies["compact"] / "nope"], "test", global_batch_size=8)


def test_import_upstream_layout(copies, smoke_dirs):
    upstream = copies["materialized"]
    (upstream / MANIFEST).unlink()  # what upstream's builder leaves behind
    with pytest.raises(TRMError, match="missing"):
        PuzzleLoader([upstream], "train", global_batch_size=8)
    manifest = import_upstream(upstream)
    assert manifest["form"] == "materialized" and manifest["counts"]["train"]["examples"] > 0
    with pytest.raises(TRMError, match="already exists"):
        import_upstream(upstream)
    ours = PuzzleLoader([smoke_dirs["compact"]], "train", global_batch_size=16, seed=1)
    theirs = PuzzleLoader([upstream], "train", global_batch_size=16, seed=1)
    for (_, a, _), (_, b, _) in zip(ours.iter_train(), theirs.iter_train(), strict=True):
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_import_upstream_rejects_inconsistent_arrays(copies):
    upstream = copies["materialized"]
    (upstream / MANIFEST).unlink()
    path = upstream / "test" / "all__puzzle_indices.npy"
    indices = np.load(path)
    indices[-1] += 1
    np.save(path, indices)
    with pytest.raises(TRMError, match=r"test: not a complete upstream dataset: puzzle_indices ends at"):
        import_upstream(upstream)
    assert not (upstream / MANIFEST).exists()


def test_counts_that_do_not_match_the_arrays_are_refused_and_rebuilt(copies):
    """`counts` is outside the fingerprint: the loader checks it against the arrays, and the rebuild it
    names (same flags + --overwrite) does not reuse such a dataset."""
    root = copies["compact"]
    manifest = json.loads((root / MANIFEST).read_text())
    manifest["counts"]["train"]["examples"] += 5
    (root / MANIFEST).write_text(json.dumps(manifest))
    read_verified_manifest(root)  # files and fingerprint still match
    with pytest.raises(TRMError, match=r"counts train\.examples=\d+ but the arrays hold \d+.*--overwrite"):
        PuzzleLoader([root], "train", global_batch_size=8)
    with pytest.raises(TRMError, match=r"counts train\.examples.*pass --overwrite to rebuild it"):
        build_arc_dataset(root, form="compact", **SMOKE_BUILD)
    build_arc_dataset(root, form="compact", overwrite=True, **SMOKE_BUILD)
    PuzzleLoader([root], "train", global_batch_size=8)


def test_materialized_rows_that_do_not_match_the_index_arrays_are_refused(copies):
    """A manifest written over a short all__inputs.npy (same name, fewer rows) still fails to load."""
    root = copies["materialized"]
    manifest = json.loads((root / MANIFEST).read_text())
    for name in ("inputs", "labels"):
        path = root / "test" / f"all__{name}.npy"
        np.save(path, np.load(path)[:-3])
    (root / MANIFEST).unlink()
    write_manifest(root, form="materialized", builder="x", args=manifest["args"], inputs={}, counts={})
    with pytest.raises(TRMError, match=r"test: all__inputs\.npy is \[\d+, 900\], but puzzle_indices"):
        PuzzleLoader([root], "test", global_batch_size=8)
