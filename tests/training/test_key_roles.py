"""Each trainer key's role lives in its field's metadata; the key sets and docs/training.md's key table are
derived from it."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from trm import key_roles
from trm.docblock import block_of
from trm.key_roles import RUN_ONLY, keyed, role_of, with_role
from trm.train import main
from trm.training import config
from trm.training.keys_doc import BEGIN, DOC_PATH, END, markdown_table

ROOT = Path(__file__).resolve().parents[2]

# The sets as they were written out by hand before the roles moved onto the fields (values kept).
OLD_RENAMED_KEYS = {
    "checkpoint_every_minutes": "checkpoint.every_minutes",
    "checkpoint_every_steps": "checkpoint.every_steps",
    "checkpoint_every_eval": "checkpoint.every_eval",
    "checkpoint_keep": "checkpoint.keep",
    "checkpoint_keep_best": "checkpoint.keep_best",
    "checkpoint_best_metric": "checkpoint.best_metric",
    "async_checkpoint": "checkpoint.asynchronous",
    "hang_timeout_minutes": "watchdog.timeout_minutes",
    "hang_first_step_minutes": "watchdog.first_step_minutes",
    "hang_eval_minutes": "watchdog.eval_minutes",
}
OLD_RUN_ONLY_KEYS = frozenset(
    {
        "run_name", "project_name", "checkpoint_path", "load_checkpoint", "micro_batch_size", "compile",
        "log_interval", "device", "max_steps", "eval_save_outputs", "wandb", "tensorboard", "min_eval_interval",
        "evaluators", "evaluate", "data_paths_test", "checkpoint", "watchdog", "eval_subset", "best",
        *OLD_RENAMED_KEYS, *OLD_RENAMED_KEYS.values(),
        "compile_mode", "loader_prefetch", "early_stop",  # added with their role on the field
    }
)  # fmt: skip
OLD_LATER_KEYS = {"use_muon": False, "grad_clip_norm": None}
OLD_ARCH_EVAL_ONLY_KEYS = frozenset({"loop_deltas"})
OLD_ARCH_RESUMABLE_KEYS = frozenset({"forward_dtype", "name", "loop_deltas"})


def test_the_sets_derived_from_the_fields_are_the_old_ones() -> None:
    assert list(config.RENAMED_KEYS.items()) == list(OLD_RENAMED_KEYS.items())  # --help lists them in order
    assert config.RUN_ONLY_KEYS == OLD_RUN_ONLY_KEYS
    assert config.LATER_KEYS == OLD_LATER_KEYS
    assert config.ARCH_EVAL_ONLY_KEYS == OLD_ARCH_EVAL_ONLY_KEYS
    assert config.ARCH_RESUMABLE_KEYS == OLD_ARCH_RESUMABLE_KEYS


def test_a_field_carries_its_role_and_old_name() -> None:
    @dataclasses.dataclass
    class Section:
        kept: int = keyed(default=1, renamed_from="old_kept")
        logged: bool = keyed(RUN_ONLY, False)
        items: list[int] = keyed(RUN_ONLY, default_factory=list)
        plain: int = 0

    fields = {f.name: f for f in dataclasses.fields(Section)}
    assert with_role(Section, RUN_ONLY) == ["logged", "items"]
    assert role_of(fields["kept"]) is None and fields["kept"].metadata[key_roles.RENAMED_FROM] == "old_kept"
    assert Section() == Section(kept=1, logged=False, items=[], plain=0)
    assert Section().items is not Section().items  # the factory still makes one list per instance
    with pytest.raises(ValueError, match="unknown key role 'runonly'; use one of run-only, later"):
        keyed("runonly", 1)


def test_every_field_with_a_role_is_in_the_hash_rules() -> None:
    cfg = config.compose(["data_paths=[d]"])
    hashed = config.math_dict(cfg)
    for key in with_role(config.TrainConfig, RUN_ONLY):
        assert key not in hashed, key
    assert "loop_deltas" not in config.math_dict(config.compose(["arch=urm", "data_paths=[d]"]))["arch"]
    assert {"global_batch_size", "lr", "seed"} <= set(hashed)


def test_the_docs_key_table_is_the_generated_one() -> None:
    page = (ROOT / DOC_PATH).read_text(encoding="utf-8")
    assert block_of(page, DOC_PATH, BEGIN, END) == markdown_table(), (
        "docs/training.md's key table is stale: regenerate it with `python -m trm.train --write-keys-doc`"
    )


def test_the_table_lists_every_key_with_its_role() -> None:
    rows = {line.split(" | ")[0].strip("| `"): line for line in markdown_table().splitlines()[2:]}
    run_keys = {k for k in config.schema_keys("trm") if not k.startswith("arch")} - set(config.SECTIONS)
    assert run_keys | {"arch.forward_dtype", "arch.name", "arch.loop_deltas"} == set(rows)
    assert "| run-only; was `checkpoint_keep` |" in rows["checkpoint.keep"]
    assert "| `null` | math, hashed only when not the default |" in rows["grad_clip_norm"]
    assert (
        "| `[0, 8]` | evaluation only |" in rows["arch.loop_deltas"]
        and "Only arch=urm." in rows["arch.loop_deltas"]
    )
    assert "| `768` | math |" in rows["global_batch_size"]


def test_write_keys_doc_rewrites_a_stale_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / DOC_PATH
    doc.parent.mkdir()
    shutil.copy(ROOT / DOC_PATH, doc)
    stale = (
        (ROOT / DOC_PATH)
        .read_text(encoding="utf-8")
        .replace("| `seed` | `0` | math |", "| `seed` | `1` | math |")
    )
    doc.write_text(stale, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["--write-keys-doc"]) == 0
    assert capsys.readouterr().out == "docs/training.md: updated\n"
    assert doc.read_text(encoding="utf-8") == (ROOT / DOC_PATH).read_text(encoding="utf-8")
    assert main(["--write-keys-doc"]) == 0
    assert capsys.readouterr().out == "docs/training.md: up to date\n"

    doc.write_text("no markers\n", encoding="utf-8")
    assert main(["--write-keys-doc"]) == 2
    err = capsys.readouterr().err
    assert "docs/training.md must contain the markers once, in order" in err and BEGIN in err
    assert doc.read_text(encoding="utf-8") == "no markers\n"
