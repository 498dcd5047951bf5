from __future__ import annotations

import numpy as np
import pytest

from trm.data.encoding import (
    DIHEDRAL_INVERSE,
    EOS,
    PAD,
    crop,
    dihedral,
    encode_grid,
    identifier,
    inverse_dihedral,
    invert_augmentation,
    parse_identifier,
)
from trm.errors import TRMError


def test_dihedral_ids_match_the_numpy_transforms():
    g = np.arange(6).reshape(2, 3)
    expected = [
        g,
        np.rot90(g),
        np.rot90(g, 2),
        np.rot90(g, 3),
        g[:, ::-1],
        g[::-1],
        g.T,
        np.rot90(g)[:, ::-1],
    ]
    for t, e in enumerate(expected):
        assert np.array_equal(dihedral(g, t), e), t
        assert np.array_equal(inverse_dihedral(dihedral(g, t), t), g), t
    assert DIHEDRAL_INVERSE == [0, 3, 2, 1, 4, 5, 6, 7]


def test_encode_places_grid_and_eos_at_offset():
    grid = np.array([[1, 2, 3], [4, 5, 6]])
    tokens = encode_grid(grid, (1, 2)).reshape(30, 30)
    assert tokens.dtype == np.uint8
    assert np.array_equal(tokens[1:3, 2:5], grid + 2)
    assert (tokens[3, 2:5] == EOS).all() and (tokens[1:3, 5] == EOS).all()
    assert tokens[3, 5] == PAD  # the corner stays PAD
    assert (tokens != PAD).sum() == 6 + 3 + 2


def test_encode_full_size_grid_has_no_eos_and_rejects_overflow():
    grid = np.full((30, 30), 9)
    assert (encode_grid(grid) == 11).all()
    tokens = encode_grid(np.zeros((30, 29), int)).reshape(30, 30)
    assert (tokens[:, 29] == EOS).all()
    with pytest.raises(ValueError):
        encode_grid(np.zeros((5, 5), int), (26, 0))


def test_round_trip_all_dihedrals_and_random_colour_maps():
    rng = np.random.default_rng(0)
    for _ in range(40):
        h, w = rng.integers(1, 31, size=2)
        grid = rng.integers(0, 10, size=(h, w)).astype(np.uint8)
        for t in range(8):
            cmap = np.concatenate([[0], rng.permutation(np.arange(1, 10))]).astype(np.uint8)
            name = identifier("abc", t, cmap)
            task, tid, parsed = parse_identifier(name)
            assert (task, tid) == ("abc", t) and np.array_equal(parsed, cmap)
            augmented = dihedral(cmap[grid], t)
            restored = invert_augmentation(crop(encode_grid(augmented)), tid, parsed)
            assert np.array_equal(restored, grid)


def test_crop_matches_the_evaluator_rule():
    assert crop(np.zeros(900, np.uint8)).shape == (0, 0)
    canvas = np.zeros((30, 30), np.uint8)
    canvas[:2, :5] = 3
    canvas[2:6, :2] = 4  # taller but narrower block: area 6*2=12 beats 2*5=10
    assert np.array_equal(crop(canvas.ravel()), np.vstack([np.full((2, 2), 1), np.full((4, 2), 2)]))
    canvas[2:6, :2] = 0
    assert np.array_equal(crop(canvas.ravel()), np.full((2, 5), 1))


def test_parse_identifier_plain_and_malformed():
    assert parse_identifier("007bbfb7") == ("007bbfb7", 0, None)
    assert np.array_equal(invert_augmentation(np.array([[1, 2]]), 0, None), [[1, 2]])
    for bad in ("a|||t9|||0123456789", "a|||t1|||0123", "a|||x1|||0123456789", "a|||t1|||0123456788"):
        with pytest.raises(TRMError, match="identifier"):
            parse_identifier(bad)
