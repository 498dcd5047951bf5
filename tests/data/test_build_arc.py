from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import SMOKE_BUILD, tiny_task, write_subset
from trm.data.arc_source import DEFAULT_PREFIX
from trm.data.build_arc import build_arc_dataset
from trm.data.encoding import crop, invert_augmentation, parse_identifier
from trm.data.loader import PuzzleLoader
from trm.data.manifest import read_verified_manifest
from trm.errors import TRMError


def load(d, split, name):
    return np.load(d / split / f"all__{name}.npy")


def test_layout_metadata_and_identifiers(smoke_dirs):
    d = smoke_dirs["materialized"]
    assert sorted(p.relative_to(d).as_posix() for p in d.rglob("dataset.json")) == [
        "test/dataset.json",
        "train/dataset.json",
    ]
    ids = json.loads((d / "identifiers.json").read_text())
    train_meta = json.loads((d / "train/dataset.json").read_text())
    test_meta = json.loads((d / "test/dataset.json").read_text())
    assert (
        ids[0] == "<blank>"
        and len(ids) == train_meta["num_puzzle_identifiers"] == test_meta["num_puzzle_identifiers"]
    )
    assert train_meta["seq_len"] == 900 and train_meta["vocab_size"] == 12 and train_meta["sets"] == ["all"]
    assert (
        train_meta["ignore_label_id"] == 0
        and train_meta["pad_id"] == 0
        and train_meta["blank_identifier_id"] == 0
    )
    assert train_meta["total_groups"] == 24 and test_meta["total_groups"] == 12  # 12 tasks per subset
    train_ids = load(d, "train", "puzzle_identifiers")
    assert np.array_equal(train_ids, np.arange(1, len(ids)))  # numbered in order of appearance
    assert set(load(d, "test", "puzzle_identifiers")) <= set(train_ids)
    group = load(d, "train", "group_indices")
    first_names = [ids[train_ids[g]] for g in group[:-1]]
    assert all("|||" not in n for n in first_names)  # each group starts with its original task
    assert all(len(parse_identifier(ids[i])) == 3 for i in train_ids)
    pi = load(d, "train", "puzzle_indices")
    assert train_meta["mean_puzzle_examples"] == pytest.approx(pi[-1] / len(train_ids))
    test_puzzles = json.loads((d / "test_puzzles.json").read_text())
    evaluation2 = json.loads((DEFAULT_PREFIX.parent / "arc-agi_evaluation2_challenges.json").read_text())
    assert list(sorted(test_puzzles)) == sorted(list(evaluation2)[:12])  # --max-puzzles keeps the first N


def test_test_split_decodes_to_the_original_task(smoke_dirs):
    d = smoke_dirs["materialized"]
    ids = json.loads((d / "identifiers.json").read_text())
    test_puzzles = json.loads((d / "test_puzzles.json").read_text())
    inputs, labels = load(d, "test", "inputs"), load(d, "test", "labels")
    pi, pid = load(d, "test", "puzzle_indices"), load(d, "test", "puzzle_identifiers")
    assert (inputs[:, 0] >= 2).all()  # test examples are never translated
    for p in range(0, len(pid), 7):
        task, tid, cmap = parse_identifier(ids[pid[p]])
        for k, e in enumerate(range(pi[p], pi[p + 1])):
            pair = test_puzzles[task]["test"][k]
            assert invert_augmentation(crop(inputs[e]), tid, cmap).tolist() == pair["input"]
            assert invert_augmentation(crop(labels[e]), tid, cmap).tolist() == pair["output"]


def test_train_split_is_translated_except_one_anchor_per_puzzle(smoke_dirs):
    d = smoke_dirs["materialized"]
    inputs, pi = load(d, "train", "inputs"), load(d, "train", "puzzle_indices")
    at_origin = inputs[:, 0] >= 2
    per_puzzle = np.add.reduceat(at_origin.astype(int), pi[:-1])
    assert (per_puzzle >= 1).all()
    assert at_origin.mean() < 0.6


def test_same_bytes_for_any_worker_count(tmp_path):
    args = {**SMOKE_BUILD, "max_puzzles": 6}
    a = build_arc_dataset(tmp_path / "a", workers=1, **args)
    b = build_arc_dataset(tmp_path / "b", workers=2, **args)
    assert a["files"] == b["files"] and a["fingerprint"] == b["fingerprint"]
    for rel in a["files"]:
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes()
    c = build_arc_dataset(tmp_path / "c", workers=1, **{**args, "seed": 7})
    assert c["fingerprint"] != a["fingerprint"]


def test_rebuild_is_a_no_op_and_different_args_need_overwrite(tmp_path):
    args = {**SMOKE_BUILD, "max_puzzles": 3, "num_aug": 2}
    first = build_arc_dataset(tmp_path / "d", **args)
    assert build_arc_dataset(tmp_path / "d", **args) == first
    with pytest.raises(TRMError, match="--overwrite"):
        build_arc_dataset(tmp_path / "d", **{**args, "num_aug": 3})
    replaced = build_arc_dataset(tmp_path / "d", overwrite=True, **{**args, "num_aug": 3})
    assert (
        replaced["args"]["num_aug"] == 3
        and read_verified_manifest(tmp_path / "d")["fingerprint"] == replaced["fingerprint"]
    )


def test_a_damaged_dataset_is_rebuilt_by_the_command_its_error_names(tmp_path):
    """The loader's error says: rebuild with the same flags and --overwrite; that command must repair it."""
    args = {**SMOKE_BUILD, "max_puzzles": 3, "num_aug": 2}
    first = build_arc_dataset(tmp_path / "d", **args)
    damaged = tmp_path / "d" / "train" / "all__puzzle_indices.npy"
    damaged.write_bytes(damaged.read_bytes()[:-8])
    with pytest.raises(TRMError, match="--overwrite") as loader_error:
        PuzzleLoader([tmp_path / "d"], "train", global_batch_size=4)
    assert "truncated" in str(loader_error.value)
    with pytest.raises(
        TRMError, match=r"all__puzzle_indices\.npy: \d+ bytes.*pass --overwrite to rebuild it"
    ):
        build_arc_dataset(tmp_path / "d", **args)
    assert damaged.stat().st_size == first["files"]["train/all__puzzle_indices.npy"]["bytes"] - 8  # untouched
    rebuilt = build_arc_dataset(tmp_path / "d", overwrite=True, **args)
    assert rebuilt["fingerprint"] == first["fingerprint"]
    assert read_verified_manifest(tmp_path / "d")["fingerprint"] == first["fingerprint"]


def test_overwrite_replaces_only_a_dataset_it_built_holding_nothing_else(tmp_path):
    args = {**SMOKE_BUILD, "max_puzzles": 2, "num_aug": 1}
    build_arc_dataset(tmp_path / "d", **args)
    (tmp_path / "d" / "train" / "my_notes.txt").write_text("mine")
    with pytest.raises(TRMError, match=r"train/my_notes\.txt, which trm-stack did not write"):
        build_arc_dataset(tmp_path / "d", overwrite=True, **{**args, "num_aug": 2})
    assert (tmp_path / "d" / "train" / "my_notes.txt").read_text() == "mine"
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("mine")
    for overwrite in (False, True):  # never "pass --overwrite" for a folder that is not a dataset of ours
        with pytest.raises(TRMError, match="refusing to replace it: it holds files trm-stack did not write"):
            build_arc_dataset(tmp_path / "mine", overwrite=overwrite, **args)
    assert (tmp_path / "mine" / "thesis.tex").read_text() == "mine"


def test_missing_solutions_give_dummy_outputs(tmp_path):
    tasks = {f"t{i}": tiny_task(i)[0] for i in range(3)}
    prefix = write_subset(tmp_path / "in", "train", {"a": tiny_task(5)[0]}, {"a": tiny_task(5)[1]})
    write_subset(tmp_path / "in", "hidden", tasks)  # no solutions file
    build_arc_dataset(
        tmp_path / "d", input_file_prefix=prefix, subsets=["train", "hidden"], test_set_name="x",
        test_set_name2="hidden", num_aug=3, form="materialized",
    )  # fmt: skip
    test_puzzles = json.loads((tmp_path / "d/test_puzzles.json").read_text())
    assert sorted(test_puzzles) == ["t0", "t1", "t2"]
    assert all(p["test"][0]["output"] == [[0]] for p in test_puzzles.values())
    labels = load(tmp_path / "d", "test", "labels")
    assert all(crop(row).tolist() == [[0]] for row in labels)


BAD_INPUTS = {
    "malformed JSON": ("{not json", "malformed JSON"),
    "non-rectangular": (
        {"bad1": {"train": [{"input": [[1, 2], [3]], "output": [[1]]}], "test": []}},
        "not rectangular",
    ),
    "too large": (
        {"bad2": {"train": [{"input": [[1] * 31], "output": [[1]]}], "test": []}},
        "larger than 30x30",
    ),
    "colour 10": (
        {"bad3": {"train": [{"input": [[1, 10]], "output": [[1]]}], "test": []}},
        "colour 10 outside",
    ),
    "negative colour": (
        {"bad4": {"train": [{"input": [[1]], "output": [[-1]]}], "test": []}},
        "colour -1 outside",
    ),
    "not ints": ({"bad5": {"train": [{"input": [[1.5]], "output": [[1]]}], "test": []}}, "integers"),
    "no output": ({"bad6": {"train": [{"input": [[1]]}], "test": []}}, "'output'"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_names_file_and_task_and_leaves_nothing(tmp_path, case):
    content, message = BAD_INPUTS[case]
    good = {"ok": tiny_task(1)[0]}
    prefix = write_subset(tmp_path / "in", "evaluation2", good, {"ok": tiny_task(1)[1]})
    path = tmp_path / "in" / "arc-agi_training2_challenges.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    out = tmp_path / "out"
    with pytest.raises(TRMError, match=message) as err:
        build_arc_dataset(out, input_file_prefix=prefix, subsets=["training2", "evaluation2"], num_aug=2)
    assert "arc-agi_training2_challenges.json" in str(err.value)
    if not isinstance(content, str):
        assert repr(next(iter(content))) in str(err.value)  # the task id
    assert not out.exists() and list(tmp_path.iterdir()) == [tmp_path / "in"]


def test_duplicate_task_unreadable_file_and_bad_solutions(tmp_path):
    task, sol = tiny_task(2)
    prefix = write_subset(tmp_path / "in", "a", {"same": task}, {"same": sol})
    write_subset(tmp_path / "in", "b", {"same": task}, {"same": sol})
    with pytest.raises(TRMError, match=r"arc-agi_b_challenges.json task 'same'.*also in subset 'a'"):
        build_arc_dataset(tmp_path / "o", input_file_prefix=prefix, subsets=["a", "b"], test_set_name="b")
    write_subset(tmp_path / "in", "c", {"other": task}, {"other": []})
    with pytest.raises(TRMError, match=r"arc-agi_c_solutions.json task 'other'.*1 output"):
        build_arc_dataset(tmp_path / "o", input_file_prefix=prefix, subsets=["a", "c"], test_set_name="c")
    (tmp_path / "in" / "arc-agi_d_challenges.json").mkdir()  # exists but cannot be read as a file
    with pytest.raises(TRMError, match=r"arc-agi_d_challenges.json: cannot read"):
        build_arc_dataset(tmp_path / "o", input_file_prefix=prefix, subsets=["a", "d"], test_set_name="a")
    with pytest.raises(TRMError, match=r"arc-agi_zz_challenges.json: file not found"):
        build_arc_dataset(tmp_path / "o", input_file_prefix=prefix, subsets=["a", "zz"], test_set_name="a")
    with pytest.raises(TRMError, match="test split would be empty"):
        build_arc_dataset(
            tmp_path / "o", input_file_prefix=prefix, subsets=["a"], test_set_name="evaluation2"
        )
    assert not (tmp_path / "o").exists()


def test_checksum_mismatch_is_reported(tmp_path):
    task, sol = tiny_task(3)
    prefix = write_subset(tmp_path / "in", "s", {"t": task}, {"t": sol})
    (tmp_path / "in" / "SHA256SUMS").write_text(f"{'0' * 64}  arc-agi_s_challenges.json\n")
    with pytest.raises(TRMError, match=r"arc-agi_s_challenges.json: sha256 .* does not match"):
        build_arc_dataset(tmp_path / "o", input_file_prefix=prefix, subsets=["s"], test_set_name="s")


def test_cli_error_exit_code_and_message(tmp_path):
    out = tmp_path / "o"
    proc = subprocess.run(
        [sys.executable, "-m", "trm", "data", "build-arc", "--output-dir", str(out), "--subsets", "nope",
         "--test-set-name", "nope", "--num-aug", "1", "--quiet"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "arc-agi_nope_challenges.json: file not found" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


def test_cli_build_then_rebuild_is_a_no_op(tmp_path):
    out = tmp_path / "d"
    cmd = [sys.executable, "-m", "trm", "data", "build-arc", "--output-dir", str(out), "--subsets", "training2",
           "evaluation2", "--test-set-name", "evaluation2", "--num-aug", "2", "--max-puzzles", "3", "--quiet"]  # fmt: skip
    first = subprocess.run(cmd, capture_output=True, text=True, check=True)
    assert "train: " in first.stdout and "done in" in first.stdout
    second = subprocess.run(cmd, capture_output=True, text=True, check=True)
    assert "nothing to do" in second.stdout


def test_counts_match_upstream_builds(tmp_path):
    """ARC-1+concept at aug 10: the figures upstream's builder gives (upstream: dataset/build_arc_dataset.py)."""
    m = build_arc_dataset(
        tmp_path / "a1", subsets=["training", "evaluation", "concept"], test_set_name="evaluation", num_aug=10
    )
    assert m["counts"]["train"] == {"examples": 43862, "puzzles": 10558, "groups": 960}
    assert m["counts"]["test"]["puzzles"] == 4398 and m["counts"]["test"]["groups"] == 400
    assert m["counts"]["identifiers"]["total"] == 10559


@pytest.mark.slow
def test_full_arc2_concept_build_counts(tmp_path):
    """ARC-AGI-2 + ConceptARC at aug 1000 (compact): shape of the dataset docs/data.md builds, verified end to end."""
    m = build_arc_dataset(tmp_path / "full")
    assert m["counts"]["train"]["groups"] == 1280 and m["counts"]["test"]["groups"] == 120
    assert 1_150_000 < m["counts"]["train"]["puzzles"] < 1_281_280
    assert m["counts"]["identifiers"]["total"] == m["counts"]["train"]["puzzles"] + 1
    assert read_verified_manifest(tmp_path / "full", full=True)["fingerprint"] == m["fingerprint"]


def test_identifiers_json_escapes_odd_task_ids(tmp_path):
    odd = 'quote"back\\slash-ü'
    task, sol = tiny_task(4)
    prefix = write_subset(tmp_path / "in", "s", {odd: task}, {odd: sol})
    build_arc_dataset(tmp_path / "d", input_file_prefix=prefix, subsets=["s"], test_set_name="s", num_aug=3)
    ids = json.loads((tmp_path / "d" / "identifiers.json").read_text())
    assert ids[:2] == ["<blank>", odd] and len(ids) == 5
    assert all(parse_identifier(i)[0] == odd for i in ids[1:])
    assert json.loads((tmp_path / "d" / "test_puzzles.json").read_text())[odd]["test"][0]["output"] == sol[0]


def test_upstream_input_prefix_maps_to_the_shipped_data(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no kaggle/combined here, as in a trm-stack checkout
    m = build_arc_dataset(
        tmp_path / "d", input_file_prefix="kaggle/combined/arc-agi", **{**SMOKE_BUILD, "max_puzzles": 2}
    )
    assert m["inputs"]["arc-agi_training2_challenges.json"] == (
        "779eaba89790ebad9af02514a7efc0aefaf2cf8236f046a31bbf8b9ec48f20f5"
    )
    assert "shipped copy" in capsys.readouterr().err


def test_subsample_size_draws_random_training_tasks_and_keeps_the_test_subset(tmp_path):
    base = {**SMOKE_BUILD, "max_puzzles": 10, "num_aug": 1}
    full = build_arc_dataset(tmp_path / "full", **base)
    assert "subsample_size" not in full["args"]  # the default build's manifest is unchanged
    sub = build_arc_dataset(tmp_path / "sub", subsample_size=4, **base)
    assert sub["args"]["subsample_size"] == 4
    again = build_arc_dataset(tmp_path / "again", subsample_size=4, **base)
    assert again["fingerprint"] == sub["fingerprint"]  # seeded

    def task_ids(path, split):
        ids = json.loads((path / "identifiers.json").read_text())
        used = np.unique(load(path, split, "puzzle_identifiers"))
        return {parse_identifier(ids[i])[0] for i in used}

    train_full, train_sub = task_ids(tmp_path / "full", "train"), task_ids(tmp_path / "sub", "train")
    assert task_ids(tmp_path / "sub", "test") == task_ids(tmp_path / "full", "test")  # evaluation2 kept whole
    first = build_arc_dataset(tmp_path / "first", **{**base, "max_puzzles": 4})
    training_first = task_ids(tmp_path / "first", "train") - task_ids(tmp_path / "first", "test")
    training_sub = train_sub - task_ids(tmp_path / "sub", "test")
    assert len(training_sub) == 4 and training_sub < train_full and training_sub != training_first
    other = build_arc_dataset(tmp_path / "other", subsample_size=4, **{**base, "seed": 43})
    assert other["fingerprint"] != sub["fingerprint"] and first["fingerprint"] != sub["fingerprint"]
    with pytest.raises(TRMError, match="--subsample-size 0: must be at least 1"):
        build_arc_dataset(tmp_path / "bad", subsample_size=0, **base)
