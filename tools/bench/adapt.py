"""Adaptation benchmark: seconds per test-time-training step at the paper's model, on this machine.

    nox -s bench -- adapt [--batch 2] [--steps 4] [--device cpu]

Adapts a freshly initialised arc2-recipe model (hidden 512, 2 layers, H 3, L 4, puzzle embedding; the
weights do not change the cost) to two shipped ARC-AGI-2 evaluation tasks through `trm.adapt` (the
trainer, fp32 eager on CPU), for `--steps` optimizer steps of `--batch` examples, and reads the
trainer's own `perf/step_seconds` after the first step. A CPU cannot run the paper's batch of 768 in
reasonable time, so the figure for 100 steps at batch 768 is extrapolated linearly in the batch (the
cost per example is flat at these sizes: no batch-level parallelism is left on a few cores) and says so.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

PAPER_BATCH = 768


def measure(batch: int, steps: int, device: str, work: Path) -> list[float]:
    """`perf/step_seconds` of every adaptation step after the first."""
    import torch

    from trm.adapt.rows import mean_trained_row
    from trm.adapt.run import AdaptSettings, AdaptSource, adapt
    from trm.data.arc_source import DEFAULT_PREFIX
    from trm.model.registry import build_model, model_config
    from trm.training.config import compose
    from trm.training.recipes import get_recipe

    cfg = compose(
        [
            *get_recipe("arc2").overrides,
            f"global_batch_size={batch}",
            f"device={device}",
            "compile=false",
            "log_interval=1",
            "arch.forward_dtype=float32",
        ]
    )
    model_cfg = model_config(
        cfg.arch,
        batch_size=batch,
        seq_len=900,
        vocab_size=12,
        num_puzzle_identifiers=2,
        forward_dtype="float32",
    )
    weights = build_model(model_cfg).state_dict()
    source = AdaptSource(
        cfg, weights, None, mean_trained_row(weights["inner.puzzle_emb.weight"]), "fresh arc2"
    )
    tasks = json.loads(DEFAULT_PREFIX.with_name("arc-agi_evaluation2_challenges.json").read_text())
    challenges = work / "two_challenges.json"
    challenges.write_text(json.dumps(dict(sorted(tasks.items())[:2])))
    torch.manual_seed(0)
    adapt(source, challenges, work / "run", AdaptSettings(steps=steps, num_aug=8, progress=False))
    rows = [json.loads(line) for line in (work / "run" / "metrics.jsonl").read_text().splitlines()]
    return [r["perf/step_seconds"] for r in rows if "perf/step_seconds" in r and r["step"] > 1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nox -s bench -- adapt", description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=2, help="examples per step (default 2)")
    parser.add_argument("--steps", type=int, default=4, help="adaptation steps; the first is not counted")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the first step is warm-up)")
    with tempfile.TemporaryDirectory() as tmp:
        seconds = measure(args.batch, args.steps, args.device, Path(tmp))
    per_step = statistics.median(seconds)
    per_100 = per_step * PAPER_BATCH / args.batch * 100
    print(
        f"adaptation at the paper's model on {args.device}: {per_step:.2f} s/step at batch {args.batch} "
        f"(median of {len(seconds)} steps); 100 steps at batch {PAPER_BATCH}: {per_100 / 3600:.1f} h "
        f"({per_100:.0f} s{', extrapolated from batch ' + str(args.batch) if args.batch != PAPER_BATCH else ''})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
