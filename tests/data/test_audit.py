"""`python -m trm data audit` on tiny datasets with planted overlaps: every plant found, nothing else."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import write_subset
from trm.commands import main
from trm.data.audit import AUGMENTED, EXACT, audit, canonical_key, exact_key, task_keys
from trm.data.build_arc import build_arc_dataset
from trm.data.encoding import dihedral

RNG = np.random.default_rng(1234)
CMAP = np.array([0, 3, 7, 1, 9, 2, 8, 4, 6, 5])  # a colour permutation fixing 0, as the augmentation draws


def grid() -> list[list[int]]:
    h, w = RNG.integers(3, 9, size=2)
    return RNG.integers(0, 10, size=(h, w)).tolist()


def pair() -> dict:
    return {"input": grid(), "output": grid()}


def augmented(p: dict, tid: int = 5) -> dict:
    """`p` under dihedral `tid` and the colour map CMAP (one of the dataset's own augmentations)."""
    return {k: CMAP[dihedral(np.array(v), tid)].tolist() for k, v in p.items()}


def task(n_train: int = 3) -> dict:
    return {"train": [pair() for _ in range(n_train)], "test": [pair()]}


def write(prefix_dir: Path, subset: str, tasks: dict[str, dict]) -> Path:
    challenges = {
        tid: {"train": t["train"], "test": [{"input": p["input"]} for p in t["test"]]}
        for tid, t in tasks.items()
    }
    solutions = {tid: [p["output"] for p in t["test"]] for tid, t in tasks.items()}
    return write_subset(prefix_dir, subset, challenges, solutions)


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Raw tasks with known overlaps, written as three subsets (training, evaluation = test, concept)."""
    root = tmp_path_factory.mktemp("audit")
    training = {f"a{i}": task() for i in range(6)}
    evaluation = {f"e{i}": task() for i in range(6)}
    # e0: its test pair is a0's first demonstration, exactly (the answer leaks).
    evaluation["e0"]["test"] = [dict(training["a0"]["train"][0])]
    # e1: its test pair is an augmentation (dihedral 5, colour map) of a1's second demonstration.
    evaluation["e1"]["test"] = [augmented(training["a1"]["train"][1])]
    # e2: only its test input occurs in training: rotated, as the output of a2's test pair (in the train split).
    evaluation["e2"]["test"][0]["input"] = dihedral(np.array(training["a2"]["test"][0]["output"]), 1).tolist()
    # e3: only its test output occurs in training, exactly: a5's first demonstration input.
    evaluation["e3"]["test"][0]["output"] = training["a5"]["train"][0]["input"]
    # e4: its test pair is an augmentation of its own demonstration (not a leak: a task's own structure).
    evaluation["e4"]["test"] = [augmented(evaluation["e4"]["train"][1], tid=2)]
    # e5: clean.
    concept = {
        # c0 duplicates a3 up to augmentation (every pair moved by the same transform, pairs reordered).
        "c0": {
            "train": [augmented(p, tid=6) for p in reversed(training["a3"]["train"])],
            "test": [augmented(training["a3"]["test"][0], tid=6)],
        },
        # c1 is a4 under another id.
        "c1": json.loads(json.dumps(training["a4"])),
        "c2": task(),
    }
    write(root / "in", "training", training)
    write(root / "in", "evaluation", evaluation)
    prefix = write(root / "in", "concept", concept)
    return {"root": root, "prefix": prefix}


def build(planted: dict, name: str, form: str = "compact", num_aug: int = 2, **kwargs) -> Path:
    out = planted["root"] / name
    build_arc_dataset(
        out,
        input_file_prefix=planted["prefix"],
        subsets=kwargs.pop("subsets", ["training", "evaluation", "concept"]),
        test_set_name=kwargs.pop("test_set_name", "evaluation"),
        num_aug=num_aug,
        form=form,
        **kwargs,
    )
    return out


def found(rows: list[dict]) -> set[tuple]:
    return {
        (m["task"], m["match"], m["same_task"], *((w["task"], w["role"]) for w in m["found_in"]))
        for m in rows
    }


@pytest.mark.parametrize("form", ["compact", "materialized"])
def test_every_planted_overlap_is_found_and_nothing_else(planted: dict, form: str) -> None:
    report = audit(build(planted, f"ds-{form}", form=form), progress=False)
    assert found(report["test_pairs_in_train"]) == {
        ("e0", EXACT, False, ("a0", "pair")),
        ("e1", AUGMENTED, False, ("a1", "pair")),
        ("e4", AUGMENTED, True, ("e4", "pair")),
    }
    assert found(report["test_inputs_in_train"]) == {
        ("e0", EXACT, False, ("a0", "input")),
        ("e1", AUGMENTED, False, ("a1", "input")),
        ("e2", AUGMENTED, False, ("a2", "output")),
        ("e4", AUGMENTED, True, ("e4", "input")),
    }
    assert found(report["test_outputs_in_train"]) == {
        ("e0", EXACT, False, ("a0", "output")),
        ("e1", AUGMENTED, False, ("a1", "output")),
        ("e3", EXACT, False, ("a5", "input")),
        ("e4", AUGMENTED, True, ("e4", "output")),
    }
    dups = {(d["match"], tuple(sorted(m["task"] for m in d["tasks"]))) for d in report["duplicate_tasks"]}
    assert dups == {(AUGMENTED, ("a3", "c0")), (EXACT, ("a4", "c1"))}
    assert report["summary"]["test_pairs_in_train"] == {EXACT: 1, AUGMENTED: 1}
    assert report["summary"]["test_pairs_in_own_demonstrations"] == 1
    subsets = {m["task"]: m["subset"] for d in report["duplicate_tasks"] for m in d["tasks"]}
    assert subsets == {"a3": "training", "c0": "concept", "a4": "training", "c1": "concept"}
    # The test split reuses the train identifiers of its 6 tasks x 3 variants.
    assert report["identifiers"]["test_identifiers"] == report["identifiers"]["also_in_train_split"] == 18
    assert report["embedding_table"]["rows"] == 1 + 15 * 3  # the blank row + 15 tasks x (original + 2)


def test_against_another_build_checks_its_train_split_and_identifier_rows(planted: dict) -> None:
    ours = build(planted, "ds-against", num_aug=2)
    same = build(planted, "ds-same-flags", num_aug=2)
    report = audit(ours, against=same, progress=False)
    assert report["identifiers"]["rows_naming_another_puzzle"] == 0
    assert {m["task"] for m in report["test_pairs_in_train"]} == {"e0", "e1", "e4"}
    # The test tasks' own copies in OTHER are not duplicates; a3/c0 and a4/c1 are not test tasks.
    assert report["duplicate_tasks"] == []

    other = build(planted, "ds-other", num_aug=1, subsets=["training", "evaluation"])
    report = audit(ours, against=other, progress=False)
    assert report["identifiers"]["rows_naming_another_puzzle"] == 18  # another --num-aug: every row moved
    assert report["against"]["path"] == str(other)


def test_keys_match_exactly_the_augmentations() -> None:
    g = np.array(grid())
    for tid in range(8):
        assert canonical_key(CMAP[dihedral(g, tid)]) == canonical_key(g)
    assert exact_key(CMAP[g]) != exact_key(g)
    other = g.copy()
    other[0, 0] = (other[0, 0] + 1) % 10
    assert canonical_key(other) != canonical_key(g)
    # Colour 0 is fixed by the augmentation: swapping 0 with another colour is not an augmentation.
    swapped = np.where(g == 0, 1, np.where(g == 1, 0, g))
    assert (g == 0).any() and canonical_key(swapped) != canonical_key(g)
    # A pair moves as one: transforming only its output is not an augmentation of the pair.
    a, b = np.array(grid()), np.array(grid())
    assert canonical_key(CMAP[dihedral(a, 3)], CMAP[dihedral(b, 3)]) == canonical_key(a, b)
    assert canonical_key(a, np.rot90(b)) != canonical_key(a, b)
    pairs = [(np.array(grid()), np.array(grid())) for _ in range(3)]
    moved = [(CMAP[dihedral(x, 7)], CMAP[dihedral(y, 7)]) for x, y in reversed(pairs)]
    assert task_keys(moved)[1] == task_keys(pairs)[1] and task_keys(moved)[0] != task_keys(pairs)[0]


def test_cli_writes_json_and_markdown(planted: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    dataset = build(planted, "ds-cli")
    argv = ["data", "audit", str(dataset), "--out", str(tmp_path / "report"), "--quiet"]
    assert main([*argv, "--input-file-prefix", str(planted["prefix"])]) == 0
    report = json.loads((tmp_path / "report" / "audit.json").read_text())
    markdown = (tmp_path / "report" / "audit.md").read_text()
    assert report["summary"]["test_outputs_in_train"] == {EXACT: 2, AUGMENTED: 1}
    assert "| e3 | evaluation | 0 | exact | " in markdown and "a4 (training" in markdown
    out = capsys.readouterr().out
    assert "test pairs in training: 1 exact, 1 up to augmentation (+1 in their own demonstrations)" in out


def test_a_missing_dataset_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["data", "audit", str(tmp_path / "nope"), "--quiet"]) == 2
    assert "dataset directory not found" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda m: m.update(files=[]), "key `files` is a list, not a dict"),
        (lambda m: m.update(counts="3"), "key `counts` is a str, not a dict"),
        (lambda m: next(iter(m["files"].values())).update(bytes="12"), "needs an integer `bytes`"),
        (lambda m: m.update(fingerprint=7), "key `fingerprint` is a int, not a str"),
    ],
)
def test_a_manifest_with_wrong_value_types_is_one_line(
    planted: dict, tmp_path: Path, capsys: pytest.CaptureFixture, edit, said: str
) -> None:
    import shutil

    dataset = tmp_path / "ds"
    shutil.copytree(build(planted, "ds-types"), dataset)
    manifest = json.loads((dataset / "manifest.json").read_text())
    edit(manifest)
    (dataset / "manifest.json").write_text(json.dumps(manifest))
    assert main(["data", "audit", str(dataset), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert said in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_counts_of_the_wrong_type_only_lose_the_subset_names(planted: dict, tmp_path: Path) -> None:
    from trm.data.audit import _subset_of_group

    assert _subset_of_group({"args": {"subsets": ["a"]}, "counts": {"tasks": ["x"]}}, 2) == ["unknown"] * 2
    assert (
        _subset_of_group({"args": {"subsets": ["a"]}, "counts": {"tasks": {"a": "2"}}}, 2) == ["unknown"] * 2
    )
    assert _subset_of_group({"args": {"subsets": ["a"]}, "counts": {"tasks": {"a": 2}}}, 2) == ["a", "a"]


def test_an_out_that_is_a_file_is_one_line_before_the_audit_runs(
    planted: dict, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    a_file = tmp_path / "report"
    a_file.write_text("mine")
    dataset = build(planted, "ds-out")

    def not_reached(*args: object, **kwargs: object) -> None:
        raise AssertionError("the audit ran before its --out was checked")

    monkeypatch.setattr("trm.data.audit.audit", not_reached)
    assert main(["data", "audit", str(dataset), "--out", str(a_file), "--quiet"]) == 2
    assert "it is a file, not a folder" in capsys.readouterr().err and a_file.read_text() == "mine"
