from __future__ import annotations

import hashlib

import numpy as np

from trm.data.arc_source import DEFAULT_PREFIX, load_subset
from trm.data.augment import (
    _content_keys,
    _draw_tries,
    _pair_classes,
    plan_augmentations,
    plan_translations,
    task_rng,
    transformed_extent,
)
from trm.data.encoding import dihedral


def upstream_style_hash(pairs, tid, cmap) -> str:
    """Content hash as upstream's dataset/build_arc_dataset.py computes it: sorted per-pair sha256 over shape bytes + grid bytes."""

    def grid_hash(g):
        return hashlib.sha256(bytes(g.shape) + np.ascontiguousarray(g).tobytes()).hexdigest()

    hashes = sorted(
        f"{grid_hash(dihedral(cmap[a], tid))}|{grid_hash(dihedral(cmap[b], tid))}" for a, b in pairs
    )
    return hashlib.sha256("|".join(hashes).encode()).hexdigest()


def g(rows):
    return np.array(rows, dtype=np.uint8)


TASKS = {
    "one_colour_symmetric": [(g([[1, 1], [1, 1]]), g([[1]]))],
    "two_colours": [(g([[1, 0, 2]]), g([[2], [1]])), (g([[0, 1]]), g([[1, 1]]))],
    "pairs_swapped_by_a_flip": [(g([[1, 2, 0]]), g([[1]])), (g([[0, 2, 1]]), g([[1]]))],
    "duplicate_pairs": [(g([[3, 4, 5]]), g([[5, 4, 3]]))] * 2,
    "many_colours": [(g([[1, 2, 3], [4, 5, 6], [7, 8, 9]]), g([[9, 8], [7, 6]]))],
}


def test_content_keys_equal_exactly_when_upstream_hashes_equal():
    rng = np.random.default_rng(1)
    for name, pairs in TASKS.items():
        tids, cmaps = _draw_tries(rng, 400)
        keys = _content_keys(tids, cmaps, *_pair_classes(pairs))
        hashes = [
            upstream_style_hash(pairs, int(t), c.astype(np.uint8)) for t, c in zip(tids, cmaps, strict=True)
        ]
        first_by_key, first_by_hash = {}, {}
        same_key = [first_by_key.setdefault(k, i) for i, k in enumerate(keys.tolist())]
        same_hash = [first_by_hash.setdefault(h, i) for i, h in enumerate(hashes)]
        assert same_key == same_hash, name
        if name != "many_colours":
            assert len(first_by_hash) < len(hashes), name  # duplicates occur, so the check has teeth


def test_content_is_a_multiset_of_pairs():
    # flipping left-right swaps the two pairs: same content as the original, so it is a duplicate
    pairs = TASKS["pairs_swapped_by_a_flip"]
    identity = np.arange(10)[None].repeat(2, axis=0)
    keys = _content_keys(np.array([0, 4]), identity, *_pair_classes(pairs))
    assert keys[0] == keys[1]
    assert upstream_style_hash(pairs, 0, identity[0]) == upstream_style_hash(pairs, 4, identity[0])


def test_plan_keeps_original_first_and_only_distinct_contents():
    for name, pairs in TASKS.items():
        plan = plan_augmentations(pairs, 50, task_rng(0, "s", name, 0))
        assert plan.tids[0] == 0 and np.array_equal(plan.colour_maps[0], np.arange(10))
        assert (plan.colour_maps[:, 0] == 0).all()
        assert all(sorted(c[1:]) == list(range(1, 10)) for c in plan.colour_maps.tolist())
        hashes = [
            upstream_style_hash(pairs, int(t), c) for t, c in zip(plan.tids, plan.colour_maps, strict=True)
        ]
        assert len(set(hashes)) == len(hashes), name


def test_reachable_variant_counts():
    # One colour, fully symmetric 2x2 -> 1x1: only the 9 colour choices differ.
    assert len(plan_augmentations(TASKS["one_colour_symmetric"], 40, task_rng(0, "s", "a", 0)).tids) == 9
    # 9 colours in an asymmetric grid: the target is reached.
    assert len(plan_augmentations(TASKS["many_colours"], 40, task_rng(0, "s", "b", 0)).tids) == 41
    assert len(plan_augmentations(TASKS["many_colours"], 0, task_rng(0, "s", "b", 0)).tids) == 1


def test_plans_are_reproducible_and_depend_on_seed_and_task():
    pairs = TASKS["many_colours"]
    a = plan_augmentations(pairs, 30, task_rng(5, "s", "x", 0))
    b = plan_augmentations(pairs, 30, task_rng(5, "s", "x", 0))
    c = plan_augmentations(pairs, 30, task_rng(6, "s", "x", 0))
    d = plan_augmentations(pairs, 30, task_rng(5, "s", "y", 0))
    assert np.array_equal(a.colour_maps, b.colour_maps) and np.array_equal(a.tids, b.tids)
    assert not np.array_equal(a.colour_maps, c.colour_maps)
    assert not np.array_equal(a.colour_maps, d.colour_maps)


def test_translations_fit_and_keep_one_anchor():
    pairs = [
        (np.zeros((5, 12), np.uint8), np.zeros((7, 3), np.uint8)),
        (np.zeros((30, 2), np.uint8), np.zeros((1, 1), np.uint8)),
    ]
    tids = np.arange(8, dtype=np.uint8).repeat(50)
    offsets = plan_translations(pairs, tids, task_rng(0, "s", "t", 1)).astype(int)
    extent = transformed_extent(pairs)[tids]
    assert (offsets + extent <= 30).all()
    assert ((offsets == 0).all(axis=2).sum(axis=1) >= 1).all()  # the anchor
    assert offsets[:, 0].max() > 10  # translations do happen
    assert transformed_extent(pairs)[1, 0].tolist() == [12, 7]


def test_shipped_subset_counts():
    expected = {"training2": (1000, 3232, 1076), "evaluation2": (120, 358, 172), "concept": (160, 427, 480)}
    for subset, (tasks, train_pairs, test_inputs) in expected.items():
        loaded = load_subset(DEFAULT_PREFIX, subset)
        assert len(loaded) == tasks
        assert sum(len(t.train) for t in loaded) == train_pairs
        assert sum(len(t.test) for t in loaded) == test_inputs
