"""Every recipe composes through `python -m trm.train --cfg` into exactly its typed config."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from trm.errors import TRMError
from trm.train import main
from trm.training.config import RUN_ONLY_KEYS, as_dict
from trm.training.recipes import RECIPES, TINY_ARCH, get_recipe


def resolved(recipe_config) -> dict:
    """The recipe's config as the trainer resolves it: the puzzle embedding width interpolated."""
    expected = as_dict(recipe_config)
    if not isinstance(expected["arch"]["puzzle_emb_ndim"], int):
        expected["arch"]["puzzle_emb_ndim"] = expected["arch"]["hidden_size"]
    return expected


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_each_recipe_composes_into_its_config(name: str, capsys, monkeypatch) -> None:
    monkeypatch.delenv("DISABLE_COMPILE", raising=False)
    recipe = RECIPES[name]
    assert main([*recipe.overrides, f"data_paths=[data/{recipe.dataset}]", "--cfg"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    expected = resolved(recipe.config)
    derived = {"data_paths", "project_name", "run_name", "checkpoint_path"}  # set by the caller or from data
    assert {k: v for k, v in printed.items() if k not in derived} == {
        k: v for k, v in expected.items() if k not in derived
    }
    assert printed["data_paths"] == [f"data/{recipe.dataset}"]
    assert printed["global_batch_size"] == recipe.global_batch_size


def test_recipes_write_only_what_differs_from_the_trainer_defaults() -> None:
    arc2 = get_recipe("arc2")
    assert arc2.overrides == (
        "arch.L_cycles=4", "eval_interval=800", "ema=True", "eval_subset.fraction=0.1", "best.top_k=3"
    )  # fmt: skip
    assert arc2.global_batch_size == 768  # the paper's, the schema default: no recipe restates it
    assert not any(o.startswith("global_batch_size=") for o in arc2.overrides)


def test_variants_change_only_the_named_keys() -> None:
    tiny = get_recipe("debug-tiny")
    variant = tiny.with_changes(arch={"halt_max_steps": 3}, global_batch_size=4)
    assert variant.config.arch == dataclasses.replace(TINY_ARCH, halt_max_steps=3)
    assert (variant.global_batch_size, tiny.global_batch_size) == (4, 8)
    assert "arch.halt_max_steps=3" in variant.overrides and "global_batch_size=4" in variant.overrides
    with pytest.raises(TRMError, match=r"python -m trm\.train --help"):
        tiny.with_changes(hidden_size=8)  # an arch key given as a top-level key


def test_run_only_keys_are_left_to_the_caller() -> None:
    # except the evaluators of the Sudoku/Maze recipes: none (exact accuracy only), as upstream's README runs them
    for recipe in RECIPES.values():
        assert not {o.split("=", 1)[0] for o in recipe.overrides} & (
            RUN_ONLY_KEYS - {"checkpoint_every_eval", "checkpoint.every_eval", "evaluators"}
        )


def test_unknown_recipe_lists_the_choices() -> None:
    with pytest.raises(TRMError, match="arc2, arc1, arc2-smoke, debug-tiny, bench-tiny"):
        get_recipe("sudoku")


def test_model_config_matches_the_recipe_arch() -> None:
    config = get_recipe("bench-tiny").model_config(
        batch_size=32, seq_len=900, vocab_size=12, num_puzzle_identifiers=1
    )
    assert (config.hidden_size, config.num_heads, config.puzzle_emb_ndim, config.forward_dtype) == (
        64,
        4,
        0,
        "float32",
    )
    arc = get_recipe("arc2").with_changes(arch={"forward_dtype": "bfloat16"})
    arc_model = arc.model_config(batch_size=1, seq_len=900, vocab_size=12, num_puzzle_identifiers=1)
    assert arc_model.puzzle_emb_ndim == arc_model.hidden_size == 512 and arc_model.L_cycles == 4


def test_every_kind_of_value_renders_in_hydra_grammar(monkeypatch) -> None:
    from trm.training.config import compose

    monkeypatch.delenv("DISABLE_COMPILE", raising=False)
    variant = get_recipe("debug-tiny").with_changes(
        evaluators=[{"name": "arc@ARC", "pass_Ks": [1, 2]}], project_name="a b's", lr=3e-4, max_steps=None
    )
    cfg = compose([*variant.overrides, "data_paths=[x]"])
    assert cfg.evaluators == [{"name": "arc@ARC", "pass_Ks": [1, 2]}]
    assert (cfg.project_name, cfg.lr, cfg.max_steps) == ("a b's", 3e-4, None)


# The URM reference's scripts/URM_arcagi1.sh, URM_arcagi2.sh and URM_sudoku.sh (8 GPUs each).
URM_REFERENCE = {
    "urm-arc1": "arch=urm arch.loops=16 arch.H_cycles=2 arch.L_cycles=6 arch.num_layers=4 epochs=200000 "
    "eval_interval=2000 puzzle_emb_lr=1e-2 weight_decay=0.1 ema=True",
    "urm-arc2": "arch=urm arch.loops=16 arch.H_cycles=2 arch.L_cycles=6 arch.num_layers=4 epochs=200000 "
    "eval_interval=2000 puzzle_emb_lr=1e-2 weight_decay=0.1 use_muon=True ema=True",
    "urm-sudoku": "arch=urm arch.loops=16 arch.H_cycles=2 arch.L_cycles=6 arch.num_layers=4 epochs=50000 "
    "eval_interval=2000 lr=1e-4 puzzle_emb_lr=1e-4 weight_decay=1.0 puzzle_emb_weight_decay=1.0 "
    "global_batch_size=128 ema=True",
}


@pytest.mark.parametrize("name", sorted(URM_REFERENCE))
def test_urm_recipes_carry_the_references_settings(name: str) -> None:
    from trm.training.config import compose

    recipe = get_recipe(name)
    assert recipe.arch == "urm" and recipe.overrides[0] == "arch=urm"
    ours = compose([*recipe.overrides, "data_paths=[x]"])
    reference = compose([*URM_REFERENCE[name].split(), "data_paths=[x]"])
    for key in ("arch", "epochs", "eval_interval", "lr", "puzzle_emb_lr", "weight_decay", "puzzle_emb_weight_decay",
                "global_batch_size", "use_muon", "ema"):  # fmt: skip
        assert getattr(ours, key) == getattr(reference, key), (name, key)


def test_a_swapped_architecture_gets_its_own_default_run_name() -> None:
    from trm.launch.config.settings import LaunchSettings

    def run_name(**env: str) -> str:
        return LaunchSettings.from_env(env).run_name

    assert run_name(TASK="arc2") == "trm-arc2"
    assert run_name(TASK="arc2", TRAIN_OVERRIDES="arch=urm") == "trm-arc2-urm"  # not TRM's checkpoints
    assert run_name(TASK="urm-arc2") == "trm-urm-arc2"
    assert run_name(TASK="urm-arc2", TRAIN_OVERRIDES="arch=urm") == "trm-urm-arc2"
