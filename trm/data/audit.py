"""`python -m trm data audit DATASET [--against OTHER]`: what an ARC dataset's test split shares with training.

Reported (audit.json, and audit.md for people):
  * test pairs, test inputs and test outputs that also occur in the training split, exactly or up to our
    augmentations (the 8 dihedral transforms x permutations of colours 1-9, colour 0 fixed: trm.data.augment);
    a match inside the test task's own demonstrations is marked `same_task`;
  * puzzle identifiers shared between the splits and what that means for the puzzle embedding;
  * tasks that duplicate one another across subsets (e.g. ConceptARC vs ARC-AGI), exactly or up to augmentation;
  * the size of the puzzle-embedding table the dataset implies;
  * the clean evaluation split: the test tasks none of whose test pairs, inputs or outputs occurs in
    another training task and which duplicate no task (trm.data.clean_split), listed in clean_tasks.json
    and copied as a Kaggle challenges/solutions pair (clean_challenges.json, clean_solutions.json).
With --against OTHER, the training side is OTHER's train split (the data a checkpoint was trained on) and
DATASET's test split is checked against it, identifiers included.

Matching is a hash lookup, never pairwise: every grid (and every pair, and every task) gets an exact key and
a canonical key, the smallest serialisation over the 8 dihedral transforms after relabelling colours 1-9
in order of first appearance. Two grids share a canonical key exactly when one is an augmentation of the
other, so nothing is reported that is not a match. A task's canonical key sorts its pairs by their own
canonical keys before the joint relabelling; tasks whose pairs tie there can be missed, never falsely matched.
Only the original (un-augmented) puzzle of each group is read: augmentations add nothing up to augmentation.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from trm.errors import TRMError
from trm.io import atomic_directory, atomic_write_json, atomic_write_text

from .arc_source import DEFAULT_PREFIX, DUMMY_OUTPUT
from .clean_split import CHALLENGES_NAME as CLEAN_CHALLENGES
from .clean_split import LIST_NAME as CLEAN_LIST
from .clean_split import SOLUTIONS_NAME as CLEAN_SOLUTIONS
from .clean_split import select_clean, write_clean_split
from .encoding import COLOUR_OFFSET, GRID_SIZE, SEQ_LEN, VOCAB_SIZE, dihedral
from .formats import SplitData
from .manifest import read_verified_manifest

EXACT, AUGMENTED = "exact", "augmented"
JSON_NAME, MARKDOWN_NAME = "audit.json", "audit.md"
KIND = "data-audit"  # the kind of output in the report folder's creation marker (trm.safe_remove)
# The puzzle-embedding width of the published ARC model (TRMArch.puzzle_emb_ndim), for the table's size.
DEFAULT_EMB_NDIM = 512
_DUMMY = np.array(DUMMY_OUTPUT, dtype=np.uint8)
_SHOWN = 50  # rows per table in audit.md (audit.json has all)


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def _relabelled(flat: np.ndarray) -> np.ndarray:
    """Colours 1-9 renumbered 1..k in order of first appearance; colour 0 stays 0."""
    values, first = np.unique(flat, return_index=True)
    keep = values != 0
    order = values[keep][np.argsort(first[keep], kind="stable")]
    lut = np.zeros(10, dtype=np.uint8)
    lut[order] = np.arange(1, len(order) + 1, dtype=np.uint8)
    return lut[flat]


def _serialised(grids: tuple[np.ndarray, ...]) -> bytes:
    return bytes(d for g in grids for d in g.shape) + np.concatenate([g.ravel() for g in grids]).tobytes()


def exact_key(*grids: np.ndarray) -> bytes:
    """The key of these grids as they are (shapes included)."""
    return _digest(_serialised(grids))


def _canonical_form(grids: tuple[np.ndarray, ...], tid: int) -> bytes:
    moved = tuple(np.ascontiguousarray(dihedral(g, tid)) for g in grids)
    flat = _relabelled(np.concatenate([g.ravel() for g in moved]))
    return bytes(d for g in moved for d in g.shape) + flat.tobytes()


def canonical_key(*grids: np.ndarray) -> bytes:
    """The key shared by exactly the joint augmentations (one dihedral id, one colour map) of these grids."""
    return _digest(min(_canonical_form(grids, t) for t in range(8)))


def task_keys(pairs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[bytes, bytes]:
    """(exact, canonical) key of a task as an unordered set of pairs."""
    exact = _digest(b"".join(sorted(exact_key(a, b) for a, b in pairs)))
    forms = []
    for t in range(8):
        ordered = sorted(pairs, key=lambda p, t=t: _canonical_form(p, t))
        forms.append(_canonical_form(tuple(g for p in ordered for g in p), t))
    return exact, _digest(min(forms))


def _crop(tokens: np.ndarray) -> np.ndarray:
    """The grid of an encoded example wherever it sits on the canvas (train examples are translated)."""
    canvas = np.asarray(tokens).reshape(GRID_SIZE, GRID_SIZE)
    colour = canvas >= COLOUR_OFFSET
    rows, cols = np.flatnonzero(colour.any(axis=1)), np.flatnonzero(colour.any(axis=0))
    if not len(rows):
        return np.zeros((0, 0), dtype=np.uint8)
    return (canvas[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1] - COLOUR_OFFSET).astype(np.uint8)


@dataclass
class Task:
    """One task of a dataset: its original pairs per split (train split pairs, test split pairs)."""

    task_id: str
    subset: str
    identifier: int
    train_pairs: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    test_pairs: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)


@dataclass
class Dataset:
    """What the audit reads of one dataset directory."""

    path: Path
    manifest: dict[str, Any]
    identifiers: list[str]
    tasks: list[Task]
    test_identifiers: set[int]
    train_identifiers: set[int]
    num_identifiers: int


def _subset_of_group(manifest: dict[str, Any], n_groups: int) -> list[str]:
    """Subset of each train group: the builder writes the tasks subset by subset, in --subsets order."""
    subsets = (manifest.get("args") or {}).get("subsets") or []
    counts = (manifest.get("counts") or {}).get("tasks") or {}
    if not isinstance(subsets, list) or not isinstance(counts, dict):  # an edited manifest: no subset names
        return ["unknown"] * n_groups
    names = [s for s in subsets for _ in range(counts.get(s, 0) if type(counts.get(s, 0)) is int else 0)]
    return names if len(names) == n_groups else ["unknown"] * n_groups


def _originals(
    split: SplitData, progress: bool, label: str
) -> list[tuple[int, list[tuple[np.ndarray, np.ndarray]]]]:
    """(puzzle identifier, pairs) of the first (original) puzzle of every group of a split."""
    out = []
    for g in tqdm(
        range(split.num_groups), desc=f"reading {label}", unit="task", disable=not progress, leave=False
    ):
        puzzle = int(split.group_indices[g])
        start, end = int(split.puzzle_indices[puzzle]), int(split.puzzle_indices[puzzle + 1])
        ids = np.arange(start, end, dtype=np.int64)
        inputs, labels = split.examples(ids, np.full(len(ids), puzzle, dtype=np.int64))
        pairs = [(_crop(a), _crop(b)) for a, b in zip(inputs, labels, strict=True)]
        out.append((int(split.puzzle_identifiers[puzzle]), pairs))
    return out


def read_dataset(path: str | Path, progress: bool = True) -> Dataset:
    """Read an ARC dataset's original tasks (verified against its manifest)."""
    root = Path(path)
    manifest = read_verified_manifest(root)
    splits = {name: SplitData(root, name, manifest["form"]) for name in ("train", "test")}
    meta = splits["train"].metadata
    if meta.seq_len != SEQ_LEN or meta.vocab_size != VOCAB_SIZE:
        raise TRMError(
            f"{root}: not an ARC dataset (seq_len {meta.seq_len}, vocab {meta.vocab_size}); the audit compares "
            "ARC grids (built by `python -m trm data build-arc`)"
        )
    try:
        identifiers = json.loads((root / "identifiers.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise TRMError(f"{root / 'identifiers.json'}: unreadable ({err}); rebuild the dataset") from None
    train = _originals(splits["train"], progress, f"{root.name} train")
    subsets = _subset_of_group(manifest, len(train))
    tasks: dict[int, Task] = {}
    for (ident, pairs), subset in zip(train, subsets, strict=True):
        tasks[ident] = Task(str(identifiers[ident]), subset, ident, train_pairs=pairs)
    for ident, pairs in _originals(splits["test"], progress, f"{root.name} test"):
        task = tasks.setdefault(ident, Task(str(identifiers[ident]), "unknown", ident))
        task.test_pairs = pairs
    return Dataset(
        path=root,
        manifest=manifest,
        identifiers=[str(i) for i in identifiers],
        tasks=list(tasks.values()),
        test_identifiers={int(i) for i in splits["test"].puzzle_identifiers},
        train_identifiers={int(i) for i in splits["train"].puzzle_identifiers},
        num_identifiers=int(meta.num_puzzle_identifiers),
    )


def _where(task: Task, pair: int, role: str) -> dict[str, Any]:
    return {
        "task": task.task_id,
        "subset": task.subset,
        "identifier": task.identifier,
        "pair": pair,
        "role": role,
    }


class _Index:
    """Training-side grids, pairs: exact and canonical key -> where they occur."""

    def __init__(self, tasks: list[Task], progress: bool) -> None:
        self.tables: dict[tuple[str, str], dict[bytes, list[dict[str, Any]]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for task in tqdm(
            tasks, desc="indexing training grids", unit="task", disable=not progress, leave=False
        ):
            for i, (inp, out) in enumerate(task.train_pairs):
                entries = (
                    ("pair", (inp, out), "pair"),
                    ("grid", (inp,), "input"),
                    ("grid", (out,), "output"),
                )
                for kind, grids, role in entries:
                    where = _where(task, i, role)
                    self.tables[(kind, EXACT)][exact_key(*grids)].append(where)
                    self.tables[(kind, AUGMENTED)][canonical_key(*grids)].append(where)

    def find(self, kind: str, grids: tuple[np.ndarray, ...]) -> tuple[str, list[dict[str, Any]]] | None:
        """(how, occurrences) of the best match of `grids`: exact first, else up to augmentation."""
        found = self.tables[(kind, EXACT)].get(exact_key(*grids))
        if found:
            return EXACT, found
        found = self.tables[(kind, AUGMENTED)].get(canonical_key(*grids))
        return (AUGMENTED, found) if found else None


def _test_matches(test: Dataset, index: _Index, progress: bool) -> dict[str, list[dict[str, Any]]]:
    """Every test pair / input / output found on the training side (`same_task`: found only in the test
    task's own demonstrations, i.e. under its own task id and subset)."""
    found: dict[str, list[dict[str, Any]]] = {"pairs": [], "inputs": [], "outputs": []}
    tests = [t for t in test.tasks if t.test_pairs]
    for task in tqdm(tests, desc="matching test pairs", unit="task", disable=not progress, leave=False):
        for i, (inp, out) in enumerate(task.test_pairs):
            has_output = not np.array_equal(out, _DUMMY)  # a test subset without solutions has dummy outputs
            checks = [("pairs", "pair", (inp, out)), ("inputs", "grid", (inp,))]
            if has_output:
                checks.append(("outputs", "grid", (out,)))
            for name, kind, grids in checks:
                if name == "pairs" and not has_output:
                    continue
                hit = index.find(kind, grids)
                if hit is None:
                    continue
                how, where = hit
                found[name].append(
                    {
                        "task": task.task_id,
                        "subset": task.subset,
                        "pair": i,
                        "match": how,
                        "cells": int(sum(g.size for g in grids)),
                        "same_task": all(
                            (w["task"], w["subset"]) == (task.task_id, task.subset) for w in where
                        ),
                        "found_in": where,
                    }
                )
    for rows in found.values():
        rows.sort(key=lambda m: (m["same_task"], m["match"] != EXACT, m["subset"], m["task"], m["pair"]))
    return found


def _duplicate_tasks(test: Dataset, train: Dataset, progress: bool) -> list[dict[str, Any]]:
    """Groups of tasks (train and test pairs together) equal exactly or up to augmentation: within the
    dataset; with --against, groups holding a test task of DATASET and a task of OTHER."""
    groups: dict[tuple[str, bytes], list[dict[str, Any]]] = defaultdict(list)
    sides = [("dataset", test)] if train is test else [("dataset", test), ("against", train)]
    everything = [(side, d, t) for side, d in sides for t in d.tasks]
    for side, dataset, task in tqdm(
        everything, desc="comparing tasks", unit="task", disable=not progress, leave=False
    ):
        exact, canonical = task_keys(task.train_pairs + task.test_pairs)
        where = {"task": task.task_id, "subset": task.subset, "dataset": dataset.path.name, "side": side,
                 "test": bool(task.test_pairs)}  # fmt: skip
        groups[(EXACT, exact)].append(where)
        groups[(AUGMENTED, canonical)].append(where)

    def wanted(members: list[dict[str, Any]]) -> bool:
        if train is test:
            return len(members) > 1
        tests = {(m["task"], m["subset"]) for m in members if m["side"] == "dataset" and m["test"]}
        others = {(m["task"], m["subset"]) for m in members if m["side"] == "against"}
        return bool(tests) and bool(others - tests)  # the test task's own copy in OTHER is no duplicate

    exact_sets = {
        frozenset(map(json.dumps, m)) for (how, _), m in groups.items() if how == EXACT and wanted(m)
    }
    out = []
    for (how, _), members in groups.items():
        if not wanted(members) or (how == AUGMENTED and frozenset(map(json.dumps, members)) in exact_sets):
            continue  # a single task, or already reported as exact
        out.append(
            {"match": how, "tasks": sorted(members, key=lambda m: (m["side"], m["subset"], m["task"]))}
        )
    return sorted(out, key=lambda g: (g["match"] != EXACT, g["tasks"][0]["task"]))


def _identifier_report(test: Dataset, train: Dataset) -> dict[str, Any]:
    """How the test split's puzzle identifiers relate to the rows the training side trained."""
    test_ids = sorted(test.test_identifiers)
    shared = [i for i in test_ids if i in train.train_identifiers]
    report: dict[str, Any] = {
        "test_identifiers": len(test_ids),
        "also_in_train_split": len(shared),
    }
    if train is test:
        report["meaning"] = (
            f"{len(shared)} of {len(test_ids)} test puzzle identifiers are also train identifiers: the test split "
            "reuses the train split's identifier of each test task (and augmentation), whose embedding row was "
            "trained on that task's demonstration pairs. Scores on this test split therefore measure a model that "
            "has seen every test task's demonstrations during training (not the test answers, which the pair "
            "matches above check), and `trm.eval --puzzle-ids blank|shuffled` measures how much it relies on those "
            "rows. Tasks absent from training have no trained row (the Kaggle bundle gives them the mean row)."
        )
        return report
    differing = [
        i for i in test_ids if i >= len(train.identifiers) or train.identifiers[i] != test.identifiers[i]
    ]
    report["rows_naming_another_puzzle"] = len(differing)
    report["meaning"] = (
        f"A checkpoint trained on {train.path.name} evaluated on {test.path.name} looks up row i for identifier i: "
        f"for {len(differing)} of {len(test_ids)} test identifiers that row was trained for another puzzle (or "
        "does not exist), so those puzzles are conditioned on someone else's embedding. Evaluate on the dataset "
        "the checkpoint was trained on."
    )
    report["examples"] = [
        {
            "identifier": i,
            "test": test.identifiers[i],
            "train": train.identifiers[i] if i < len(train.identifiers) else None,
        }
        for i in differing[:10]
    ]
    return report


def audit(dataset: str | Path, against: str | Path | None = None, *, progress: bool = True) -> dict[str, Any]:
    """The audit report of `dataset` (its test split against its own, or OTHER's, train split)."""
    test = read_dataset(dataset, progress)
    train = read_dataset(against, progress) if against is not None else test
    index = _Index(train.tasks, progress)
    matches = _test_matches(test, index, progress)
    duplicates = _duplicate_tasks(test, train, progress)
    rows = train.num_identifiers
    summary = {
        f"test_{name}_in_train": {
            how: sum(1 for m in found if m["match"] == how and not m["same_task"])
            for how in (EXACT, AUGMENTED)
        }
        for name, found in matches.items()
    }
    for name, found in matches.items():
        summary[f"test_{name}_in_own_demonstrations"] = sum(1 for m in found if m["same_task"])
    summary["duplicate_task_groups"] = {
        h: sum(1 for d in duplicates if d["match"] == h) for h in (EXACT, AUGMENTED)
    }
    clean = select_clean(
        [(t.task_id, t.subset) for t in test.tasks if t.test_pairs],
        matches,
        duplicates,
        {t.task_id for t in train.tasks if t.train_pairs},
    )
    summary["clean_test_tasks"] = clean["counts"]
    return {
        "dataset": {"path": str(test.path), "fingerprint": test.manifest["fingerprint"]},
        "against": {"path": str(train.path), "fingerprint": train.manifest["fingerprint"]}
        if train is not test
        else None,
        "tasks": {
            "test": sum(1 for t in test.tasks if t.test_pairs),
            "train": len(train.tasks),
            "test_pairs": sum(len(t.test_pairs) for t in test.tasks),
            "train_pairs": sum(len(t.train_pairs) for t in train.tasks),
        },
        "summary": summary,
        "test_pairs_in_train": matches["pairs"],
        "test_inputs_in_train": matches["inputs"],
        "test_outputs_in_train": matches["outputs"],
        "identifiers": _identifier_report(test, train),
        "duplicate_tasks": duplicates,
        "embedding_table": {
            "rows": rows,
            "tasks": len(train.tasks),
            "rows_per_task": round(rows / max(len(train.tasks), 1), 2),
            "float32_bytes_at_puzzle_emb_ndim_512": rows * DEFAULT_EMB_NDIM * 4,
        },
        "clean_split": clean,
    }


def _match_rows(found: list[dict[str, Any]]) -> str:
    if not found:
        return "none\n"
    lines = ["| test task | subset | pair | match | cells | found in |", "|---|---|---|---|---|---|"]
    for m in found[:_SHOWN]:
        where = ", ".join(
            f"{w['task']} ({w['subset']}) pair {w['pair']}" + ("" if w["role"] == "pair" else f" {w['role']}")
            for w in m["found_in"][:3]
        )
        more = f" and {len(m['found_in']) - 3} more" if len(m["found_in"]) > 3 else ""
        own = " (own demonstration)" if m["same_task"] else ""
        lines.append(
            f"| {m['task']} | {m['subset']} | {m['pair']} | {m['match']}{own} | {m['cells']} | {where}{more} |"
        )
    if len(found) > _SHOWN:
        lines.append(f"\n… and {len(found) - _SHOWN} more in {JSON_NAME}")
    return "\n".join(lines) + "\n"


def render_markdown(report: dict[str, Any]) -> str:
    """audit.md: the summary, the matches, the identifiers, duplicates and the table size."""
    s, t, table = report["summary"], report["tasks"], report["embedding_table"]
    against = f" against `{report['against']['path']}`" if report["against"] else ""
    dup_rows = "\n".join(
        f"- {d['match']}: " + ", ".join(f"{m['task']} ({m['subset']}, {m['dataset']})" for m in d["tasks"])
        for d in report["duplicate_tasks"][:_SHOWN]
    )
    return f"""# Data audit: `{report["dataset"]["path"]}`{against}

{t["test"]} test tasks ({t["test_pairs"]} test pairs) checked against {t["train"]} training tasks
({t["train_pairs"]} training pairs). "augmented" means equal up to a dihedral transform and a permutation of
colours 1-9 (the dataset's own augmentations); "own demonstration" means the match is the test task's own
training pair.

| | exact | augmented | own demonstrations |
|---|---|---|---|
| test pairs (input and answer) found in training | {s["test_pairs_in_train"][EXACT]} | {s["test_pairs_in_train"][AUGMENTED]} | {s["test_pairs_in_own_demonstrations"]} |
| test inputs found in training | {s["test_inputs_in_train"][EXACT]} | {s["test_inputs_in_train"][AUGMENTED]} | {s["test_inputs_in_own_demonstrations"]} |
| test outputs found in training | {s["test_outputs_in_train"][EXACT]} | {s["test_outputs_in_train"][AUGMENTED]} | {s["test_outputs_in_own_demonstrations"]} |
| duplicate task groups | {s["duplicate_task_groups"][EXACT]} | {s["duplicate_task_groups"][AUGMENTED]} | |

## Test pairs whose answer is in training

{_match_rows(report["test_pairs_in_train"])}
## Test inputs found in training

{_match_rows(report["test_inputs_in_train"])}
## Test outputs found in training

{_match_rows(report["test_outputs_in_train"])}
## Puzzle identifiers

{report["identifiers"]["meaning"]}

## Duplicate tasks

{dup_rows or "none"}

## Puzzle-embedding table

{table["rows"]:,} rows for {table["tasks"]:,} tasks ({table["rows_per_task"]} per task): {table["float32_bytes_at_puzzle_emb_ndim_512"] / 2**20:,.1f} MiB
in float32 at puzzle_emb_ndim 512, against about 7M parameters in the network itself.

## Clean evaluation split

{_clean_section(report["clean_split"])}"""


def _clean_section(clean: dict[str, Any]) -> str:
    c = clean["counts"]
    lines = [
        f"{c['clean']} of {c['test_tasks']} test tasks overlap no other training task (no test pair, input or "
        "output in another task, exactly or up to augmentation, and no duplicate task); "
        f"{c['clean_without_trained_rows']} of them have no trained puzzle-embedding rows on the training "
        f"side, the way a hidden test set meets a checkpoint. They are listed in `{CLEAN_LIST}` and copied "
        f"as `{CLEAN_CHALLENGES}` / `{CLEAN_SOLUTIONS}` (Kaggle format).",
        "",
    ]
    if clean["excluded"]:
        lines += ["| excluded test task | subset | why |", "|---|---|---|"]
        for e in clean["excluded"][:_SHOWN]:
            more = f" and {len(e['why']) - 2} more" if len(e["why"]) > 2 else ""
            lines.append(f"| {e['task']} | {e['subset']} | {'; '.join(e['why'][:2])}{more} |")
        if len(clean["excluded"]) > _SHOWN:
            lines.append(f"\n… and {len(clean['excluded']) - _SHOWN} more in {CLEAN_LIST}")
    return "\n".join(lines) + "\n"


def check_out(out_dir: str | Path, dataset: str | Path, against: str | Path | None = None) -> None:
    """TRMError (one line) when `out_dir` may not receive the report: checked before the audit's work and
    again when it is written (an earlier audit folder may be replaced; anything else is refused)."""
    from trm.safe_remove import check_replaceable

    check_replaceable(
        Path(out_dir), kind=KIND, sources=[dataset, *([against] if against else [])], flag="--out"
    )


def write_report(
    report: dict[str, Any], out_dir: str | Path, input_prefix: str | Path = DEFAULT_PREFIX
) -> tuple[list[Path], str | None]:
    """The report folder `out_dir`, published atomically: audit.json, audit.md and the clean split
    (trm.data.clean_split; its pair copied from the input files under `input_prefix`). An earlier audit
    folder is replaced; a folder holding anything else is refused. Returns the files and a note."""
    from .manifest import read_manifest

    out = Path(out_dir)
    sources = [report["dataset"]["path"], *([report["against"]["path"]] if report["against"] else [])]
    check_out(out, *sources)
    manifest = read_manifest(report["dataset"]["path"])
    with atomic_directory(
        out, overwrite=True, kind=KIND, tool="trm data audit", sources=sources, flag="--out"
    ) as tmp:
        atomic_write_json(tmp / JSON_NAME, report)
        atomic_write_text(tmp / MARKDOWN_NAME, render_markdown(report))
        written, note = write_clean_split(tmp, report, manifest, input_prefix)
    return [out / JSON_NAME, out / MARKDOWN_NAME, *(out / p.name for p in written)], note
