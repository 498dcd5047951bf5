"""Every registered architecture through the same commands as TRM, on CPU at tiny sizes: train, SIGTERM and
resume bit-exactly, evaluate with `python -m trm.eval`, package for Kaggle and infer; a reference-format
weight file of the architecture loads through `load_checkpoint=` and packages too."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest
import torch

from tests.e2e.test_train import (
    assert_states_equal,
    build_dataset,
    final_state,
    in_process,
    rows,
    sigterm_after_step_2,
)
from trm.evaluation.voting import validate_submission
from trm.kaggle import bundle as B
from trm.kaggle.infer import run_inference
from trm.kaggle.package import package_kaggle
from trm.model.registry import ARCHS
from trm.model.upstream import to_upstream_state_dict
from trm.training.checkpointing import layout as ckpt

# End to end: out of the default `make test`, run by `make test-e2e` (CI runs both).
pytestmark = pytest.mark.e2e

RUN = [
    "global_batch_size=2",
    "lr=1e-3",
    "lr_warmup_steps=2",
    "+log_interval=1",
    "epochs=4",
    "eval_interval=2",
]
# Tiny settings per architecture, written as its users write them (URM's scripts: data_path=, +ema=True).
TINY = {
    "trm": [
        "arch=trm",
        *("arch.hidden_size=16", "arch.num_heads=2", "arch.L_layers=1", "arch.H_cycles=2", "arch.L_cycles=1"),
        *("arch.halt_max_steps=2", "arch.puzzle_emb_ndim=8", "+arch.puzzle_emb_len=1", "ema=True"),
    ],
    **{
        ablation: [
            f"arch={ablation}",
            *(
                "arch.hidden_size=16",
                "arch.num_heads=2",
                "arch.L_layers=1",
                "arch.H_cycles=2",
                "arch.L_cycles=2",
            ),
            *("arch.halt_max_steps=2", "arch.puzzle_emb_ndim=8", "arch.puzzle_emb_len=1", "ema=True"),
        ]
        for ablation in ("trm_singlez", "trm_hier6")
    },
    "hrm": [
        "arch=hrm",
        *("arch.hidden_size=16", "arch.num_heads=2", "arch.H_layers=1", "arch.L_layers=1", "arch.H_cycles=2"),
        *("arch.L_cycles=1", "arch.halt_max_steps=2", "arch.puzzle_emb_ndim=8", "ema=True"),
    ],
    "transformers_baseline": [
        "arch=transformers_baseline",
        *("arch.hidden_size=16", "arch.num_heads=2", "arch.H_layers=1", "arch.halt_max_steps=2"),
        *("arch.puzzle_emb_ndim=8", "ema=True"),
    ],
    "urm": [
        "arch=urm",
        *(
            "arch.hidden_size=16",
            "arch.num_heads=2",
            "arch.num_layers=1",
            "arch.H_cycles=2",
            "arch.L_cycles=2",
        ),
        *("arch.loops=2", "arch.puzzle_emb_ndim=8", "+ema=True", "puzzle_emb_lr=1e-4", "weight_decay=0.1"),
    ],
}


# Extra cases: (architecture, overrides added to its tiny settings).
VARIANTS = {"urm-muon": ("urm", ["use_muon=True"])}  # URM's ARC-AGI-2 recipe


def test_every_architecture_has_an_end_to_end_case() -> None:
    assert set(TINY) == set(ARCHS)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("data") / "arc-tiny"
    build_dataset(out, max_puzzles=2)
    return out


CASES = {**{a: (a, []) for a in sorted(ARCHS)}, **VARIANTS}


def command(case: str, dataset: Path, run_dir: Path, *extra: str) -> list[str]:
    arch, variant = CASES[case]
    data = f"data_path={dataset}" if arch == "urm" else f"data_paths=[{dataset}]"
    return [
        *(sys.executable, "-m", "trm.train", *TINY[arch], *variant, *RUN, data),
        *(f"+checkpoint_path={run_dir}", *extra),
    ]


def train_and_resume(case: str, dataset: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> dict:
    """Train `case` straight, and again stopped by SIGTERM (its own process) and resumed: the same final state
    and metrics. Returns the straight run's final state."""
    arch, variant = CASES[case]
    assert in_process(command(case, dataset, tmp_path / "straight")) == 0
    state = final_state(tmp_path / "straight")
    assert state["config"]["arch"]["name"] == ARCHS[arch].model_id
    assert set(state["optimizers"]) == {"puzzle_emb", "muon" if "use_muon=True" in variant else "adam_atan2"}

    split = tmp_path / "split"
    sigterm_after_step_2(dataset, split, cmd=command(case, dataset, split))
    stopped_at = ckpt.find_complete(split)[-1].step
    assert stopped_at < state["progress"]["step"]
    caplog.set_level(logging.INFO)
    assert in_process(command(case, dataset, split)) == 0
    assert f"resumed from {split / f'step_{stopped_at}'}" in caplog.text
    assert_states_equal(state, final_state(split))
    assert rows(tmp_path / "straight") == rows(split)
    return state


@pytest.mark.parametrize("case", sorted(VARIANTS))
def test_variant_trains_and_resumes_bit_exactly(
    case: str, dataset: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A variant changes training (here the optimizer), not the architecture's evaluation, packaging or
    # weight names, which its architecture's case below covers.
    train_and_resume(case, dataset, tmp_path, caplog)


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_train_resume_evaluate_package(
    arch: str,
    dataset: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    state = train_and_resume(arch, dataset, tmp_path, caplog)

    # Standalone evaluation reproduces the in-training one (EMA weights).
    newest = ckpt.find_complete(tmp_path / "straight")[-1]
    evaluate = [sys.executable, "-m", "trm.eval", str(newest.path), "--output-dir", str(tmp_path / "ev")]
    assert in_process(evaluate) == 0
    metrics = json.loads((tmp_path / "ev" / f"evaluator_ARC_step_{newest.step}" / "metrics.json").read_text())
    trained = [r for r in rows(tmp_path / "straight") if "ARC/pass@2" in r][-1]
    assert metrics["ARC/pass@2"] == trained["ARC/pass@2"]
    assert metrics["eval/all/lm_loss"] == pytest.approx(trained["eval/all/lm_loss"], rel=1e-6)
    if arch == "urm":  # the reference's loop extrapolation: a second pass with loops + 8 ACT steps
        assert "loops+8/ARC/pass@2" in trained and "loops+8/ARC/pass@2" in metrics
        assert metrics["loops+8/eval/all/steps"] == metrics["eval/all/steps"] + 8
        loops8 = tmp_path / "ev" / "loops+8" / f"evaluator_ARC_step_{newest.step}" / "submission.json"
        assert loops8.is_file()

    # Kaggle bundle of the checkpoint, then offline inference on two shipped evaluation tasks.
    bundle = tmp_path / "bundle"
    package_kaggle(newest.path, bundle, wheels=False, progress=False)
    config = B.read_config(bundle)
    assert config["arch_name"] == arch
    test_puzzles = json.loads((dataset / "test_puzzles.json").read_text())
    tasks = sorted(test_puzzles)[:2]
    challenges = tmp_path / "challenges.json"
    challenges.write_text(json.dumps({t: test_puzzles[t] for t in tasks}))
    run_inference(bundle, challenges, tmp_path / "sub.json", num_aug=2, device="cpu", progress=False)
    validate_submission(json.loads((tmp_path / "sub.json").read_text()), {t: test_puzzles[t] for t in tasks})

    # The same weights as the reference trainer would write them (compiled names) load and package.
    weights = {k: v for k, v in state["model"].items()}
    reference_file = tmp_path / "step_9"
    torch.save(to_upstream_state_dict(weights, compiled=True, arch=arch), reference_file)
    caplog.set_level(logging.INFO)
    warm = command(arch, dataset, tmp_path / "warm", f"load_checkpoint={reference_file}", "epochs=2")
    assert in_process(warm) == 0
    assert "upstream weights" in caplog.text or f"reference {arch} weights" in caplog.text
    overrides = [o for o in TINY[arch] if o.lstrip("+").startswith("arch")]
    package_kaggle(reference_file, tmp_path / "ref-bundle", overrides=overrides, wheels=False, progress=False)
    shipped = torch.load(tmp_path / "ref-bundle" / B.WEIGHTS, weights_only=True)
    for key, value in weights.items():
        if "puzzle_emb" not in key:  # the table gains the mean row for unseen tasks
            assert torch.equal(shipped[key], value), key
    other = "urm" if arch == "trm" else "trm"
    capsys.readouterr()
    wrong = command(other, dataset, tmp_path / "wrong", f"load_checkpoint={reference_file}")
    assert in_process(wrong) == 2 and f"pass arch={arch}" in capsys.readouterr().err
