"""Checkpoint benchmark: how long a save blocks the training loop, asynchronous vs synchronous.

    nox -s bench -- checkpoint [--identifiers N] [--tiny] [--device cpu|cuda] [--dir DIR] [--json]

Builds the trainer's components at the paper config (the `arc2` recipe's model, hidden 512, EMA on) with
a puzzle-embedding table of the real ARC-AGI-2 + ConceptARC aug-1000 dataset (1,191,730 identifiers,
`python -m trm data build-arc --subsets training2 evaluation2 concept --test-set-name evaluation2`:
1,191,730 × 512 fp32 = 2,440.7 MB) and rank 0's share of a 4-rank run (ACT carry of 192 rows), then
times `Trainer.save_checkpoint` itself three times on the same state: asynchronously (the first save,
which allocates the host buffers the trainer keeps for later saves), with `checkpoint.asynchronous=false`
(snapshot, torch.save, fsync, sha256, manifest, COMPLETE, rename in the loop), and asynchronously again
(the steady state: the loop is blocked for the host snapshot only; the writer thread does the rest).
Right after that last save returns, the benchmark changes every weight in place, as the next optimizer
step would, and then checks that all three saves wrote the same sha256s: the snapshot is isolated from
training. Target: blocked ≤ 10 % of the synchronous save. With `--device cuda` (the default where CUDA is
available) the state lives on the GPU, as in training, and the asynchronous saves go through the pinned host
buffers (non-blocking copies, one synchronize).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from trm.safe_remove import remove_own_temp, remove_retired_checkpoint

ARC2_IDENTIFIERS = 1_191_730  # num_puzzle_identifiers of arc2concept-aug-1000 (our build = upstream's rule)
RANKS = 4  # the paper's 4-GPU run: rank 0 writes its shard of the carry and the main state
TARGET_BLOCKED_SHARE = 0.10


class _Loader:
    """What the trainer asks of a train loader when it saves: metadata, position, fingerprint."""

    fingerprint = "bench-checkpoint"

    def __init__(self, identifiers: int) -> None:
        self.metadata = SimpleNamespace(
            seq_len=900, vocab_size=12, num_puzzle_identifiers=identifiers, total_groups=1280,
            mean_puzzle_examples=4.33, blank_identifier_id=0,
        )  # fmt: skip

    def state_dict(self) -> dict[str, int]:
        return {"pass": 0, "position": 1}


def build_trainer(run_dir: Path, identifiers: int, tiny: bool, device: str = "cpu") -> Any:
    """A Trainer at the arc2 recipe (or debug-tiny) with rank 0's carry and populated optimizer state."""
    from trm.distributed import DistInfo
    from trm.training.builder import build
    from trm.training.config import CheckpointConfig, compose, fill_run_defaults
    from trm.training.loop import Trainer
    from trm.training.recipes import get_recipe

    batch = 4 if tiny else get_recipe("arc2").global_batch_size // RANKS
    recipe = get_recipe("debug-tiny" if tiny else "arc2").with_changes(
        global_batch_size=batch, evaluators=[], compile="false", device=device, ema=True,
        checkpoint=CheckpointConfig(keep=0, every_minutes=None),
    )  # fmt: skip
    cfg = compose([*recipe.overrides, f"checkpoint_path={run_dir}"])
    fill_run_defaults(cfg)
    # The builder places the model on the process's device (DistInfo), as torchrun's ranks do.
    dist = DistInfo(device=torch.device("cuda", 0) if device == "cuda" else torch.device(device))
    trainer = Trainer(cfg, dist, build(cfg, dist, (_Loader(identifiers), None)))
    c = trainer.components
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        if c.model.puzzle_emb is not None:
            table = c.model.puzzle_emb.weight
            table.copy_(torch.randn(table.shape, generator=generator))
        inputs = torch.randint(2, 12, (batch, 900), generator=generator, dtype=torch.int32).to(device)
        ids = torch.zeros(batch, dtype=torch.int32, device=device)
        carry = c.loss_head.initial_carry({"inputs": inputs, "labels": inputs, "puzzle_identifiers": ids})
        for t in (carry.inner_carry.z_H, carry.inner_carry.z_L):
            t.copy_(torch.randn(t.shape, generator=generator))
    trainer.carries = [carry]
    # One optimizer step with zero gradients: AdamATan2's moments exist, as in a real checkpoint.
    for p in c.model.parameters():
        p.grad = torch.zeros_like(p)
    for o in c.optimizers:
        if o.name != "puzzle_emb":
            o.optimizer.step()
    c.model.zero_grad(set_to_none=True)
    trainer.progress.step = 1
    return trainer


def file_hashes(run_dir: Path) -> dict[str, str]:
    """sha256 of every file of the run's only checkpoint, from its manifest."""
    from trm.training.checkpointing.layout import find_complete

    (info,) = find_complete(run_dir, verify_hashes=True)
    return {name: meta["sha256"] for name, meta in info.manifest["files"].items()}


def _timed_save(trainer: Any, asynchronous: bool, then: Any = None) -> tuple[float, float]:
    """(seconds the loop was blocked, seconds until the checkpoint was complete) of one save."""
    trainer.checkpointer.writer.asynchronous = asynchronous
    start = time.perf_counter()
    trainer.save_checkpoint()
    blocked = time.perf_counter() - start
    if then is not None:
        then()
    trainer.checkpointer.writer.wait()
    return blocked, time.perf_counter() - start


def run_bench(
    work: Path, identifiers: int = ARC2_IDENTIFIERS, tiny: bool = False, device: str = "cpu"
) -> dict[str, Any]:
    """Time saves of the same state: asynchronous (the first, which allocates the host buffers, and a
    later one), and synchronous; every save must write the same files."""
    run_dir = work / "run"
    trainer = build_trainer(run_dir, identifiers, tiny, device)

    def next_step() -> None:  # training goes on while the writer writes: every weight changes in place
        with torch.no_grad():
            for t in trainer.components.model.state_dict().values():
                if t.is_floating_point():
                    t.add_(1.0)

    hashes = []
    try:
        for asynchronous, then in ((True, None), (False, None), (True, next_step)):
            times = _timed_save(trainer, asynchronous, then)
            hashes.append(file_hashes(run_dir))
            if asynchronous and then is None:
                first_blocked_s, _ = times
            elif asynchronous:
                blocked_s, async_total_s = times
            else:
                sync_s, _ = times
            checkpoint_mb = sum((run_dir / "step_1" / n).stat().st_size for n in hashes[-1]) / 1e6
            if then is None:
                remove_retired_checkpoint(run_dir / "step_1")
    finally:
        trainer.close()
    table = trainer.components.model.puzzle_emb
    table_mb = table.weight.numel() * table.weight.element_size() / 1e6 if table is not None else 0.0
    return {
        "device": str(table.weight.device) if table is not None else device,
        "identifiers": identifiers,
        "puzzle_emb_ndim": table.weight.shape[1] if table is not None else 0,
        "puzzle_table_mb": round(table_mb, 3),
        "checkpoint_mb": round(checkpoint_mb, 3),
        "sync_save_s": round(sync_s, 6),
        "async_first_blocked_s": round(first_blocked_s, 6),
        "async_blocked_s": round(blocked_s, 6),
        "async_total_s": round(async_total_s, 6),
        "blocked_share": round(blocked_s / sync_s, 4),
        "target_share": TARGET_BLOCKED_SHARE,
        "identical": hashes[0] == hashes[1] == hashes[2],
        "files": hashes[-1],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench.checkpoint", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--identifiers",
        type=int,
        default=ARC2_IDENTIFIERS,
        help="puzzle-table rows (default: ARC-AGI-2 aug-1000)",
    )
    parser.add_argument("--tiny", action="store_true", help="the debug-tiny model instead of the paper's")
    parser.add_argument(
        "--dir", type=Path, default=None, help="where to write (default: a temp dir, removed)"
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="where the trainer's state lives (default: cuda when available)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    work = args.dir or Path(tempfile.mkdtemp(prefix="trm-bench-checkpoint-"))
    print(
        f"cpu cores: {os.cpu_count()}, load average: {os.getloadavg()[0]:.1f}, work dir: {work}",
        file=sys.stderr,
    )
    try:
        result = run_bench(work, args.identifiers, args.tiny, args.device)
    finally:
        if args.dir is None:
            remove_own_temp(work)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"device: {result['device']}")
        print(
            f"puzzle table: {result['identifiers']:,} rows × {result['puzzle_emb_ndim']} fp32 = {result['puzzle_table_mb']:,.1f} MB"
        )
        print(f"checkpoint (state.pt + rank_0.pt): {result['checkpoint_mb']:,.1f} MB")
        print(f"synchronous save:          {result['sync_save_s']:8.2f} s blocked")
        print(
            f"asynchronous, first save:  {result['async_first_blocked_s']:8.2f} s blocked (allocates the host buffers)"
        )
        print(f"asynchronous save:         {result['async_blocked_s']:8.2f} s blocked "
              f"({100 * result['blocked_share']:.1f} % of synchronous; target ≤ {100 * TARGET_BLOCKED_SHARE:.0f} %), "
              f"{result['async_total_s']:.2f} s until written")  # fmt: skip
        print(f"same sha256s in all three saves: {'yes' if result['identical'] else 'NO'}")
    ok = result["identical"] and (args.tiny or result["blocked_share"] <= TARGET_BLOCKED_SHARE)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
