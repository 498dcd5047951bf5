"""`python -m trm.train` on a CUDA GPU, as users run it: bf16 forward, compile=auto, evaluation, SIGTERM, resume."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.e2e.test_train import ROOT, TINY, build_dataset, env, final_state, rows, sigterm_after_step_2
from trm.evaluation.voting import validate_submission

pytestmark = pytest.mark.gpu

# The CPU e2e tiny run, minus its CPU choices: forward dtype auto (bf16 on CUDA) and compile left to auto.
GPU_TINY = [o for o in TINY if not o.startswith("arch.forward_dtype=")] + ["arch.forward_dtype=auto"]


def gpu_env() -> dict[str, str]:
    e = env()
    e.pop("DISABLE_COMPILE")
    return e


def gpu_cmd(dataset: Path, run_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "trm.train", *GPU_TINY, f"data_paths=[{dataset}]",
            f"+checkpoint_path={run_dir}", *extra]  # fmt: skip


def run(dataset: Path, run_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = gpu_cmd(dataset, run_dir, *extra)
    return subprocess.run(cmd, env=gpu_env(), cwd=ROOT, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("data") / "arc-tiny"
    build_dataset(out, max_puzzles=2)
    return out


def test_cuda_run_is_bf16_compiled_evaluates_and_resumes_to_the_same_end(
    dataset: Path, tmp_path: Path
) -> None:
    extra = ("epochs=4", "eval_interval=2")
    straight = run(dataset, tmp_path / "straight", *extra)
    assert straight.returncode == 0, straight.stderr[-3000:]
    info = json.loads((tmp_path / "straight" / "run.json").read_text())
    assert info["device"].startswith("cuda")
    state = final_state(tmp_path / "straight")
    # Parameters are fp32 master weights whatever the forward dtype; the H_init/L_init buffers are stored
    # in the forward dtype (bf16 here), as upstream stores them, so checkpoints convert both ways unchanged.
    floating = {k: v.dtype for k, v in state["model"].items() if v.is_floating_point()}
    inits = {k for k in floating if k.rsplit(".", 1)[-1] in ("H_init", "L_init")}
    assert len(inits) == 2, sorted(floating)
    assert {floating[k] for k in inits} == {torch.bfloat16}
    assert {d for k, d in floating.items() if k not in inits} == {torch.float32}
    assert all(torch.isfinite(v).all() for v in state["model"].values() if v.is_floating_point())
    losses = [r["train/lm_loss"] for r in rows(tmp_path / "straight") if "train/lm_loss" in r]
    assert losses and all(math.isfinite(x) for x in losses)
    test_puzzles = json.loads((dataset / "test_puzzles.json").read_text())
    subs = sorted((tmp_path / "straight").glob("evaluator_ARC_step_*/submission.json"))
    assert len(subs) == 2
    validate_submission(json.loads(subs[-1].read_text()), test_puzzles)

    # SIGTERM mid-run (saved, exit 75), then the same command finishes the run.
    split = tmp_path / "split"
    sigterm_after_step_2(dataset, split, cmd=gpu_cmd(dataset, split, *extra), environ=gpu_env())
    resumed = run(dataset, split, *extra)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stderr
    a, b = final_state(tmp_path / "straight"), final_state(tmp_path / "split")
    assert a["progress"] == b["progress"]
    for key in a["model"]:  # bf16 kernels need not be bit-deterministic across processes
        torch.testing.assert_close(a["model"][key], b["model"][key], rtol=2e-2, atol=2e-3)


def adam_extension_expected() -> str:
    """The AdamATan2 backend a CUDA run must use here: "ext" when the compiled extension imports (or the
    check was asked to require it: TRM_REQUIRE_ADAM_EXT=1), else our torch implementation."""
    if os.environ.get("TRM_REQUIRE_ADAM_EXT") == "1":
        return "ext"
    try:
        import adam_atan2  # noqa: F401
    except ImportError:
        return "torch"
    return "ext"


def test_cuda_training_really_compiles_and_uses_the_expected_optimizer_backend(tmp_path: Path) -> None:
    from torch._dynamo.eval_frame import OptimizedModule
    from torch._dynamo.utils import counters

    from tests.training.test_trainer_inprocess import make_trainer
    from trm.distributed import DistInfo

    torch._dynamo.reset()
    counters.clear()
    cuda = DistInfo(device=torch.device("cuda"))
    trainer = make_trainer(tmp_path / "run", "compile=auto", "arch.forward_dtype=auto", info=cuda)
    try:
        assert isinstance(trainer.components.step_module, OptimizedModule), "compile=auto did not compile"
        assert trainer.train() == 0
    finally:
        trainer.close()
    # Dynamo traced the step and Inductor compiled it (not an eager fallback after a failed compile).
    assert counters["stats"]["unique_graphs"] >= 1, dict(counters["stats"])
    assert sum(counters["inductor"].values()) > 0, dict(counters["inductor"])
    (adam,) = [o.optimizer for o in trainer.components.optimizers if o.name == "adam_atan2"]
    expected = adam_extension_expected()
    assert adam.trm_backend == expected


def test_evaluation_only_run_on_cuda_matches_the_in_training_evaluation(
    dataset: Path, tmp_path: Path
) -> None:
    from trm.training.checkpointing import layout as ckpt

    trained = run(dataset, tmp_path / "run", "epochs=2", "eval_interval=2")
    assert trained.returncode == 0, trained.stderr[-3000:]
    newest = ckpt.find_complete(tmp_path / "run")[-1]
    out = tmp_path / "eval"
    evaluated = subprocess.run(
        [sys.executable, "-m", "trm.eval", str(newest.path), "--output-dir", str(out)],
        env=gpu_env(), cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    metrics = json.loads((out / f"evaluator_ARC_step_{newest.step}" / "metrics.json").read_text())
    in_training = [r for r in rows(tmp_path / "run") if "ARC/pass@2" in r][-1]
    assert metrics["ARC/pass@2"] == in_training["ARC/pass@2"]
    # bf16 on the same GPU and weights: the loss agrees closely (kernels may differ between processes).
    assert metrics["eval/all/lm_loss"] == pytest.approx(in_training["eval/all/lm_loss"], rel=1e-2)
    test_puzzles = json.loads((dataset / "test_puzzles.json").read_text())
    submission = out / f"evaluator_ARC_step_{newest.step}" / "submission.json"
    validate_submission(json.loads(submission.read_text()), test_puzzles)
