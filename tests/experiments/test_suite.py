"""Suites as data: expansion, names, swept values, datasets, selection, and validation before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from trm.errors import TRMError
from trm.experiments.suite import Catalog, expand, experiment_name, load_file, validate

DATA, CKPT = Path("/data"), Path("/ckpt")


def suite_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "suites.toml"
    path.write_text(text)
    return path


def test_a_grid_expands_to_its_cartesian_product_in_key_order_with_readable_names(tmp_path):
    (suite,) = load_file(
        suite_file(
            tmp_path,
            '[exp07]\ntitle = "t"\nrecipe = "sudoku-mlp"\n'
            'grid = { "arch.H_cycles" = [2, 3], "arch.L_cycles" = [4, 6] }\n',
        )
    )
    exps = expand(suite)
    assert [e.name for e in exps] == ["exp07a", "exp07b", "exp07c", "exp07d"]
    assert [e.overrides for e in exps] == [
        ("arch.H_cycles=2", "arch.L_cycles=4"),
        ("arch.H_cycles=2", "arch.L_cycles=6"),
        ("arch.H_cycles=3", "arch.L_cycles=4"),
        ("arch.H_cycles=3", "arch.L_cycles=6"),
    ]
    assert exps[1].run_name == "exp07b-sudoku-mlp-H_cycles-2-L_cycles-6"
    assert exps[1].swept == {"arch.H_cycles": 2, "arch.L_cycles": 6}


def test_names_go_past_z_and_ids_without_a_digit_get_a_dash():
    assert [experiment_name("exp01", i) for i in (0, 25, 26, 27)] == [
        "exp01a",
        "exp01z",
        "exp01aa",
        "exp01ab",
    ]
    assert experiment_name("smoke", 2) == "smoke-c"


def test_listed_variants_record_every_swept_key_with_the_recipes_value_where_they_set_none():
    catalog = Catalog.load()
    base, mlp = catalog.select(["exp10"])
    assert base.swept == {"arch.mlp_t": False, "arch.pos_encodings": "rope"}
    assert mlp.swept == {"arch.mlp_t": True, "arch.pos_encodings": "none"}
    with_emb, without = catalog.select(["exp09"])
    # The recipe's puzzle width follows hidden_size (`${.hidden_size}`): the resolved number is recorded.
    assert with_emb.swept == {"arch.puzzle_emb_ndim": 512, "arch.puzzle_emb_len": 16}
    assert without.swept == {"arch.puzzle_emb_ndim": 0, "arch.puzzle_emb_len": 0}


@pytest.mark.e2e  # tens of seconds: out of the default suite, run by make test-e2e
def test_every_shipped_experiment_composes_through_the_trainers_configuration():
    catalog = Catalog.load()
    configs = validate(list(catalog.experiments.values()), DATA, CKPT)
    assert configs["exp03b"].arch.L_cycles == 4 and configs["exp03b"].arch.mlp_t is True
    assert configs["exp08b"].ema is False and configs["exp08a"].ema is True
    assert configs["exp09b"].arch.puzzle_emb_ndim == 0
    assert configs["exp10b"].arch.mlp_t is True and configs["exp10a"].arch.mlp_t is False
    assert configs["exp11b"].arch.name.endswith("trm_singlez@TinyRecursiveReasoningModel_ACTV1")
    assert configs["exp01a"].arch.hidden_size == 128
    assert configs["exp01a"].checkpoint_path == "/ckpt/exp01a-arc2-hidden_size-128"
    assert configs["exp01a"].data_paths == ["/data/arc2concept-aug-1000"]
    # The paper's ablations are all there.
    titles = " ".join(s.title for s in catalog.suites.values())
    for study in ("hidden_size", "layers", "L_cycles", "H_cycles", "Data size", "Augmentation", "EMA",
                  "Puzzle embedding", "MLP"):  # fmt: skip
        assert study in titles, study


def test_data_keys_select_a_dataset_and_its_build_command():
    catalog = Catalog.load()
    small, *_, full = catalog.select(["exp05"])
    assert small.dataset.name == "sudoku-extreme-100-aug-1000"
    assert small.dataset.builder == "build-sudoku"
    assert small.dataset.build_args == ("--subsample-size", "100", "--num-aug", "1000")
    assert small.compose(DATA, CKPT).data_paths == ["/data/sudoku-extreme-100-aug-1000"]
    # The recipe's own settings reuse the recipe's own directory (no second copy of the same data).
    assert full.dataset.name == "sudoku-extreme-1k-aug-1000"
    (arc100,) = catalog.select(["exp07a"])
    assert arc100.dataset.name == "arc2concept-aug-100"
    assert arc100.dataset.build_args[-2:] == ("--num-aug", "100")


def test_an_unknown_key_fails_naming_the_experiment_the_key_and_the_closest_key(tmp_path):
    path = suite_file(tmp_path, '[abl1]\ntitle = "t"\nrecipe = "maze"\ngrid = { "arch.L_cycle" = [2, 4] }\n')
    catalog = Catalog.load([path])
    with pytest.raises(TRMError) as err:
        validate(catalog.select(["abl1"]), DATA, CKPT)
    message = str(err.value)
    assert "experiment abl1a (suite abl1 in" in message and str(path) in message
    assert "'arch.L_cycle'" in message and "Did you mean 'arch.L_cycles'?" in message


def test_an_invalid_combination_fails_before_anything_runs(tmp_path):
    path = suite_file(
        tmp_path,
        '[abl2]\nrecipe = "arc2"\nexperiments = [ { label = "half-off", overrides = ["arch.puzzle_emb_ndim=0"] } ]\n',
    )
    with pytest.raises(
        TRMError, match=r"experiment abl2a .*arch.puzzle_emb_ndim=0 needs arch.puzzle_emb_len=0"
    ):
        validate(Catalog.load([path]).select(["abl2a"]), DATA, CKPT)


def test_a_data_key_the_builder_does_not_take_is_named_with_its_choices(tmp_path):
    path = suite_file(tmp_path, '[abl3]\nrecipe = "arc2"\ngrid = { "data.subsample_size" = [10] }\n')
    with pytest.raises(TRMError) as err:
        validate(Catalog.load([path]).select(["abl3"]), DATA, CKPT)
    assert "experiment abl3a" in str(err.value) and "'data.subsample_size'" in str(err.value)
    assert "data.num_aug, data.max_puzzles, data.seed" in str(err.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[s]\nrecipe = "arc2"\ngird = { "lr" = [1] }\n', "unknown key 'gird'. Did you mean 'grid'?"),
        ('[s]\nrecipe = "arc3"\ngrid = { "lr" = [1] }\n', "recipe = 'arc3' is not a recipe"),
        ('[s]\nrecipe = "arc2"\n', "give either `grid`"),
        ('[s]\nrecipe = "arc2"\ngrid = { "lr" = [] }\n', "non-empty list"),
        (
            '[s]\nrecipe = "arc2"\nexperiments = [ { label = "a", overrides = ["lr"] } ]\n',
            "'lr' is not key=value",
        ),
        (
            '[s]\nrecipe = "arc2"\nexperiments = [ { label = "a" }, { label = "a" } ]\n',
            "label 'a' is used twice",
        ),
        ("[s\n", "is not valid TOML"),
    ],
)
def test_a_malformed_suite_file_names_the_file_the_suite_and_the_fix(tmp_path, text, message):
    with pytest.raises(TRMError, match=None) as err:
        Catalog.load([suite_file(tmp_path, text)])
    assert message in str(err.value) and "suites.toml" in str(err.value)


def test_a_suite_id_defined_twice_is_refused(tmp_path):
    with pytest.raises(TRMError, match=r"suite exp01 is defined in .*paper.toml and again in"):
        Catalog.load([suite_file(tmp_path, '[exp01]\nrecipe = "arc2"\ngrid = { "lr" = [1] }\n')])


def test_selection_by_name_suite_prefix_and_glob():
    catalog = Catalog.load()
    assert [e.name for e in catalog.select(pattern="exp03")] == ["exp03a", "exp03b", "exp03c", "exp03d"]
    assert [e.name for e in catalog.select(pattern="exp0[89]*")] == ["exp08a", "exp08b", "exp09a", "exp09b"]
    assert [e.name for e in catalog.select(["exp08", "exp01b"])] == ["exp08a", "exp08b", "exp01b"]
    with pytest.raises(TRMError, match=r"unknown experiment .exp01e.. Did you mean exp01"):
        catalog.select(["exp01e"])
    with pytest.raises(TRMError, match="no experiment matches --pattern 'nope'"):
        catalog.select(pattern="nope")


def test_extra_overrides_come_last_and_run_name_moves_the_run_directory():
    (exp,) = Catalog.load().select(["exp03a"])
    cfg = exp.compose(DATA, CKPT, ("arch.L_cycles=3", "run_name=mine"))
    assert cfg.arch.L_cycles == 3
    assert cfg.run_name == "mine" and cfg.checkpoint_path == "/ckpt/mine"
