"""trm.train's configuration: upstream keys and defaults, `+key` and `key` alike, errors that name the fix."""

from __future__ import annotations

import shlex

import pytest

from trm.errors import TRMError
from trm.train import main
from trm.training.config import (
    SCHEMA_KEYS,
    SECTIONS,
    CheckpointConfig,
    as_dict,
    compose,
    config_hash,
    fill_run_defaults,
    from_dict,
    help_text,
    normalize_overrides,
)

# The published training commands (ARC-AGI-2/1 runs, smokes, a resume), with the entry point swapped: only the
# overrides matter.
GUIDE_COMMANDS = [
    """arch=trm data_paths="[/workspace/data/arc2concept-aug-1000]" arch.L_layers=2 arch.H_cycles=3
    arch.L_cycles=4 +run_name=pretrain_att_arc2concept ema=True +checkpoint_path=/workspace/checkpoints/r1""",
    """arch=trm data_paths="[/workspace/data/arc2concept-aug-100]" epochs=1 eval_interval=1 arch.L_layers=2
    arch.H_cycles=3 arch.L_cycles=4 arch.forward_dtype=bfloat16 evaluators='[{name: arc@ARC}]'
    +run_name=smoke_h200 +checkpoint_path=/workspace/checkpoints/smoke_h200""",
    """arch=trm data_paths="[/workspace/data/arc2concept-aug-100]" epochs=1 eval_interval=1
    arch.hidden_size=64 arch.num_heads=4 arch.L_layers=1 arch.H_cycles=1 arch.L_cycles=1
    arch.puzzle_emb_ndim=0 arch.puzzle_emb_len=0 arch.forward_dtype=float32 evaluators='[{name: arc@ARC}]'
    +run_name=smoke_local +checkpoint_path=/workspace/checkpoints/smoke_local""",
    """arch=trm data_paths="[/workspace/data/arc2concept-aug-1000]"
    load_checkpoint=/workspace/checkpoints/trm_arc2_run1/step_100 +checkpoint_path=/workspace/checkpoints/r""",
    """arch=trm data_paths="[/workspace/data/arc1concept-aug-1000]" evaluators='[{name: arc@ARC}]'
    +checkpoint_path=/workspace/checkpoints/trm_arc2_run1""",
]


@pytest.mark.parametrize("command", GUIDE_COMMANDS)
def test_guide_commands_parse(command: str) -> None:
    cfg = compose(shlex.split(command))
    assert cfg.checkpoint_path.startswith("/workspace/checkpoints/")
    assert cfg.data_paths[0].startswith("/workspace/data/arc")


def test_upstream_defaults() -> None:
    cfg = compose([])
    assert (cfg.global_batch_size, cfg.epochs, cfg.eval_interval, cfg.lr, cfg.lr_warmup_steps) == (
        768,
        100000,
        10000,
        1e-4,
        2000,
    )
    assert (cfg.beta1, cfg.beta2, cfg.weight_decay, cfg.puzzle_emb_lr, cfg.ema, cfg.ema_rate) == (
        0.9,
        0.95,
        0.1,
        1e-2,
        False,
        0.999,
    )
    a = cfg.arch
    assert (a.H_cycles, a.L_cycles, a.L_layers, a.hidden_size, a.num_heads, a.puzzle_emb_ndim) == (
        3,
        6,
        2,
        512,
        8,
        512,
    )
    assert cfg.evaluators == [{"name": "arc@ARC"}]


SPECIAL_VALUES = {
    "arch": "trm",
    "compile_mode": "max-autotune",
    "data_paths": "[x]",
    "data_paths_test": "[y]",
    "evaluators": "[]",
    "eval_save_outputs": "[preds]",
    "epochs": "20000",
    "eval_interval": "10000",
    "arch.name": "trm",
    "arch.loss.name": "losses@ACTLossHead",
    "arch.loss.loss_type": "softmax_cross_entropy",
    "arch.pos_encodings": "learned",
    "arch.forward_dtype": "float32",
    "arch.num_heads": "4",
    "arch.hidden_size": "256",
    "arch.puzzle_emb_len": "16",
    "arch.puzzle_emb_ndim": "16",
    "compile": "false",
    "device": "cpu",
    "wandb": "false",
    "micro_batch_size": "1",
    "depth_curriculum.stages": "3",
}


def every_key_overrides() -> list[str]:
    """One non-default value for every schema key (values chosen to pass validation together)."""
    out = []
    for key in SCHEMA_KEYS:
        if key == "arch.loss" or key in SECTIONS:  # sections: their keys are set one by one
            continue
        value = SPECIAL_VALUES.get(key)
        if value is None:
            kind = SCHEMA_KEYS[key]
            value = "true" if "bool" in kind else "7" if "int" in kind else "0.5" if "float" in kind else "x"
        out.append(f"{key}={value}")
    return out


def test_plus_and_plain_forms_agree_for_every_key() -> None:
    plain = every_key_overrides()
    cfg = compose(plain)
    assert cfg == compose(["+" + o for o in plain])
    assert cfg != compose([])
    assert cfg.arch.rms_norm_eps == 0.5 and cfg.ema is True and cfg.run_name == "x"


def test_unknown_key_names_the_closest_one() -> None:
    with pytest.raises(TRMError, match=r"Did you mean 'arch\.hidden_size'"):
        compose(["arch.hiden_size=64"])
    with pytest.raises(TRMError, match="Did you mean 'checkpoint_path'"):
        compose(["+checkpoint_pth=/x"])


def test_bad_values_are_config_errors() -> None:
    with pytest.raises(TRMError, match="global_batch_size"):
        compose(["global_batch_size=abc"])
    with pytest.raises(TRMError, match="eval_interval=3 must divide epochs=10"):
        compose(["epochs=10", "eval_interval=3"])
    with pytest.raises(TRMError, match=r"unknown architecture 'tmr'.*Did you mean 'trm'"):
        compose(["arch=tmr"])
    with pytest.raises(TRMError, match="puzzle_emb_len=0"):
        compose(["arch.puzzle_emb_ndim=0"])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        # Before: NaN passed every `< 0` check (and Hydra parses nan/inf as floats), so a NaN learning rate or
        # watchdog allowance started training.
        ("lr=nan", r"^lr=nan is not a finite number"),
        ("watchdog.timeout_minutes=inf", r"^watchdog\.timeout_minutes=inf is not a finite number"),
        ("checkpoint.every_minutes=nan", r"^checkpoint\.every_minutes=nan is not a finite number"),
        ("ema_rate=-inf", r"^ema_rate=-inf is not a finite number"),
        ("lr=-1e-4", r"^lr=-0\.0001 is out of range: it must be >= 0\."),
        ("beta2=1.0", r"^beta2=1\.0 is out of range: it must be >= 0 and < 1\."),
        ("lr_min_ratio=2", r"^lr_min_ratio=2\.0 is out of range: it must be >= 0 and <= 1\."),
    ],
)
def test_numbers_reject_nan_infinity_and_out_of_range(override: str, message: str) -> None:
    with pytest.raises(TRMError, match=message):
        compose([override])


def test_disable_compile_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISABLE_COMPILE", "1")
    assert compose([]).compile == "false"
    assert compose(["compile=true"]).compile == "true"


def test_compile_mode_reaches_torch_compile_and_leaves_the_run_name_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch

    from trm.training.builder import compiled_if_wanted

    with pytest.raises(
        TRMError, match=r"^compile_mode='fast': use one of default, max-autotune-no-cudagraphs"
    ):
        compose(["compile_mode=fast"])
    calls = []
    monkeypatch.setattr(torch, "compile", lambda module, **kwargs: calls.append(kwargs) or module)
    head = torch.nn.Identity()
    for mode in ("default", "max-autotune-no-cudagraphs"):
        cfg = compose(["compile=true", f"compile_mode={mode}"])
        assert compiled_if_wanted(cfg, torch.device("cpu"), head) is head
    assert calls == [{"mode": None}, {"mode": "max-autotune-no-cudagraphs"}]
    eager = compose(["compile=false", "compile_mode=max-autotune"])
    assert compiled_if_wanted(eager, torch.device("cpu"), head) is head and len(calls) == 2
    assert config_hash(compose(["compile_mode=max-autotune"])) == config_hash(compose([]))


def test_run_name_is_deterministic_and_tracks_the_math() -> None:
    a, b = compose(["lr=1e-3"]), compose(["+lr=1e-3", "micro_batch_size=8"])
    fill_run_defaults(a)
    fill_run_defaults(b)
    assert a.run_name == b.run_name and a.checkpoint_path == b.checkpoint_path
    assert config_hash(a) != config_hash(compose(["lr=2e-3"]))
    assert a.project_name == "Arc-aug-1000-ACT-torch"


def test_cli_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["emaa=True"]) == 2
    assert "Did you mean 'ema'" in capsys.readouterr().err
    assert main(["--help"]) == 0
    assert "arch.L_cycles" in capsys.readouterr().out
    assert main(["--cfg", "+ema=True"]) == 0
    assert "ema: true" in capsys.readouterr().out


# URM's scripts (scripts/URM_*.sh of its repository), with only the entry point changed.
URM_COMMANDS = [
    """data_path=data/arc1concept-aug-1000 arch=urm arch.loops=16 arch.H_cycles=2 arch.L_cycles=6
    arch.num_layers=4 epochs=200000 eval_interval=2000 puzzle_emb_lr=1e-2 weight_decay=0.1
    +run_name=URM-arcagi1 +checkpoint_path=checkpoints/URM-arcagi1 +ema=True""",
    """data_path=data/arc2concept-aug-1000 arch=urm arch.loops=16 arch.H_cycles=2 arch.L_cycles=6
    arch.num_layers=4 epochs=200000 eval_interval=2000 puzzle_emb_lr=1e-2 weight_decay=0.1 use_muon=True
    +run_name=URM-arcagi2 +checkpoint_path=checkpoints/URM-arcagi2 +ema=True""",
    """data_path=PATH_TO_SUDOKU arch=urm arch.loops=16 arch.H_cycles=2 arch.L_cycles=6 arch.num_layers=4
    epochs=50000 eval_interval=2000 lr=1e-4 puzzle_emb_lr=1e-4 weight_decay=1.0 puzzle_emb_weight_decay=1.0
    global_batch_size=128 +run_name=URM-sudoku +checkpoint_path=checkpoints/URM-sudoku +ema=True""",
]


@pytest.mark.parametrize("command", URM_COMMANDS)
def test_urm_scripts_parse(command: str) -> None:
    cfg = compose(shlex.split(command))
    a = cfg.arch
    assert type(a).__name__ == "URMArch" and a.name == "urm.urm@URM"
    assert (a.loops, a.H_cycles, a.L_cycles, a.num_layers, a.hidden_size, a.puzzle_emb_ndim) == (
        16,
        2,
        6,
        4,
        512,
        512,
    )
    assert len(cfg.data_paths) == 1 and cfg.ema is True and cfg.run_name.startswith("URM-")
    assert cfg.use_muon is ("arcagi2" in command)


def test_urm_defaults_and_its_own_keys() -> None:
    a = compose(["arch=urm"]).arch
    assert (a.loops, a.H_cycles, a.L_cycles, a.num_layers, a.expansion, a.conv_kernel) == (
        16,
        4,
        3,
        8,
        4.0,
        2,
    )
    with pytest.raises(TRMError, match=r"Did you mean 'arch\.num_layers'.*arch=urm"):
        compose(["arch=urm", "arch.num_layer=4"])
    with pytest.raises(TRMError, match=r"arch\.L_layers.*arch=urm"):  # a TRM key is not a URM key
        compose(["arch=urm", "arch.L_layers=2"])
    with pytest.raises(TRMError, match="names another architecture"):
        compose(["arch=urm", "arch.name=trm"])


def test_help_lists_the_selected_architectures_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["arch=urm", "--help"]) == 0
    text = capsys.readouterr().out
    assert "arch.loops = 16" in text and "ConvSwiGLU" in text and "arch.L_layers" not in text
    assert main(["--help"]) == 0
    assert "arch.L_layers = 2" in capsys.readouterr().out


OLD_KEYS = [
    "checkpoint_every_minutes=5", "+checkpoint_every_steps=7", "checkpoint_every_eval=false", "checkpoint_keep=3",
    "++checkpoint_keep_best=0", "checkpoint_best_metric=ARC/pass@1", "async_checkpoint=false",
    "+hang_timeout_minutes=2", "hang_first_step_minutes=90", "hang_eval_minutes=1",
]  # fmt: skip
NEW_KEYS = [
    "checkpoint.every_minutes=5", "checkpoint.every_steps=7", "checkpoint.every_eval=false", "checkpoint.keep=3",
    "checkpoint.keep_best=0", "checkpoint.best_metric=ARC/pass@1", "checkpoint.asynchronous=false",
    "watchdog.timeout_minutes=2", "watchdog.first_step_minutes=90", "watchdog.eval_minutes=1",
]  # fmt: skip


def test_old_flat_keys_mean_the_nested_ones_with_a_pointer(caplog: pytest.LogCaptureFixture) -> None:
    old, new = compose(OLD_KEYS), compose(NEW_KEYS)
    assert as_dict(old) == as_dict(new)
    assert new.checkpoint.keep == 3 and new.checkpoint.asynchronous is False
    assert new.watchdog.first_step_minutes == 90
    fill_run_defaults(old)
    fill_run_defaults(new)
    assert old.run_name == new.run_name == compose_named([])  # run-only: the run name does not move
    pointers = [r.getMessage() for r in caplog.records if "the old key still works" in r.getMessage()]
    assert len(pointers) == len(OLD_KEYS)
    assert "checkpoint_keep is now checkpoint.keep" in "\n".join(pointers)
    assert "hang_timeout_minutes is now watchdog.timeout_minutes" in "\n".join(pointers)


def compose_named(overrides: list[str]) -> str:
    cfg = compose(overrides)
    fill_run_defaults(cfg)
    assert cfg.run_name is not None
    return cfg.run_name


def test_a_stored_config_with_flat_keys_loads_into_the_sections() -> None:
    stored = as_dict(compose(NEW_KEYS))
    flat = {k: v for k, v in stored.items() if k not in ("checkpoint", "watchdog")}
    flat.update(checkpoint_keep=3, checkpoint_every_steps=7, hang_eval_minutes=1.0, async_checkpoint=False)
    old = from_dict(flat)
    assert old.checkpoint == CheckpointConfig(keep=3, every_steps=7, asynchronous=False)
    assert old.watchdog.eval_minutes == 1.0 and old.watchdog.timeout_minutes == 15.0
    assert as_dict(from_dict(stored)) == stored
    assert config_hash(old) == config_hash(from_dict(stored))


def test_nested_keys_are_checked_and_listed() -> None:
    with pytest.raises(TRMError, match=r"checkpoint\.keep=-1 must be ≥ 0"):
        compose(["checkpoint_keep=-1"])
    with pytest.raises(TRMError, match=r"Did you mean 'checkpoint\.keep'"):
        compose(["checkpoint.kep=1"])
    text = help_text()
    assert "checkpoint.keep = 2    # Keep the newest k rolling" in text
    assert "watchdog.timeout_minutes = 15.0" in text and "checkpoint_keep is checkpoint.keep" in text


@pytest.mark.parametrize(
    ("override", "fix"),
    [
        ("eval_subset.fraction=0", "(0, 1]"),
        ("eval_subset.fraction=1.5", "(0, 1]"),
        ("eval_subset.fraction=nan", "not a finite number"),  # the check every float key gets comes first
        ("eval_subset.fraction=-0.1", "(0, 1]"),
        ("eval_subset.full_every=-1", "≥ 0"),
        ("best.top_k=-2", "≥ 0"),
    ],
)
def test_subset_keys_reject_bad_values_in_one_line(override: str, fix: str) -> None:
    with pytest.raises(TRMError) as err:
        compose([override])
    message = str(err.value)
    assert message.startswith(override) and "\n" not in message
    assert fix in message


def test_subset_keys_default_to_full_evaluations_and_leave_run_names_alone() -> None:
    from trm.training.config import is_full_evaluation, ranking_metric, subset_on

    plain = compose([])
    assert (plain.eval_subset.fraction, plain.eval_subset.seed, plain.eval_subset.full_every) == (1.0, 0, 0)
    assert plain.best.top_k == 0 and not subset_on(plain) and ranking_metric(plain) == "ARC/pass@2"
    assert all(is_full_evaluation(plain, n) for n in range(1, 5))
    cheap = compose(["eval_subset.fraction=0.1", "eval_subset.full_every=3", "+best.top_k=4"])
    assert config_hash(cheap) == config_hash(plain)  # evaluation only: not part of the math
    assert [is_full_evaluation(cheap, n) for n in range(1, 7)] == [False, False, True, False, False, True]
    assert ranking_metric(cheap) == "subset/ARC/this_eval/pass@2"  # each checkpoint's own votes
    grid = compose(["evaluators=[]", "eval_subset.fraction=0.5"])
    assert ranking_metric(grid) == "subset/eval/all/exact_accuracy"
    assert from_dict(as_dict(cheap)) == cheap
    assert "eval_subset.fraction = 1.0" in help_text() and "best.top_k = 0" in help_text()
    assert SECTIONS["eval_subset"] is type(cheap.eval_subset)


def test_evaluation_work_counts_subset_full_and_top_k_evaluations() -> None:
    from trm.training.config import evaluation_work

    assert evaluation_work(compose([]), 125) == 125.0  # today: every evaluation full
    cheap = compose(["eval_subset.fraction=0.1", "best.top_k=3"])
    assert evaluation_work(cheap, 125) == pytest.approx(12.5 + 3)
    every = compose(["eval_subset.fraction=0.1", "eval_subset.full_every=25", "best.top_k=3"])
    assert evaluation_work(every, 125) == pytest.approx(12.5 + 5 + 3)
    assert evaluation_work(cheap, 2) == pytest.approx(0.2 + 2)  # no more candidates than evaluations


# Token-shaped values built at run time (literal ones would trip the repository's secret scan).
WANDB_LIKE = "".join("0123456789abcdef"[(7 * i) % 16] for i in range(40))
LETTERS = "".join(chr(ord("a") + (7 * i) % 26) for i in range(34))


@pytest.mark.parametrize(
    "override",
    [
        f"+wandb_key={WANDB_LIKE}",  # unknown key: its error echoed the value
        "+api_token=s3cr3t-value-123",
        f"project_name=hf_{LETTERS}",  # known key: recorded everywhere
    ],
)
def test_a_secret_in_an_override_is_refused_without_showing_it(override: str) -> None:
    key, value = override.lstrip("+").split("=", 1)
    with pytest.raises(TRMError, match=f"override of '{key}' holds a secret-like value") as err:
        compose([override])
    assert value not in str(err.value) and "WANDB_API_KEY" in str(err.value)


def test_a_hub_reference_pinned_to_a_commit_is_no_secret() -> None:
    """A key word in a repository's name and a 40-hex commit: a reference, not a W&B key."""
    ref = f"hf://an-org/trm-tokenizer-run@{WANDB_LIKE}"
    overrides = [f"load_checkpoint={ref}", f"+run_name=auth-sweep-{WANDB_LIKE}"]
    assert [o.lstrip("+") for o in normalize_overrides(overrides)] == [o.lstrip("+") for o in overrides]


def test_a_list_indexed_by_a_name_is_a_config_error_not_a_traceback() -> None:
    with pytest.raises(TRMError, match=r"bad configuration: .*'foo'.*indexed by number"):
        compose(["evaluators.foo=bar"])
