"""End-to-end runs of `python -m trm.train` on a tiny built ARC set: real signals, kills and torchrun."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.helpers import without_timings
from tools import checkout_env
from trm import exit_codes
from trm.evaluation.voting import validate_submission
from trm.training.checkpointing import layout as ckpt
from trm.training.recipes import get_recipe

# End to end: out of the default `make test`, run by `make test-e2e` (CI runs both).
pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
# The debug-tiny recipe at batch 2 with a metrics row per step; tests add the epochs they need.
TINY = [
    *get_recipe("debug-tiny").with_changes(global_batch_size=2, lr_warmup_steps=2, log_interval=1).overrides
]


def env() -> dict[str, str]:
    """The trainer's environment: this checkout first on PYTHONPATH, what was there kept after it (the GPU
    check puts the adam-atan2 extension it built there, and its TRM_REQUIRE_ADAM_EXT passes through)."""
    e = dict(
        os.environ, DISABLE_COMPILE="1", OMP_NUM_THREADS="1", WANDB_MODE="disabled", PYTHONUNBUFFERED="1"
    )
    return checkout_env(e)


def build_dataset(out: Path, *, max_puzzles: int) -> None:
    """A tiny ARC-AGI-1 set (the first `max_puzzles` tasks of training + evaluation, 1 augmentation)."""
    subprocess.run(
        [
            *(sys.executable, "-m", "trm", "data", "build-arc", "--output-dir", str(out)),
            *("--subsets", "training", "evaluation", "--test-set-name", "evaluation"),
            *("--num-aug", "1", "--max-puzzles", str(max_puzzles), "--quiet"),
        ],
        check=True,
        env=env(),
        cwd=ROOT,
        capture_output=True,
    )


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("data") / "arc-tiny"
    build_dataset(out, max_puzzles=2)
    return out


def train_cmd(dataset: Path, run_dir: Path, *extra: str, launcher: list[str] | None = None) -> list[str]:
    head = launcher or [sys.executable, "-m", "trm.train"]
    return [*head, *TINY, f"data_paths=[{dataset}]", f"+checkpoint_path={run_dir}", *extra]


def train(dataset: Path, run_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        train_cmd(dataset, run_dir, *extra), env=env(), cwd=ROOT, capture_output=True, text=True
    )


def in_process(cmd: list[str]) -> int:
    """`python -m trm.train|trm.eval ARGS` through the module's main() in this process: the same entry point
    and exit code without another interpreter's start (torch's import, about half of a tiny run's time), in
    the subprocess's settings (`env()`'s variables: eager, no W&B; its one CPU thread, so the same kernels'
    sums: its results equal a subprocess's bit for bit). For the reference runs a test compares with; the
    run under test keeps a process of its own."""
    from trm import eval as trm_eval
    from trm import train as trm_train

    module = {"trm.train": trm_train, "trm.eval": trm_eval}[cmd[cmd.index("-m") + 1]]
    settings = {k: env()[k] for k in ("DISABLE_COMPILE", "OMP_NUM_THREADS", "WANDB_MODE")}
    saved_env = {k: os.environ.get(k) for k in settings}
    threads = torch.get_num_threads()
    os.environ.update(settings)
    torch.set_num_threads(int(settings["OMP_NUM_THREADS"]))
    try:
        return module.main(cmd[cmd.index("-m") + 2 :])
    finally:
        torch.set_num_threads(threads)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def train_here(dataset: Path, run_dir: Path, *extra: str) -> int:
    """`train`'s run in this process (`in_process`): a reference run; its exit code."""
    return in_process(train_cmd(dataset, run_dir, *extra))


TORCHRUN_TWO_RANKS = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]


def train_two_ranks(dataset: Path, run_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """`train`'s run under torchrun with two gloo ranks on this host (its own processes); its result."""
    return subprocess.run(
        train_cmd(dataset, run_dir, *extra, launcher=[*TORCHRUN_TWO_RANKS, "-m", "trm.train"]),
        env=env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
    )


def final_state(run_dir: Path) -> dict:
    newest = ckpt.find_complete(run_dir)[-1]
    return ckpt.load_torch(newest.path / ckpt.STATE)


def assert_states_equal(a: dict, b: dict, exact: bool = True) -> None:
    assert a["progress"] == b["progress"]
    for key in a["model"]:
        if exact:
            assert torch.equal(a["model"][key], b["model"][key]), key
        else:
            torch.testing.assert_close(a["model"][key], b["model"][key], rtol=1e-4, atol=1e-5)
    for name, opt in a["optimizers"].items():
        for pid, st in opt["state"].items():
            for field, value in st.items():
                other = b["optimizers"][name]["state"][pid][field]
                if exact:
                    assert torch.equal(torch.as_tensor(value), torch.as_tensor(other)), (name, field)
                else:
                    torch.testing.assert_close(
                        torch.as_tensor(value), torch.as_tensor(other), rtol=1e-4, atol=1e-5
                    )


def rows(run_dir: Path) -> list[dict]:
    return [
        without_timings(json.loads(line)) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
    ]


def test_run_evaluates_and_writes_a_submission_for_every_test_input(dataset: Path, tmp_path: Path) -> None:
    # Per-evaluation votes (so the standalone evaluation below can reproduce them) and Kaggle's
    # complete submission form; the defaults are upstream's (pooled votes, upstream's file).
    arc = "evaluators=[{name: arc@ARC, aggregated_voting: false, submission_fallback: true}]"
    result = train(dataset, tmp_path / "run", "epochs=2", "eval_interval=1", arc)
    assert result.returncode == 0, result.stderr
    subs = sorted(tmp_path.glob("run/evaluator_ARC_step_*/submission.json"))
    assert len(subs) == 2
    test_puzzles = json.loads((dataset / "test_puzzles.json").read_text())
    validate_submission(json.loads(subs[-1].read_text()), test_puzzles)
    names = {r["name"] for r in _csv(tmp_path / "run" / "metrics.csv")}
    expected = {"train/lm_loss", "train/lr", "eval/all/exact_accuracy", "ARC/pass@2", "ARC/pass@1000"}
    assert expected | {"ARC/this_eval/pass@2"} <= names
    run_json = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run_json["world_size"] == 1 and run_json["config"]["ema"] is True
    manifest = json.loads((ckpt.find_complete(tmp_path / "run")[-1].path / "manifest.json").read_text())
    assert manifest["dataset_fingerprint"] and manifest["config_hash"] and "state.pt" in manifest["files"]

    # Standalone evaluation of the final checkpoint reproduces the in-training evaluation (EMA weights).
    newest = ckpt.find_complete(tmp_path / "run")[-1]
    out = tmp_path / "eval-out"
    result = subprocess.run(
        [sys.executable, "-m", "trm.eval", str(newest.path), "--output-dir", str(out)],
        env=env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    folder = out / f"evaluator_ARC_step_{newest.step}"
    metrics = json.loads((folder / "metrics.json").read_text())
    trained = [r for r in rows(tmp_path / "run") if "ARC/pass@2" in r][-1]
    assert metrics["ARC/pass@2"] == trained["ARC/pass@2"]
    assert metrics["eval/all/lm_loss"] == pytest.approx(trained["eval/all/lm_loss"], rel=1e-6)
    assert json.loads((folder / "submission.json").read_text()) == json.loads(subs[-1].read_text())


def _csv(path: Path) -> list[dict[str, str]]:
    import csv

    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_the_guides_cpu_smoke_command_runs_with_only_the_entry_point_changed(
    dataset: Path, tmp_path: Path
) -> None:
    # The published local CPU smoke command, verbatim except for the entry point and the two paths.
    command = (
        f"{sys.executable} -m trm.train arch=trm data_paths=[{dataset}] epochs=1 eval_interval=1 "
        "arch.hidden_size=64 arch.num_heads=4 arch.L_layers=1 arch.H_cycles=1 arch.L_cycles=1 "
        "arch.puzzle_emb_ndim=0 arch.puzzle_emb_len=0 arch.forward_dtype=float32 "
        f"evaluators='[{{name: arc@ARC}}]' +run_name=smoke_local +checkpoint_path={tmp_path / 'smoke_local'}"
    )
    result = subprocess.run(shlex.split(command), env=env(), cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert list((tmp_path / "smoke_local").glob("evaluator_ARC_step_*/submission.json"))
    assert ckpt.find_complete(tmp_path / "smoke_local")


def sigterm_after_step_2(
    dataset: Path, run_dir: Path, *extra: str, cmd: list[str] | None = None, environ: dict | None = None
) -> None:
    """Start a run (`cmd`, default the tiny CPU run), SIGTERM it once step 2 is logged; it saved and exited 75."""
    proc = subprocess.Popen(
        cmd or train_cmd(dataset, run_dir, *extra),
        env=environ or env(),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        metrics = run_dir / "metrics.jsonl"
        if metrics.exists() and any(json.loads(x)["step"] >= 2 for x in metrics.read_text().splitlines()):
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == exit_codes.SAVED_RETRY, err


def test_sigterm_saves_exits_75_and_the_same_command_resumes_bit_exactly(
    dataset: Path, tmp_path: Path
) -> None:
    extra = ("epochs=6", "eval_interval=3")
    assert train_here(dataset, tmp_path / "straight", *extra) == 0

    run_dir = tmp_path / "split"
    sigterm_after_step_2(dataset, run_dir, *extra)
    stopped_at = ckpt.find_complete(run_dir)[-1].step
    assert stopped_at < final_state(tmp_path / "straight")["progress"]["step"]

    resumed = train(dataset, run_dir, *extra)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from {run_dir / f'step_{stopped_at}'}" in resumed.stderr
    assert_states_equal(final_state(tmp_path / "straight"), final_state(run_dir))
    assert rows(tmp_path / "straight") == rows(run_dir)


# `python -m trm.train` that sends itself SIGTERM during its second evaluation, after the first test batch
# (a real signal through the trainer's handlers, at a known point of a short evaluation); under torchrun
# only rank 0 gets it, and the other rank must stop at the same batch.
SIGTERM_IN_SECOND_EVALUATION = (
    "import os, signal, sys\n"
    "import trm.evaluation.runner as r\n"
    "original, evaluations = r.evaluate, []\n"
    "def evaluate(*args, **kwargs):\n"
    "    evaluations.append(kwargs['step'])\n"
    "    asked, inner = [], kwargs['should_stop']\n"
    "    def should_stop():\n"
    "        asked.append(1)\n"
    "        if len(evaluations) == 2 and len(asked) == 2 and os.environ.get('RANK', '0') == '0':\n"
    "            os.kill(os.getpid(), signal.SIGTERM)\n"
    "        return inner()\n"
    "    return original(*args, **{**kwargs, 'should_stop': should_stop})\n"
    "r.evaluate = evaluate\n"
    "from trm.train import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def test_sigterm_during_an_evaluation_saves_without_it_and_the_resume_evaluates_again(
    dataset: Path, tmp_path: Path
) -> None:
    extra = ("epochs=3", "eval_interval=1")  # three evaluations; ARC votes pooled over them (the default)
    assert train_here(dataset, tmp_path / "straight", *extra) == 0
    evaluated = sorted({row["step"] for row in rows(tmp_path / "straight") if "ARC/pass@2" in row})
    assert len(evaluated) == 3

    run_dir = tmp_path / "split"
    cmd = train_cmd(dataset, run_dir, *extra, launcher=[sys.executable, "-c", SIGTERM_IN_SECOND_EVALUATION])
    stopped = subprocess.run(cmd, env=env(), cwd=ROOT, capture_output=True, text=True)
    assert stopped.returncode == exit_codes.SAVED_RETRY, stopped.stderr
    assert f"evaluation at step {evaluated[1]} stopped after 1 batch(es)" in stopped.stderr
    saved = final_state(run_dir)
    assert ckpt.find_complete(run_dir)[-1].step == evaluated[1]
    assert saved["progress"]["iteration"] == 1 and saved["progress"]["pass_done"]
    # Nothing of the partial evaluation: no metrics, no submission, only the first evaluation's votes.
    assert [row["step"] for row in rows(run_dir) if "ARC/pass@2" in row] == evaluated[:1]
    assert not (run_dir / f"evaluator_ARC_step_{evaluated[1]}").exists()
    first_only = sum(
        int(s[0]) for i in saved["evaluators"][0]["stats"].values() for p in i.values() for s in p.values()
    )
    pooled = final_state(tmp_path / "straight")["evaluators"][0]["stats"]
    assert first_only * 3 == sum(int(s[0]) for i in pooled.values() for p in i.values() for s in p.values())

    resumed = train(dataset, run_dir, *extra)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from {run_dir / f'step_{evaluated[1]}'}" in resumed.stderr
    assert_states_equal(final_state(tmp_path / "straight"), final_state(run_dir))
    assert final_state(run_dir)["evaluators"][0]["stats"] == pooled
    assert rows(tmp_path / "straight") == rows(run_dir)
    last = f"evaluator_ARC_step_{evaluated[-1]}/submission.json"
    assert (run_dir / last).read_text() == (tmp_path / "straight" / last).read_text()


@pytest.mark.dist
def test_sigterm_to_one_rank_during_an_evaluation_stops_every_rank_at_the_same_batch(
    dataset: Path, tmp_path: Path
) -> None:
    extra = ("epochs=3", "eval_interval=1")  # batch 2: one row per rank, several test batches
    assert train_here(dataset, tmp_path / "straight", *extra) == 0
    evaluated = sorted({row["step"] for row in rows(tmp_path / "straight") if "ARC/pass@2" in row})

    script = tmp_path / "train_sigterm_rank0.py"
    script.write_text(SIGTERM_IN_SECOND_EVALUATION)
    run_dir = tmp_path / "split"
    stopped = subprocess.run(
        train_cmd(dataset, run_dir, *extra, launcher=[*TORCHRUN_TWO_RANKS, str(script)]),
        env=env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert stopped.returncode != 0  # torchrun reports a worker's exit 75 as a failure
    assert f"evaluation at step {evaluated[1]} stopped after 1 batch(es)" in stopped.stderr
    saved = final_state(run_dir)
    assert ckpt.find_complete(run_dir)[-1].step == evaluated[1] and saved["progress"]["iteration"] == 1
    assert [row["step"] for row in rows(run_dir) if "ARC/pass@2" in row] == evaluated[:1]

    resumed = train_two_ranks(dataset, run_dir, *extra)
    assert resumed.returncode == 0, resumed.stderr
    assert_states_equal(final_state(tmp_path / "straight"), final_state(run_dir), exact=False)
    assert (
        final_state(run_dir)["evaluators"][0]["stats"].keys()
        == final_state(tmp_path / "straight")["evaluators"][0]["stats"].keys()
    )


def test_sigkill_while_saving_resumes_from_the_previous_complete_checkpoint(
    dataset: Path, tmp_path: Path
) -> None:
    extra = ("epochs=4", "eval_interval=1", "checkpoint_keep=0")
    assert train_here(dataset, tmp_path / "straight", *extra) == 0
    steps = [c.step for c in ckpt.find_complete(tmp_path / "straight")]

    # Die by SIGKILL inside the second checkpoint's publication: its files are written, no COMPLETE yet.
    run_dir = tmp_path / "killed"
    killer = (
        "import os, signal, sys\n"
        "import trm.training.checkpointing.layout as c\n"
        "calls = []\n"
        "original = c.publish\n"
        "def publish(root, step, facts):\n"
        "    calls.append(step)\n"
        "    if len(calls) == 2:\n"
        "        (c.partial_dir(root, step) / 'COMPLETE').write_text('torn')\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return original(root, step, facts)\n"
        "c.publish = publish\n"
        "from trm.train import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    cmd = train_cmd(dataset, run_dir, *extra, launcher=[sys.executable, "-c", killer])
    died = subprocess.run(cmd, env=env(), cwd=ROOT, capture_output=True, text=True)
    assert died.returncode == -signal.SIGKILL
    assert [c.step for c in ckpt.find_complete(run_dir)] == steps[:1]
    assert list(run_dir.glob(".step_*.partial"))

    resumed = train(dataset, run_dir, *extra)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from {run_dir / f'step_{steps[0]}'}" in resumed.stderr
    assert [c.step for c in ckpt.find_complete(run_dir)] == steps
    assert not list(run_dir.glob(".step_*.partial"))
    assert_states_equal(final_state(tmp_path / "straight"), final_state(run_dir))
    assert rows(tmp_path / "straight") == rows(run_dir)


def test_resume_refuses_another_dataset(dataset: Path, tmp_path: Path) -> None:
    first = train(dataset, tmp_path / "r", "epochs=1", "eval_interval=1", "evaluators=[]")
    assert first.returncode == 0, first.stderr
    other = tmp_path / "other-data"
    build_dataset(other, max_puzzles=3)
    again = train(other, tmp_path / "r", "epochs=1", "eval_interval=1", "evaluators=[]")
    assert again.returncode == exit_codes.CONFIG_ERROR
    assert "dataset fingerprint" in again.stderr and "Traceback" not in again.stderr


@pytest.mark.dist
def test_torchrun_two_gloo_ranks_match_one_process_with_accumulation(dataset: Path, tmp_path: Path) -> None:
    extra = ("epochs=3", "eval_interval=3", "global_batch_size=4")
    assert train_here(dataset, tmp_path / "one", *extra, "micro_batch_size=2") == 0
    two = train_two_ranks(dataset, tmp_path / "two", *extra)
    assert two.returncode == 0, two.stderr
    a, b = final_state(tmp_path / "one"), final_state(tmp_path / "two")
    assert_states_equal(a, b, exact=False)
    ra, rb = rows(tmp_path / "one"), rows(tmp_path / "two")
    assert [r["step"] for r in ra] == [r["step"] for r in rb]
    for x, y in zip(ra, rb, strict=True):
        assert x.keys() == y.keys()
        for key in x:
            assert x[key] == pytest.approx(y[key], rel=1e-4, abs=1e-6), key
    manifest = json.loads((ckpt.find_complete(tmp_path / "two")[-1].path / "manifest.json").read_text())
    assert manifest["world_size"] == 2 and {"rank_0.pt", "rank_1.pt"} <= set(manifest["files"])


@pytest.mark.dist
def test_resume_under_torchrun_with_two_ranks_continues_a_one_process_run(
    dataset: Path, tmp_path: Path
) -> None:
    extra = ("epochs=6", "eval_interval=3", "global_batch_size=4", "evaluators=[]")
    assert train_here(dataset, tmp_path / "straight", *extra) == 0
    run_dir = tmp_path / "moved"
    sigterm_after_step_2(dataset, run_dir, *extra)
    resumed = train_two_ranks(dataset, run_dir, *extra)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stderr
    assert_states_equal(final_state(tmp_path / "straight"), final_state(run_dir), exact=False)


@pytest.mark.dist
def test_early_stopping_under_torchrun_stops_every_rank_where_one_process_stops(
    dataset: Path, tmp_path: Path
) -> None:
    """min_delta 1: no evaluation after the first is a new best, so patience 1 ends the run after its second
    evaluation; rank 0 alone sees the metrics, and both ranks must end there together (exit 0). Ranked by
    token accuracy, above 0 from the first evaluation (a run whose best is 0 is never stopped)."""
    extra = (
        "epochs=4",
        "eval_interval=1",
        "global_batch_size=4",
        "checkpoint.best_metric=eval/all/accuracy",
        "early_stop.patience=1",
        "early_stop.min_delta=1",
    )
    assert train_here(dataset, tmp_path / "one", *extra) == 0
    two = train_two_ranks(dataset, tmp_path / "two", *extra)
    assert two.returncode == 0, two.stderr
    records = [json.loads((tmp_path / d / "run.json").read_text())["early_stop"] for d in ("one", "two")]
    assert records[0]["step"] == records[1]["step"] < records[0]["step_limit"]
    assert records[1]["evaluations"] == 2 and "early stop at step" in two.stderr
    assert final_state(tmp_path / "two")["progress"]["finished"]
