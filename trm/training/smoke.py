"""`make smoke-local`: the whole run lifecycle on CPU in about a minute.

Builds a small ARC set from the shipped data, trains the debug-tiny recipe's model (trm/training/recipes.py) for a
few hundred steps with two evaluations, interrupts it with SIGTERM half-way (exit 75, a
complete checkpoint), resumes it with the same command (which evaluates again at the end and writes
submission.json) and prints where everything is.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from trm import exit_codes
from trm.errors import TRMError
from trm.safe_remove import remove_own_temp
from trm.training.recipes import get_recipe


def dataset_cmd(out: Path, max_puzzles: int, num_aug: int) -> list[str]:
    """Build a small ARC-AGI-1 set: the first tasks of training + evaluation, evaluation as test set."""
    return [
        sys.executable, "-m", "trm", "data", "build-arc", "--output-dir", str(out),
        "--subsets", "training", "evaluation", "--test-set-name", "evaluation",
        "--num-aug", str(num_aug), "--max-puzzles", str(max_puzzles), "--quiet", "--overwrite",
    ]  # fmt: skip


def train_cmd(data: Path, run: Path, epochs: int, batch: int) -> list[str]:
    """The training command (run twice: interrupted, then resumed)."""
    recipe = get_recipe("debug-tiny").with_changes(
        epochs=epochs, eval_interval=epochs // 2, global_batch_size=batch, lr_warmup_steps=20, log_interval=5
    )
    return [
        sys.executable, "-m", "trm.train", *recipe.overrides, f"data_paths=[{data}]", "+run_name=smoke_local",
        f"+checkpoint_path={run}",
    ]  # fmt: skip


def wait_for_step(proc: subprocess.Popen[bytes], metrics: Path, step: int, timeout: float) -> int:
    """Poll metrics.jsonl until a train row reaches `step`; return the step seen (or −1 if the run ended)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if metrics.exists():
            steps = [
                json.loads(line).get("step", 0) for line in metrics.read_text().splitlines() if line.strip()
            ]
            if steps and max(steps) >= step:
                return max(steps)
        time.sleep(0.1)
    return -1


def run(workdir: Path, *, max_puzzles: int, num_aug: int, epochs: int, batch: int, stop_step: int) -> int:
    """The smoke sequence; raises TRMError naming the stage that failed."""
    started = time.perf_counter()
    env = dict(os.environ, DISABLE_COMPILE="1", WANDB_MODE=os.environ.get("WANDB_MODE", "disabled"))
    # Batch-2 steps of a tiny model gain nothing from a second thread; one keeps a shared machine usable.
    env.setdefault("OMP_NUM_THREADS", "1")
    data, ckpts = workdir / "data" / "arc-smoke", workdir / "checkpoints" / "smoke_local"
    if ckpts.exists():
        remove_own_temp(ckpts)  # this smoke's own run directory under its work folder

    _check("dataset build", subprocess.run(dataset_cmd(data, max_puzzles, num_aug), env=env), 0)
    cmd = train_cmd(data, ckpts, epochs, batch)
    print(f"\n$ {' '.join(cmd[1:])}\n", flush=True)
    proc = subprocess.Popen(cmd, env=env)
    seen = wait_for_step(proc, ckpts / "metrics.jsonl", stop_step, timeout=600)
    if seen < 0:
        proc.wait()
        raise TRMError(f"smoke: training ended (exit {proc.returncode}) before step {stop_step}; see above.")
    proc.send_signal(signal.SIGTERM)
    _check("interrupted training (SIGTERM)", proc, exit_codes.SAVED_RETRY, wait=True)
    print(f"\n--- SIGTERM at step ~{seen}: exit {exit_codes.SAVED_RETRY}; resuming with the same command\n")
    _check("resumed training", subprocess.run(cmd, env=env), 0)

    from trm.training.checkpointing.layout import find_complete

    final = find_complete(ckpts)[-1]
    submission = ckpts / f"evaluator_ARC_step_{final.step}" / "submission.json"
    if not submission.is_file():
        raise TRMError(f"smoke: {submission} is missing after the final evaluation.")
    print(
        "\nsmoke-local OK in {:.1f} s\n  dataset:     {}\n  run dir:     {}\n  checkpoints: {}\n"
        "  metrics:     {} / {}\n  submission:  {}\n  evaluate:    python -m trm.eval {}".format(
            time.perf_counter() - started, data, ckpts, ", ".join(c.path.name for c in find_complete(ckpts)),
            ckpts / "metrics.jsonl", ckpts / "metrics.csv", submission, final.path,
        )
    )  # fmt: skip
    return 0


def _check(stage: str, proc: subprocess.Popen[bytes] | subprocess.CompletedProcess[bytes], want: int,
           wait: bool = False) -> None:  # fmt: skip
    code = proc.wait() if wait and isinstance(proc, subprocess.Popen) else proc.returncode
    if code != want:
        raise TRMError(f"smoke: {stage} exited with {code}, expected {want}; its output is above.")


def main(argv: list[str] | None = None) -> int:
    """Command line: `python -m trm.training.smoke [--workdir DIR]`."""
    parser = argparse.ArgumentParser(prog="python -m trm.training.smoke", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workdir", type=Path, default=Path("build/smoke-local"), help="dataset + run go here"
    )
    parser.add_argument("--max-puzzles", type=int, default=2, help="tasks per subset")
    parser.add_argument("--num-aug", type=int, default=2, help="augmentations per task")
    parser.add_argument("--epochs", type=int, default=50, help="epochs (two evaluations)")
    parser.add_argument("--global-batch-size", type=int, default=2)
    parser.add_argument("--stop-step", type=int, default=130, help="send SIGTERM once this step is logged")
    args = parser.parse_args(argv)
    try:
        return run(
            args.workdir, max_puzzles=args.max_puzzles, num_aug=args.num_aug, epochs=args.epochs,
            batch=args.global_batch_size, stop_step=args.stop_step,
        )  # fmt: skip
    except TRMError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
