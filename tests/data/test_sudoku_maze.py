"""Sudoku-Extreme and Maze-Hard builders: semantics, determinism, bad input, sources, and upstream parity."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from tests.data import upstream_grid_builds
from tests.data.grid_fixtures import maze_rows, maze_source, sudoku_rows, sudoku_source, write_csv
from trm.data.encoding import dihedral
from trm.data.formats import SplitData
from trm.data.grid_recipes import render_sudoku
from trm.data.loader import IGNORE_LABEL, PuzzleLoader
from trm.data.manifest import MANIFEST, read_verified_manifest
from trm.data.maze import build_maze_dataset
from trm.data.sudoku import build_sudoku_dataset, draw_shuffles
from trm.data.upstream_import import import_upstream
from trm.errors import TRMError

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = os.environ.get("TRM_UPSTREAM")


def load(d: Path, split: str, name: str) -> np.ndarray:
    return np.load(d / split / f"all__{name}.npy")


def read_csv(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))[1:]


def sudoku_tokens(question: str) -> np.ndarray:
    return np.array([0 if ch == "." else int(ch) for ch in question]) + 1


def is_solved(grid: np.ndarray) -> bool:
    g = grid.reshape(9, 9)
    boxes = g.reshape(3, 3, 3, 3).transpose(0, 2, 1, 3).reshape(9, 9)
    return all(sorted(u) == list(range(1, 10)) for units in (g, g.T, boxes) for u in units)


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("csv")
    return {"sudoku": sudoku_source(root / "sudoku"), "maze": maze_source(root / "maze")}


def test_sudoku_layout_groups_and_augmentations(sources, tmp_path):
    out = tmp_path / "sudoku"
    manifest = build_sudoku_dataset(out, source_dir=sources["sudoku"], num_aug=4, seed=3, form="materialized")
    meta = json.loads((out / "train/dataset.json").read_text())
    assert (meta["vocab_size"], meta["seq_len"], meta["ignore_label_id"], meta["pad_id"]) == (11, 81, 0, 0)
    assert meta["num_puzzle_identifiers"] == 1 and meta["sets"] == ["all"] and meta["total_groups"] == 12
    assert json.loads((out / "identifiers.json").read_text()) == ["<blank>"]
    inputs, labels = load(out, "train", "inputs"), load(out, "train", "labels")
    assert inputs.shape == labels.shape == (12 * 5, 81) and inputs.dtype == np.uint8
    assert np.array_equal(load(out, "train", "group_indices"), np.arange(0, 61, 5))
    assert np.array_equal(load(out, "train", "puzzle_indices"), np.arange(61))
    assert not load(out, "train", "puzzle_identifiers").any()
    rows = read_csv(sources["sudoku"] / "train.csv")
    for g, (_, question, answer, _) in enumerate(rows):
        q, a = inputs[5 * g : 5 * g + 5], labels[5 * g : 5 * g + 5]
        assert np.array_equal(q[0], sudoku_tokens(question)) and np.array_equal(a[0], sudoku_tokens(answer))
        assert len({bytes(x) for x in a}) == 5  # four distinct shuffles
        for qi, ai in zip(q, a, strict=True):
            assert is_solved(ai - 1)
            clues = qi != 1
            assert np.array_equal(qi[clues], ai[clues]) and clues.sum() == (q[0] != 1).sum()
    test_rows = read_csv(sources["sudoku"] / "test.csv")
    assert np.array_equal(load(out, "test", "inputs"), np.stack([sudoku_tokens(r[1]) for r in test_rows]))
    assert manifest["counts"]["train"] == {"groups": 12, "puzzles": 60, "examples": 60}
    assert read_verified_manifest(out, full=True)["fingerprint"] == manifest["fingerprint"]


def test_sudoku_shuffles_are_band_stack_preserving_relabellings():
    rng = np.random.RandomState(0)
    shuffles = draw_shuffles(rng, 200)
    maps, rows, cols = shuffles["digit_maps"], shuffles["rows"], shuffles["cols"]
    assert (maps[:, 0] == 0).all() and (np.sort(maps[:, 1:], axis=1) == np.arange(1, 10)).all()
    for perm in (*rows, *cols):
        assert sorted(perm) == list(range(9))
        assert all(len({p // 3 for p in perm[3 * k : 3 * k + 3]}) == 1 for k in range(3))  # bands stay bands
    assert 50 < shuffles["transpose"].sum() < 150
    grids = np.stack([np.random.RandomState(i).randint(1, 11, 81) for i in range(200)]).astype(np.uint8)
    tokens = np.zeros((200, 11), dtype=np.uint8)
    tokens[:, 1] = 1
    tokens[:, 2:] = maps[:, 1:] + 1  # digit d is token d + 1; PAD and blank stay
    moved, _ = render_sudoku(grids, grids, np.arange(200), rows, cols, shuffles["transpose"], tokens)
    for i in range(200):  # reference: transpose, then take rows and columns, then relabel digits
        g = grids[i].reshape(9, 9)
        g = g.T if shuffles["transpose"][i] else g
        assert np.array_equal(moved[i].reshape(9, 9), tokens[i][g[rows[i]][:, cols[i]]])


def test_sudoku_filters_and_subsample(sources, tmp_path):
    rows = read_csv(sources["sudoku"] / "train.csv")
    out = tmp_path / "hard"
    build_sudoku_dataset(out, source_dir=sources["sudoku"], min_difficulty=30, form="materialized")
    hard = [r for r in rows if int(r[3]) >= 30]
    assert 0 < len(hard) < len(rows)
    assert np.array_equal(load(out, "train", "inputs"), np.stack([sudoku_tokens(r[1]) for r in hard]))
    sub = tmp_path / "sub"
    build_sudoku_dataset(sub, source_dir=sources["sudoku"], subsample_size=5, seed=7, form="materialized")
    picked = {bytes(x) for x in load(sub, "train", "inputs")}
    assert len(picked) == 5 and picked <= {bytes(sudoku_tokens(r[1]).astype(np.uint8)) for r in rows}
    other = tmp_path / "sub2"
    build_sudoku_dataset(other, source_dir=sources["sudoku"], subsample_size=5, seed=8, form="materialized")
    assert picked != {bytes(x) for x in load(other, "train", "inputs")}


def test_builds_are_deterministic_per_seed(sources, tmp_path):
    def files(d: Path) -> dict[str, bytes]:
        return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*.npy"))}

    a, b, c = (tmp_path / n for n in "abc")
    for d, seed in ((a, 5), (b, 5), (c, 6)):
        build_sudoku_dataset(d, source_dir=sources["sudoku"], num_aug=3, seed=seed, form="materialized")
    assert files(a) == files(b) and files(a) != files(c)
    assert (
        json.loads((a / MANIFEST).read_text())["fingerprint"]
        == json.loads((b / MANIFEST).read_text())["fingerprint"]
    )


def test_maze_dihedral_augmentation_and_tokens(sources, tmp_path):
    out = tmp_path / "maze"
    build_maze_dataset(out, source_dir=sources["maze"], aug=True, form="materialized")
    meta = json.loads((out / "train/dataset.json").read_text())
    assert (meta["vocab_size"], meta["seq_len"], meta["total_groups"]) == (6, 900, 6)
    inputs, labels = load(out, "train", "inputs"), load(out, "train", "labels")
    assert inputs.shape == (48, 900) and inputs.dtype == np.uint8
    assert np.array_equal(load(out, "train", "group_indices"), np.arange(0, 49, 8))
    table = {"#": 1, " ": 2, "S": 3, "G": 4, "o": 5}
    for g, (_, question, answer, _) in enumerate(read_csv(sources["maze"] / "train.csv")):
        q = np.array([table[ch] for ch in question]).reshape(30, 30)
        a = np.array([table[ch] for ch in answer]).reshape(30, 30)
        for t in range(8):
            assert np.array_equal(inputs[8 * g + t].reshape(30, 30), dihedral(q, t))
            assert np.array_equal(labels[8 * g + t].reshape(30, 30), dihedral(a, t))
    assert load(out, "test", "inputs").shape == (3, 900)  # the test split is never augmented
    plain = tmp_path / "plain"
    build_maze_dataset(plain, source_dir=sources["maze"], form="materialized")
    assert np.array_equal(load(plain, "train", "inputs"), inputs[::8])


@pytest.mark.parametrize("kind", ["sudoku", "maze"])
def test_compact_and_materialized_forms_serve_the_same_rows(sources, tmp_path, kind):
    build, options = (
        (build_sudoku_dataset, {"num_aug": 6, "subsample_size": 9})
        if kind == "sudoku"
        else (build_maze_dataset, {"aug": True})
    )
    manifests = {
        form: build(tmp_path / form, source_dir=sources[kind], seed=11, form=form, **options)
        for form in ("compact", "materialized")
    }
    assert (
        manifests["compact"]["form"] == "grid-compact" and manifests["materialized"]["form"] == "materialized"
    )
    assert manifests["compact"]["counts"] == manifests["materialized"]["counts"]
    for split in ("train", "test"):
        compact = SplitData(tmp_path / "compact", split, "grid-compact")
        materialized = SplitData(tmp_path / "materialized", split, "materialized")
        ids = np.random.default_rng(0).permutation(materialized.num_examples)
        assert compact.num_examples == materialized.num_examples
        for a, b in zip(compact.examples(ids), materialized.examples(ids), strict=True):
            assert a.dtype == b.dtype == np.uint8 and np.array_equal(a, b)
        assert (tmp_path / "compact" / split / "dataset.json").read_bytes() == (
            tmp_path / "materialized" / split / "dataset.json"
        ).read_bytes()
    assert len(list(PuzzleLoader([tmp_path / "compact"], "train", global_batch_size=4).iter_train())) > 0


def test_loader_serves_the_built_sets(sources, tmp_path):
    out = tmp_path / "maze"
    build_maze_dataset(out, source_dir=sources["maze"], aug=True)
    loader = PuzzleLoader([out], "test", global_batch_size=2)
    assert loader.metadata.seq_len == 900 and loader.metadata.vocab_size == 6
    served = [b for _, b, _ in loader.iter_test()]
    inputs = np.concatenate([b["inputs"].numpy() for b in served])
    labels = np.concatenate([b["labels"].numpy() for b in served])
    real = (labels != IGNORE_LABEL).any(axis=1)  # the last batch is padded
    assert real.sum() == 3 and (labels[real] != IGNORE_LABEL).all()  # every maze cell is scored
    table = {"#": 1, " ": 2, "S": 3, "G": 4, "o": 5}  # the compact form (default), rendered by the loader
    expected = [[table[ch] for ch in row[1]] for row in read_csv(sources["maze"] / "test.csv")]
    assert np.array_equal(inputs[real], np.array(expected))


@pytest.mark.parametrize(
    ("kind", "mutate", "message"),
    [
        ("sudoku", lambda r: r.__setitem__(1, r[1][:80]), "the question has 80 characters, expected 81"),
        (
            "sudoku",
            lambda r: r.__setitem__(1, "x" + r[1][1:]),
            "character 'x' is not allowed in the question",
        ),
        ("sudoku", lambda r: r.__setitem__(2, "0" + r[2][1:]), "character '0' is not allowed in the answer"),
        ("sudoku", lambda r: r.append("extra"), "5 columns, expected 4"),
        ("maze", lambda r: r.__setitem__(1, r[1][:870]), "has 870 characters, expected 900"),
        ("maze", lambda r: r.__setitem__(2, r[2].replace("#", "X", 1)), "character 'X' in the answer"),
    ],
)
def test_bad_rows_name_file_and_row_and_write_nothing(tmp_path, kind, mutate, message):
    rows = sudoku_rows(4, 9) if kind == "sudoku" else maze_rows(3, 9)
    mutate(rows[2])
    src = tmp_path / "src"
    write_csv(src / "train.csv", rows)
    write_csv(src / "test.csv", sudoku_rows(2, 8) if kind == "sudoku" else maze_rows(1, 8))
    build = build_sudoku_dataset if kind == "sudoku" else build_maze_dataset
    with pytest.raises(TRMError, match=f"train.csv row 4: .*{message}"):
        build(tmp_path / "out", source_dir=src)
    assert not (tmp_path / "out").exists() and [p.name for p in tmp_path.iterdir()] == ["src"]


def test_answers_that_contradict_the_puzzle_are_refused(tmp_path):
    rows = sudoku_rows(3, 1)
    q = rows[1][1]
    clue = next(i for i, ch in enumerate(q) if ch != ".")
    wrong = str(int(q[clue]) % 9 + 1)
    rows[1][1] = q[:clue] + wrong + q[clue + 1 :]
    write_csv(tmp_path / "s/train.csv", rows)
    write_csv(tmp_path / "s/test.csv", sudoku_rows(1, 2))
    with pytest.raises(
        TRMError, match=rf"train.csv row 3: the answer contradicts the question at row {clue // 9 + 1}"
    ):
        build_sudoku_dataset(tmp_path / "o", source_dir=tmp_path / "s")
    rows = sudoku_rows(3, 1)
    rows[0][2] = rows[0][2][1] + rows[0][2][0] + rows[0][2][2:]  # swap two cells: rows still hold 1..9
    rows[0][1] = "." * 81
    write_csv(tmp_path / "s/train.csv", rows)
    with pytest.raises(TRMError, match=r"train.csv row 2: the answer is not a solved sudoku"):
        build_sudoku_dataset(tmp_path / "o", source_dir=tmp_path / "s")
    mazes = maze_rows(2, 1)
    mazes[1][2] = mazes[1][2].replace("S", " ", 1)
    write_csv(tmp_path / "m/train.csv", mazes)
    write_csv(tmp_path / "m/test.csv", maze_rows(1, 2))
    with pytest.raises(TRMError, match=r"train.csv row 3: the answer contradicts the maze .*'S' became ' '"):
        build_maze_dataset(tmp_path / "o", source_dir=tmp_path / "m")
    assert not (tmp_path / "o").exists()


def test_sources_local_dir_missing_file_and_offline_hub(sources, tmp_path, monkeypatch):
    # a directory given as --source-repo is read like --source-dir
    build_sudoku_dataset(tmp_path / "a", source_repo=str(sources["sudoku"]), form="materialized")
    build_sudoku_dataset(tmp_path / "b", source_dir=sources["sudoku"], form="materialized")
    assert (tmp_path / "a/train/all__inputs.npy").read_bytes() == (
        tmp_path / "b/train/all__inputs.npy"
    ).read_bytes()
    (tmp_path / "half").mkdir()
    write_csv(tmp_path / "half/train.csv", sudoku_rows(2, 0))
    with pytest.raises(TRMError, match=r"half/test.csv: not found; .*train.csv and test.csv"):
        build_sudoku_dataset(tmp_path / "c", source_dir=tmp_path / "half")

    with pytest.raises(
        TRMError, match=r"--source-repo ./missing/csvs: no such directory, and not a hub dataset"
    ):
        build_sudoku_dataset(tmp_path / "c", source_repo="./missing/csvs")

    hub = types.ModuleType("huggingface_hub")  # stands in for the optional dependency: no network in tests
    monkeypatch.setitem(sys.modules, "huggingface_hub", hub)
    calls = []

    def offline(repo, filename, **kwargs):
        calls.append((repo, filename, kwargs))
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files")

    hub.hf_hub_download = offline
    with pytest.raises(TRMError) as err:
        build_maze_dataset(tmp_path / "d")
    text = str(err.value)
    assert (
        "sapientinc/maze-30x30-hard-1k" in text and "--source-dir DIR" in text and "couldn't connect" in text
    )
    assert calls == [
        ("sapientinc/maze-30x30-hard-1k", "train.csv", {"repo_type": "dataset", "revision": None})
    ]

    def fetched(repo, filename, repo_type, revision):
        return str(sources["maze"] / filename)

    hub.hf_hub_download = fetched
    build_maze_dataset(tmp_path / "hub", form="materialized")
    assert load(tmp_path / "hub", "test", "inputs").shape == (3, 900)
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(
        TRMError, match=r"needs huggingface_hub: the trm images include it; .*pip install -e '\.\[hub\]'"
    ):
        build_maze_dataset(tmp_path / "e")


def test_rebuild_is_a_no_op_and_a_different_build_needs_overwrite(sources, tmp_path):
    out = tmp_path / "s"
    first = build_sudoku_dataset(out, source_dir=sources["sudoku"], num_aug=1)
    stamp = (out / MANIFEST).stat().st_mtime_ns
    assert build_sudoku_dataset(out, source_dir=sources["sudoku"], num_aug=1) == first
    assert (out / MANIFEST).stat().st_mtime_ns == stamp
    with pytest.raises(TRMError, match="pass --overwrite"):
        build_sudoku_dataset(out, source_dir=sources["sudoku"], num_aug=2)
    second = build_sudoku_dataset(out, source_dir=sources["sudoku"], num_aug=2, overwrite=True)
    assert second["counts"]["train"]["examples"] == 36


def test_cli_accepts_upstreams_flags_and_verifies(sources, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = [sys.executable, "-m", "trm", "data"]
    out = tmp_path / "sudoku-extreme-1k-aug-1000"
    result = subprocess.run(
        [
            *(*run, "build-sudoku", "--output-dir", str(out), "--source-repo", str(sources["sudoku"])),
            *("--subsample-size", "10", "--num-aug", "2", "--min-difficulty", "0", "--seed", "1"),
        ],
        env=env, capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "train: 30 examples" in result.stdout
    maze = tmp_path / "maze"
    result = subprocess.run(
        [*run, "build-maze", "--output-dir", str(maze), "--source-dir", str(sources["maze"]), "--aug"],
        env=env, capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "train: 48 examples" in result.stdout
    (maze / "train/all__originals_labels.npy").write_bytes(b"\x93NUMPY broken")  # compact by default
    result = subprocess.run([*run, "verify", str(maze)], env=env, capture_output=True, text=True, cwd=ROOT)
    assert result.returncode != 0 and "all__originals_labels.npy" in result.stderr


def test_import_upstream_accepts_a_maze_dir_and_explains_int64_sudoku(sources, tmp_path):
    maze = tmp_path / "maze"
    build_maze_dataset(maze, source_dir=sources["maze"], aug=True, form="materialized")
    (maze / MANIFEST).unlink()  # what upstream's builder leaves: the same files, no manifest
    import_upstream(maze)
    assert len(list(PuzzleLoader([maze], "test", global_batch_size=3).iter_test())) == 1
    sudoku = tmp_path / "sudoku"
    build_sudoku_dataset(sudoku, source_dir=sources["sudoku"], num_aug=2, form="materialized")
    (sudoku / MANIFEST).unlink()
    for name in ("inputs", "labels"):  # upstream's augmented train arrays are int64
        path = sudoku / "train" / f"all__{name}.npy"
        np.save(path, np.load(path).astype(np.int64))
    with pytest.raises(
        TRMError, match=r"int64/int64, the loader reads uint8 .*python -m trm data build-sudoku"
    ):
        import_upstream(sudoku)


@pytest.fixture(scope="module")
def golden_sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return upstream_grid_builds.sources(tmp_path_factory.mktemp("golden-csv"))


@pytest.mark.parametrize("name", sorted(upstream_grid_builds.CONFIGS))
def test_same_files_as_upstream_golden(golden_sources, tmp_path, name):
    # upstream's output, digested by tests/data/upstream_grid_builds.py (same seed, same generated CSVs)
    kind, options = upstream_grid_builds.CONFIGS[name]
    build = build_sudoku_dataset if kind == "sudoku" else build_maze_dataset
    build(
        tmp_path / "ours",
        source_dir=golden_sources[kind],
        seed=upstream_grid_builds.SEED,
        **options,
        form="materialized",
    )
    golden = json.loads(upstream_grid_builds.GOLDEN.read_text())[name]
    ours = upstream_grid_builds.digests(tmp_path / "ours")
    assert {k: v["digest"] for k, v in ours.items()} == {k: v["digest"] for k, v in golden.items()}
    widened = {k for k, v in golden.items() if "upstream_dtype" in v}
    assert widened == (
        {"train/all__inputs.npy", "train/all__labels.npy"} if options.get("num_aug") else set()
    )


@pytest.mark.skipif(not UPSTREAM, reason="set TRM_UPSTREAM to a TinyRecursiveModels checkout")
@pytest.mark.parametrize("name", sorted(upstream_grid_builds.CONFIGS))
def test_same_files_as_upstream_live(golden_sources, tmp_path, name):
    missing = [name for name in ("argdantic", "huggingface_hub") if importlib.util.find_spec(name) is None]
    if missing:  # TRM_UPSTREAM asks for this test: a missing import is a failure, never a skip
        pytest.fail(f"upstream's builders need {', '.join(missing)}: pip install -e '.[upstream]'")
    kind, options = upstream_grid_builds.CONFIGS[name]
    upstream_grid_builds.run_upstream(UPSTREAM, kind, golden_sources[kind], tmp_path / "upstream", options)
    theirs = upstream_grid_builds.digests(tmp_path / "upstream")
    assert theirs == json.loads(upstream_grid_builds.GOLDEN.read_text())[name]  # the golden is current
    build = build_sudoku_dataset if kind == "sudoku" else build_maze_dataset
    build(
        tmp_path / "ours",
        source_dir=golden_sources[kind],
        seed=upstream_grid_builds.SEED,
        **options,
        form="materialized",
    )
    assert upstream_grid_builds.digests(tmp_path / "ours") == {
        k: {"digest": v["digest"]} for k, v in theirs.items()
    }


def test_maze_records_the_form_so_another_form_is_not_mistaken_for_a_rebuild(sources, tmp_path):
    out = tmp_path / "maze"
    compact = build_maze_dataset(out, source_dir=sources["maze"])
    assert compact["args"]["form"] == "compact"
    assert build_maze_dataset(out, source_dir=sources["maze"]) == compact  # same flags: skipped
    with pytest.raises(TRMError, match="already exists"):
        build_maze_dataset(out, source_dir=sources["maze"], form="materialized")
    materialized = build_maze_dataset(out, source_dir=sources["maze"], form="materialized", overwrite=True)
    assert materialized["args"]["form"] == "materialized" and (out / "train/all__inputs.npy").is_file()
