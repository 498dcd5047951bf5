"""Byte-identity with upstream's ARC builder: the legacy random draws, golden sha256 of upstream's output
(no checkout needed) and, with TRM_UPSTREAM, upstream's builder run side by side on the same inputs."""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import numpy as np
import pytest

from tests.data.upstream_builds import CONFIGS, build_ours, file_hashes, golden, run_upstream
from trm.data.encoding import GRID_SIZE, TRANSPOSING
from trm.data.formats import SplitData
from trm.data.legacy_draws import LegacyWords, draw_offsets
from trm.data.manifest import read_manifest

UPSTREAM = os.environ.get("TRM_UPSTREAM")


def _configs(*, upstream: bool) -> list:
    """Configs as test parameters; full builds at aug 8 (and one more golden build) are marked slow."""
    params = []
    for name, config in CONFIGS.items():
        slow = config.slow or (config.slow_golden and not upstream)
        params.append(pytest.param(name, marks=[pytest.mark.slow] if slow else [], id=name))
    return params


# --- the draws, against numpy's own legacy calls ------------------------------------------------------------


def test_bounded_draws_and_shuffles_equal_numpy_legacy_calls():
    for seed in (0, 42, 2**32 - 1):
        rs, words = np.random.RandomState(seed), LegacyWords(seed)
        for n in (0, 1, 2, 9, 400, 1000):
            items = list(range(n))
            rs.shuffle(items)
            assert words.shuffled(n) == items
        for high in (1, 2, 3, 7, 8, 9, 16, 17, 30, 31, 1000, 2**20 + 1, 1, 1):
            assert [words.below(high) for _ in range(5)] == [rs.randint(0, high) for _ in range(5)], high


def test_augmentation_tries_equal_randint_then_permutation():
    rs, words = np.random.RandomState(42), LegacyWords(42)
    words.below(5), rs.randint(0, 5)  # start mid-stream
    tids, cmaps, ends = words.tries(3000)
    for k in range(3000):
        assert tids[k] == rs.randint(0, 8)
        assert cmaps[k, 0] == 0 and cmaps[k, 1:].tolist() == rs.permutation(np.arange(1, 10)).tolist()
    # Consuming up to try k leaves the stream where numpy is after k + 1 tries.
    words.seek(int(ends[-1]))
    assert words.below(1000) == rs.randint(0, 1000)
    rs2, words2 = np.random.RandomState(7), LegacyWords(7)
    _, _, ends2 = words2.tries(10)
    words2.seek(int(ends2[3]))
    for _ in range(4):
        rs2.randint(0, 8), rs2.permutation(9)
    assert words2.below(30) == rs2.randint(0, 30)


def test_offsets_follow_upstreams_order_of_draws():
    """Per puzzle an anchor draw, then (row, column) for every other example; a 30-wide grid draws nothing."""
    rng = np.random.default_rng(0)
    shapes = [((3, 5), (4, 2)), ((30, 1), (2, 30)), ((1, 1), (1, 1)), ((12, 29), (30, 7))]
    pairs = [
        (rng.integers(0, 10, a, dtype=np.uint8), rng.integers(0, 10, b, dtype=np.uint8)) for a, b in shapes
    ]
    tids = rng.integers(0, 8, 200)
    rs = np.random.RandomState(3)
    expected = np.zeros((len(tids), len(pairs), 2), dtype=np.uint8)
    for v, tid in enumerate(tids):
        anchor = rs.randint(0, len(pairs))
        for i, (a, b) in enumerate(pairs):
            h, w = max(a.shape[0], b.shape[0]), max(a.shape[1], b.shape[1])
            if tid in TRANSPOSING:
                h, w = w, h
            if i != anchor:
                expected[v, i] = rs.randint(0, GRID_SIZE - h + 1), rs.randint(0, GRID_SIZE - w + 1)
    words = LegacyWords(3)
    assert np.array_equal(draw_offsets(words, pairs, tids), expected)
    assert words.below(100) == rs.randint(0, 100)


# --- golden hashes of upstream's output ----------------------------------------------------------------------


@pytest.mark.parametrize("name", _configs(upstream=False))
def test_materialized_build_has_upstreams_bytes(name, tmp_path):
    ours = build_ours(CONFIGS[name], tmp_path / "out", tmp_path / "inputs")
    assert file_hashes(ours) == golden()[name]
    entry = read_manifest(ours)["identifiers"]
    assert entry == {"upstream_identical": True}


def _npy_sha256(array: np.ndarray) -> str:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return f"sha256:{hashlib.sha256(buffer.getvalue()).hexdigest()}"


@pytest.mark.parametrize("name", ["arc1concept-first12-aug50-seed7", "hidden-first8-aug4-seed1"])
def test_compact_build_renders_upstreams_examples(name, tmp_path):
    """The compact form holds upstream's index and JSON files and renders upstream's inputs and labels."""
    ours = build_ours(CONFIGS[name], tmp_path / "out", tmp_path / "inputs", form="compact")
    expected = golden()[name]
    hashes = file_hashes(ours)
    shared = {k: v for k, v in expected.items() if not k.endswith(("__inputs.npy", "__labels.npy"))}
    assert {k: hashes[k] for k in shared} == shared
    for split in ("train", "test"):
        data = SplitData(ours, split, "compact")
        inputs, labels = data.examples(np.arange(data.num_examples))
        assert _npy_sha256(inputs) == expected[f"{split}/all__inputs.npy"]
        assert _npy_sha256(labels) == expected[f"{split}/all__labels.npy"]


def test_hidden_subset_keeps_dummy_outputs_in_test_puzzles(tmp_path):
    ours = build_ours(CONFIGS["hidden-first8-aug4-seed1"], tmp_path / "out", tmp_path / "inputs")
    test_puzzles = json.loads((ours / "test_puzzles.json").read_text())
    assert len(test_puzzles) == 16  # 8 evaluation2 + 8 hidden tasks
    hidden = json.loads((tmp_path / "inputs" / "arc-agi_hidden_challenges.json").read_text())
    for task_id in hidden:
        assert all(example["output"] == [[0]] for example in test_puzzles[task_id]["test"])


# --- upstream's builder, side by side ------------------------------------------------------------------------


@pytest.mark.skipif(not UPSTREAM, reason="set TRM_UPSTREAM to an upstream TinyRecursiveModels checkout")
@pytest.mark.parametrize("name", _configs(upstream=True))
def test_byte_identical_to_upstreams_builder(name, tmp_path):
    config = CONFIGS[name]
    theirs = run_upstream(config, tmp_path / "upstream", tmp_path / "up-inputs", Path(UPSTREAM))
    ours = build_ours(config, tmp_path / "ours", tmp_path / "our-inputs")
    upstream_files = sorted(p.relative_to(theirs).as_posix() for p in theirs.rglob("*") if p.is_file())
    our_files = sorted(p.relative_to(ours).as_posix() for p in ours.rglob("*") if p.is_file())
    assert our_files == sorted([*upstream_files, "manifest.json"])
    for rel in upstream_files:
        assert (theirs / rel).read_bytes() == (ours / rel).read_bytes(), rel
    assert file_hashes(theirs) == golden()[name]  # the committed golden hashes are upstream's output
