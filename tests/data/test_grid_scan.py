"""The fast paths of the Sudoku/Maze builders against the slow, obvious forms: the CSV scan against the csv
module, and the bulk augmentation draws against upstream's numpy calls one by one."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from trm.data.csv_source import scan
from trm.data.sudoku_draws import draw_shuffles
from trm.errors import TRMError

from .grid_fixtures import sudoku_rows, write_csv


def upstream_shuffles(rng: np.random.RandomState, count: int) -> dict[str, np.ndarray]:
    """Upstream's `shuffle_sudoku` draws, call by call (dataset/build_sudoku_dataset.py)."""
    maps, coins, rows, cols = [], [], [], []
    for _ in range(count):
        maps.append(np.pad(rng.permutation(np.arange(1, 10)), (1, 0)))
        coins.append(rng.rand() < 0.5)
        bands = rng.permutation(3)
        rows.append(np.concatenate([b * 3 + rng.permutation(3) for b in bands]))
        stacks = rng.permutation(3)
        cols.append(np.concatenate([s * 3 + rng.permutation(3) for s in stacks]))
    return {
        "digit_maps": np.array(maps),
        "transpose": np.array(coins),
        "rows": np.array(rows),
        "cols": np.array(cols),
    }


@pytest.mark.parametrize("count", [0, 1, 63, 64, 65, 200, 3000])
def test_bulk_draws_equal_upstreams_calls_and_leave_the_generator_where_upstream_does(count):
    ours, theirs = np.random.RandomState(11), np.random.RandomState(11)
    ours.choice(5000, size=40, replace=False), theirs.choice(5000, size=40, replace=False)
    drawn, expected = draw_shuffles(ours, count), upstream_shuffles(theirs, count)
    for key, value in expected.items():
        assert np.array_equal(drawn[key].reshape(value.shape), value), key
    assert ours.randint(0, 1 << 30, size=5).tolist() == theirs.randint(0, 1 << 30, size=5).tolist()


def test_a_longer_draw_starts_with_the_shorter_one():  # what build-sweep relies on
    short, long = draw_shuffles(np.random.RandomState(2), 100), draw_shuffles(np.random.RandomState(2), 1000)
    assert all(np.array_equal(long[k][:100], short[k]) for k in short)


def rows_via_csv_module(path):
    with open(path, newline="") as f:
        return [(r[1], r[2], r[3]) for r in list(csv.reader(f))[1:]]


@pytest.mark.parametrize(
    "variant",
    ["plain", "crlf", "no-final-newline", "quoted-source", "long-rating"],
)
def test_scan_reads_what_the_csv_module_reads(tmp_path, variant):
    rows = sudoku_rows(7, 5)
    if variant == "long-rating":
        rows[3][3] = " +0042"  # beyond the vectorized digit parse: Python's int()
        rows[4][3] = "1234567890123456"
    if variant == "quoted-source":
        rows[2][0] = "a, quoted source"
    path = write_csv(tmp_path / "train.csv", rows)
    data = path.read_bytes()
    if variant == "crlf":
        data = data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    elif variant == "no-final-newline":
        data = data.rstrip(b"\r\n")
    elif variant != "quoted-source":
        data = data.replace(b"\r\n", b"\n")
    path.write_bytes(data)
    table = scan(path, 81)
    got = table.take()
    expected = rows_via_csv_module(path)
    assert len(table) == len(expected) == 7
    assert [bytes(q).decode() for q in got.questions] == [q for q, _, _ in expected]
    assert [bytes(a).decode() for a in got.answers] == [a for _, a, _ in expected]
    assert table.ratings().tolist() == [int(r) for _, _, r in expected]
    picked = table.take(np.array([5, 1]))
    assert (
        picked.where(0).endswith("train.csv row 7") and bytes(picked.questions[1]).decode() == expected[1][0]
    )


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: r.__setitem__(0, "unquoted\tsource"), "row 4: 6 columns, expected 4"),
        (lambda r: r.__setitem__(2, r[2][:40] + "|" + r[2][41:]), "row 4: 5 columns, expected 4"),
        (lambda r: r.__setitem__(1, r[1] + "9"), "row 4: the question has 82 characters, expected 81"),
        (lambda r: r.__setitem__(2, "é" + r[2][1:]), "row 4: the answer holds non-ASCII characters"),
    ],
)
def test_scan_names_the_first_row_of_the_wrong_shape(tmp_path, mutate, message):
    """Unquoted commas (written raw: a tab becomes `,x,`, a `|` a comma) and wrong widths, found by the scan."""
    rows = sudoku_rows(5, 6)
    mutate(rows[2])
    path = write_csv(tmp_path / "train.csv", rows)
    path.write_bytes(path.read_bytes().replace(b"\r\n", b"\n").replace(b"\t", b",x,").replace(b"|", b","))
    with pytest.raises(TRMError, match=message):
        scan(path, 81)


def test_ratings_that_are_not_integers_name_their_row(tmp_path):
    rows = sudoku_rows(4, 6)
    rows[3][3] = "hard"
    table = scan(write_csv(tmp_path / "train.csv", rows), 81)
    with pytest.raises(TRMError, match=r"train.csv row 5: rating 'hard' is not an integer"):
        table.ratings()
