"""Upstream checkpoints index their puzzle embedding by upstream's identifiers.json: evaluating or packaging one
on a dataset whose identifiers are not upstream's (or not as many) stops with a message instead of running."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from tests.helpers import tiny_task, write_subset
from trm.data.build_arc import build_arc_dataset
from trm.data.manifest import MANIFEST, read_manifest, require_upstream_identifiers
from trm.data.upstream_import import import_upstream
from trm.errors import TRMError
from trm.eval import main as eval_main
from trm.kaggle.package import package_kaggle
from trm.model import TinyRecursiveModel, TRMConfig
from trm.model.upstream import to_upstream_state_dict
from trm.training.checkpointing.initial_weights import load_initial_weights

ARCH = dict(hidden_size=16, num_heads=2, L_layers=1, H_cycles=1, L_cycles=1, halt_max_steps=2, puzzle_emb_ndim=8,
            puzzle_emb_len=1)  # fmt: skip
OVERRIDES = [f"arch.{k}={v}" for k, v in ARCH.items()]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny dataset from this builder (upstream-identical identifiers), materialized."""
    root = tmp_path_factory.mktemp("guard")
    write_subset(root / "in", "train", {f"t{i}": tiny_task(i)[0] for i in range(3)},
                 {f"t{i}": tiny_task(i)[1] for i in range(3)})  # fmt: skip
    prefix = write_subset(root / "in", "eval", {"e0": tiny_task(7)[0]}, {"e0": tiny_task(7)[1]})
    out = root / "data"
    build_arc_dataset(out, input_file_prefix=prefix, subsets=["train", "eval"], test_set_name="eval", num_aug=3,
                      form="materialized")  # fmt: skip
    return out


def num_ids(dataset: Path) -> int:
    return len(json.loads((dataset / "identifiers.json").read_text()))


def older_copy(dataset: Path, tmp_path: Path) -> Path:
    """The same files with the manifest of a builder that did not reproduce upstream (no identifiers entry)."""
    copy = tmp_path / "older"
    for path in dataset.rglob("*"):
        if path.is_file():
            (copy / path.relative_to(dataset)).parent.mkdir(parents=True, exist_ok=True)
            (copy / path.relative_to(dataset)).write_bytes(path.read_bytes())
    manifest = json.loads((copy / MANIFEST).read_text())
    del manifest["identifiers"]
    (copy / MANIFEST).write_text(json.dumps(manifest))
    return copy


def upstream_file(tmp_path: Path, rows: int) -> Path:
    """An upstream-style `step_N` weight file whose puzzle table has `rows` rows."""
    torch.manual_seed(0)
    model = TinyRecursiveModel(TRMConfig(batch_size=2, seq_len=900, vocab_size=12, num_puzzle_identifiers=rows,
                                         forward_dtype="float32", **ARCH))  # fmt: skip
    path = tmp_path / "step_100"
    torch.save(to_upstream_state_dict(model.state_dict()), path)
    return path


def test_builds_and_imports_are_marked_upstream_identical(dataset, tmp_path):
    assert read_manifest(dataset)["identifiers"] == {"upstream_identical": True}
    imported = older_copy(dataset, tmp_path)
    (imported / MANIFEST).unlink()
    import_upstream(imported)  # upstream's own output
    assert read_manifest(imported)["identifiers"] == {"upstream_identical": True}


def test_require_upstream_identifiers(dataset, tmp_path):
    n = num_ids(dataset)
    require_upstream_identifiers([dataset], n, "step_1")
    with pytest.raises(
        TRMError, match=rf"step_1: its puzzle embedding has {n + 1} rows but .* hold {n} identifiers"
    ):
        require_upstream_identifiers([dataset], n + 1, "step_1")
    older = older_copy(dataset, tmp_path)
    with pytest.raises(
        TRMError, match=r"older: its identifiers.json is not the one upstream's builder writes"
    ):
        require_upstream_identifiers([older], n, "step_1")


def test_load_for_evaluation_refuses_instead_of_resizing(dataset, tmp_path):
    n = num_ids(dataset)
    path = upstream_file(tmp_path, n + 2)
    target = TinyRecursiveModel(TRMConfig(batch_size=2, seq_len=900, vocab_size=12, num_puzzle_identifiers=n,
                                          forward_dtype="float32", **ARCH))  # fmt: skip
    with pytest.raises(TRMError, match="puzzle embedding has"):
        load_initial_weights(str(path), target, n, upstream_data_paths=[str(dataset)])
    assert "upstream" in load_initial_weights(str(path), target, n)  # training init still resizes
    assert "upstream" in load_initial_weights(
        str(upstream_file(tmp_path, n)), target, n, upstream_data_paths=[str(dataset)]
    )


@pytest.mark.parametrize("case", ["older dataset", "other row count"])
def test_eval_and_package_of_an_upstream_checkpoint_stop_with_a_message(dataset, tmp_path, capsys, case):
    n = num_ids(dataset)
    data = older_copy(dataset, tmp_path) if case == "older dataset" else dataset
    path = upstream_file(tmp_path, n if case == "older dataset" else n - 1)
    expected = (
        "not the one upstream's builder writes" if case == "older dataset" else "puzzle (embedding|table) has"
    )
    argv = [
        str(path),
        *OVERRIDES,
        f"data_paths=[{data}]",
        "global_batch_size=8",
        "device=cpu",
        "compile=false",
    ]
    assert eval_main([*argv, "--output-dir", str(tmp_path / "eval")]) == 2
    assert re.search(expected, capsys.readouterr().err)
    assert not (tmp_path / "eval").exists()
    with pytest.raises(TRMError, match=expected):
        package_kaggle(
            path, tmp_path / "bundle", overrides=OVERRIDES, data_path=data, wheels=False, progress=False
        )
    assert not (tmp_path / "bundle").exists()
