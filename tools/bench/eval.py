"""Benchmark: evaluation rows/s with the eager loss head vs the compiled one, in the same run.

    python -m tools.bench.eval                       # tiny CPU config (the model bench's), eager and compiled
    python -m tools.bench.eval --config paper        # on a GPU: one rank's share of the arc2 model, bf16
    python -m tools.bench.eval --chunk 64            # rows per forward (default: the config's batch)
    python -m tools.bench.eval --flag-loop           # also the loop reading the halting flag every step

Runs `trm.evaluation.runner.evaluate` (every test row to halting, its metrics reduced) over random ARC-shaped
test batches whose last chunk is short, so the compiled run pads it (one static graph). The compiled module
is compiled by an untimed first pass (its time is printed); then the passes alternate `--repeats` times and
the median rows/s of each is reported with the ratios. The evaluator runs its fixed number of ACT steps
(the host never waits for the device between steps); with `--flag-loop` eager and compiled also run the
loop that reads the halting flag after every step (`flag-read`: the evaluator before, one host sync per
step), interleaved with the others. The passes' predictions are compared (Inductor's kernels round
differently from eager's, so a few may differ on a random model).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from tools.bench.model import CONFIGS, build_ours, make_batch
from trm.distributed import DistInfo
from trm.evaluation import runner
from trm.evaluation.runner import evaluate

FIXED, FLAG = "fixed", "flag"  # the ACT loop: fixed step count, or reading the halting flag every step


@dataclass
class SyntheticMetadata:
    """What `evaluate` reads of a loader's metadata."""

    blank_identifier_id: int = 0
    sets: list[str] = field(default_factory=lambda: ["all"])


class SyntheticTestLoader:
    """`batches` random test batches of `rows` rows each (no blank rows), the same on every pass."""

    def __init__(self, config: Any, rows: int, batches: int) -> None:
        self.metadata = SyntheticMetadata()
        big = make_batch(dataclasses.replace(config, batch_size=rows * batches), torch.device("cpu"))
        big["puzzle_identifiers"] = big["puzzle_identifiers"].clamp_min(1)  # no blank identifier
        self._batches = [{k: v[i * rows : (i + 1) * rows] for k, v in big.items()} for i in range(batches)]
        self.rows = rows * batches

    def iter_test(self):
        """(set name, batch, global batch size) per batch, as PuzzleLoader yields them."""
        for batch in self._batches:
            yield "all", batch, batch["inputs"].shape[0]


def _steps_unknown(_loss_head: torch.nn.Module) -> int | None:
    """Stands in for runner.fixed_act_steps in a FLAG pass: the loop then reads the halting flag every step."""
    return None


def one_pass(
    head: torch.nn.Module, loader: SyntheticTestLoader, chunk: int, out: Path, loop: str = FIXED
) -> tuple[float, Any]:
    """Seconds for one evaluation pass (`loop`: FIXED or FLAG), and its predictions."""
    device = next(head.parameters()).device
    flag_read = mock.patch.object(runner, "fixed_act_steps", _steps_unknown)
    start = time.perf_counter()
    with flag_read if loop == FLAG else contextlib.nullcontext():
        evaluate(
            head, loader, [], DistInfo(device=device), chunk_size=chunk, save_dir=out, step=0,
            save_outputs=("preds",), show_progress=False,
        )  # fmt: skip
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    return seconds, torch.load(out / "step_0_all_preds.0")["preds"]


def main(argv: list[str] | None = None) -> int:
    """Time evaluation eager and compiled; print rows/s of each and the ratio."""
    parser = argparse.ArgumentParser(prog="python -m tools.bench.eval", description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default=None, help="tiny (CPU) or paper (GPU)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batches", type=int, default=2, help="test batches per pass (default 2)")
    parser.add_argument(
        "--extra-rows",
        type=int,
        default=None,
        help="rows past whole chunks per batch (default: a quarter chunk)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed passes of each (default 3)")
    parser.add_argument(
        "--chunk", type=int, default=None, help="rows per forward (default: the config's batch)"
    )
    parser.add_argument(
        "--flag-loop",
        action="store_true",
        help="also time the loop that reads the halting flag after every ACT step (the evaluator before)",
    )
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    config_name = args.config or ("paper" if device.type == "cuda" else "tiny")
    config = CONFIGS[config_name]("trm")
    if args.chunk is not None:
        config = dataclasses.replace(config, batch_size=args.chunk)
    chunk = config.batch_size
    extra = args.extra_rows if args.extra_rows is not None else max(1, chunk // 4)
    loader = SyntheticTestLoader(config, chunk + extra, args.batches)
    torch.manual_seed(0)
    head = build_ours(config, device)
    compiled = torch.compile(head)
    print(
        f"config={config_name} device={device} threads={torch.get_num_threads()} "
        f"chunk={chunk} rows/pass={loader.rows} (batches of {chunk}+{extra}) "
        f"halt_max_steps={config.halt_max_steps} hidden={config.hidden_size} dtype={config.forward_dtype}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        first, _ = one_pass(compiled, loader, chunk, root / "first")
        print(f"compiled: first pass (compiles) {first:.1f} s")
        # The evaluator as it is (`eager`, `compiled`), and with --flag-loop the loop it replaced as well.
        loops = ((FIXED, ""), (FLAG, " flag-read")) if args.flag_loop else ((FIXED, ""),)
        variants = [
            (f"{n}{suffix}", m, loop)
            for n, m in (("eager", head), ("compiled", compiled))
            for loop, suffix in loops
        ]
        times: dict[str, list[float]] = {name: [] for name, _m, _l in variants}
        preds: dict[str, torch.Tensor] = {}
        for i in range(args.repeats):
            for name, module, loop in variants:
                seconds, preds[name] = one_pass(
                    module, loader, chunk, root / f"{name}{i}".replace(" ", "-"), loop
                )
                times[name].append(seconds)
    rates = {name: loader.rows / statistics.median(t) for name, t in times.items()}
    for name, rate in rates.items():
        runs = " ".join(f"{x:.2f}" for x in times[name])
        print(f"{name:19s} {rate:9.1f} rows/s (median of {args.repeats} passes: {runs} s)")
    print(f"speedup compiled vs eager evaluation: {rates['compiled'] / rates['eager']:.2f}x")
    if args.flag_loop:
        for mode in ("eager", "compiled"):
            ratio = rates[mode] / rates[f"{mode} flag-read"]
            same_loop = torch.equal(preds[mode], preds[f"{mode} flag-read"])
            print(
                f"{mode}: fixed steps vs the flag read every step: {ratio:.2f}x, predictions identical: {same_loop}"
            )
    same = (preds["eager"] == preds["compiled"]).all(dim=-1).float().mean().item()
    print(f"predictions identical in {same:.1%} of rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
