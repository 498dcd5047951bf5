"""Seeded, fabricated ARC evaluations fed to our evaluator and to upstream's `evaluators/arc.py`.

Shared by `test_arc_parity.py`. A scenario is a small test set (tasks, augmented identifiers) and, for
each of several evaluation rounds, the same global test batches with fabricated predictions and halting
logits. Runs give, per round, upstream's metric names and the sha256 of `submission.json`.

The golden file holds upstream's results for every scenario, both voting modes and world sizes 1 and 2
(facts produced by running upstream's evaluator). Regenerate it after changing a scenario with

    TRM_UPSTREAM=<TinyRecursiveModels checkout> python tests/arc_parity.py --write-golden

(upstream's evaluator needs the `upstream` extra: `pip install -e '.[upstream]'`).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import sys
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from trm.data.encoding import GRID_SIZE, dihedral, encode_grid, identifier
from trm.distributed import DistInfo
from trm.evaluation.arc import ARCEvaluator

GOLDEN = Path(__file__).with_name("arc_parity_golden.json")
SCENARIOS = ("moderate", "logits_5_40", "equal", "integer", "shared_wrong", "hidden")
# Scenarios with exact ties on votes and mean confidence, broken by which candidate was seen first.
TIES = ("equal", "shared_wrong")
VOTING = {"aggregated": True, "per_eval": False}
WORLD_SIZES = (1, 2)
ROUNDS = 3
GLOBAL_BATCH = 24
AUGMENTATIONS = 8
CHUNK = 5  # our runner hands the evaluator micro-batches of a rank's batch; this emulates it
BLANK = 0


@dataclass
class Scenario:
    """A test set and, per round, its global batches (padded to GLOBAL_BATCH with blank rows)."""

    name: str
    identifiers: list[str]
    test_puzzles: dict[str, Any]
    rounds: list[list[dict[str, torch.Tensor]]]


def _grid(rng: np.random.Generator, max_side: int = 5) -> np.ndarray:
    return rng.integers(0, 10, size=(int(rng.integers(1, max_side + 1)), int(rng.integers(1, max_side + 1))))


def _augment(grid: np.ndarray, tid: int, cmap: np.ndarray | None) -> np.ndarray:
    """Upstream's augmentation: colours first, then the dihedral transform."""
    grid = np.asarray(grid, dtype=np.uint8)
    return dihedral(grid if cmap is None else cmap[grid], tid)


def _logits(name: str, rng: np.random.Generator, n: int) -> np.ndarray:
    if name == "logits_5_40":
        values = rng.uniform(5.0, 40.0, n)
    elif name == "equal":
        values = np.full(n, 1.5)
    elif name == "integer":
        values = rng.integers(-4, 25, n).astype(np.float64)
    elif name == "shared_wrong":
        values = rng.choice([1.0, 2.0], n)
    else:
        values = rng.normal(0.0, 2.0, n)
    return values.astype(np.float32)


def make_scenario(name: str) -> Scenario:
    """The scenario `name`, the same on every call and machine (seeded from the name)."""
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; one of {SCENARIOS}")
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    hidden = name == "hidden"
    tasks: dict[str, Any] = {}
    identifiers = ["<blank>"]
    rows: list[tuple[str, int, int, int, np.ndarray | None]] = []  # task, pair, identifier id, tid, cmap
    answers: dict[tuple[str, int], list[np.ndarray]] = {}
    for t in range(12):
        task_id = f"{int(rng.integers(16**8)):08x}"
        pairs = 2 if t in (0, 3, 9) else 1
        test = []
        for p in range(pairs):
            inp, out = _grid(rng), _grid(rng)
            if hidden and t >= 6:
                out = np.zeros((1, 1), dtype=np.int64)  # a hidden set's dummy output
            test.append({"input": inp.tolist(), "output": out.tolist()})
            wrong = [_grid(rng), _grid(rng)]
            answers[task_id, p] = [out, *wrong]
        tasks[task_id] = {"train": [], "test": test}
        if t in (7, 10):
            continue  # a task the model never saw: no prediction at all
        names = set()
        # Few votes per test input with logits of 5-40: counts tie, and only float64 separates the means.
        for k in range(3 if name == "logits_5_40" else AUGMENTATIONS):
            if k == 0:
                tid, cmap = 0, None
            else:
                tid = int(rng.integers(0, 8))
                cmap = np.concatenate([[0], rng.permutation(np.arange(1, 10))]).astype(np.uint8)
            label = identifier(task_id, tid, cmap)
            if label in names:
                continue
            names.add(label)
            identifiers.append(label)
            for p in range(pairs):
                if t == 0 and p == 0:
                    continue  # a test pair without predictions (upstream skips it in submission.json)
                rows.append((task_id, p, len(identifiers) - 1, tid, cmap))
    order = rng.permutation(len(rows))
    rows = [rows[i] for i in order]
    rounds = []
    for _ in range(ROUNDS):
        inputs, preds = [], []
        for task_id, p, _ident, tid, cmap in rows:
            pair = tasks[task_id]["test"][p]
            inputs.append(encode_grid(_augment(np.array(pair["input"]), tid, cmap)))
            right, wrong_a, wrong_b = answers[task_id, p]
            if name in ("shared_wrong", "logits_5_40"):
                pick = int(rng.integers(0, 3))  # three answers share the votes: counts often tie
            else:
                pick = int(rng.choice(6, p=[0.35, 0.2, 0.15, 0.1, 0.1, 0.1]))
            if pick < 3:
                tokens = encode_grid(_augment([right, wrong_a, wrong_b][pick], tid, cmap))
            elif pick == 3:
                tokens = encode_grid(_augment(_grid(rng), tid, cmap))  # a one-off guess
            elif pick == 4:
                tokens = np.zeros(GRID_SIZE * GRID_SIZE, dtype=np.uint8)  # starts with PAD: empty crop
            else:
                tokens = rng.integers(0, 12, GRID_SIZE * GRID_SIZE).astype(np.uint8)  # noise
            preds.append(tokens)
        logits = _logits(name, rng, len(rows))
        batches = []
        for start in range(0, len(rows), GLOBAL_BATCH):
            end = min(start + GLOBAL_BATCH, len(rows))
            pad = GLOBAL_BATCH - (end - start)
            ident = [r[2] for r in rows[start:end]] + [BLANK] * pad
            inp = np.stack(inputs[start:end] + [np.zeros(GRID_SIZE * GRID_SIZE, np.uint8)] * pad)
            prd = np.stack(preds[start:end] + [rng.integers(0, 12, GRID_SIZE * GRID_SIZE)] * pad)
            q = np.concatenate([logits[start:end], rng.normal(0, 3, pad).astype(np.float32)])
            batches.append(
                {
                    "inputs": torch.from_numpy(inp.astype(np.int32)),
                    "puzzle_identifiers": torch.tensor(ident, dtype=torch.int32),
                    "preds": torch.from_numpy(prd.astype(np.int64)),
                    "q_halt_logits": torch.from_numpy(q),
                }
            )
        rounds.append(batches)
    return Scenario(name, identifiers, tasks, rounds)


def fingerprint(scn: Scenario) -> str:
    """Digest (`sha256:<hex>`) of everything a scenario feeds the evaluators (tells scenario drift from a regression)."""
    h = hashlib.sha256(json.dumps([scn.identifiers, scn.test_puzzles]).encode())
    for batches in scn.rounds:
        for batch in batches:
            for key in sorted(batch):
                h.update(key.encode())
                h.update(batch[key].numpy().tobytes())
    return f"sha256:{h.hexdigest()}"


def local_batch(batch: dict[str, torch.Tensor], rank: int, world: int) -> dict[str, torch.Tensor]:
    """Rank `rank`'s contiguous slice of a global batch (the loaders' split, upstream's and ours)."""
    size = GLOBAL_BATCH // world
    return {k: v[rank * size : (rank + 1) * size] for k, v in batch.items()}


def summary(metrics: dict[str, float], folder: Path) -> dict[str, Any]:
    """Upstream's metric names and the sha256 of the submission written to `folder`."""
    data = (folder / "submission.json").read_bytes()
    return {
        "metrics": {k: v for k, v in metrics.items() if k.startswith("ARC/pass@")},
        "submission_digest": f"sha256:{hashlib.sha256(data).hexdigest()}",
    }


def run_ours(
    scn: Scenario, aggregated: bool, world: int, out: Path, *, resume_at: int | None = None
) -> list[dict[str, Any]]:
    """Our evaluator with `world` ranks emulated in this process (each rank's log, merged as rank 0 does).

    Also returns `this_eval` (our per-evaluation metrics, under upstream's names) per round. With
    `resume_at=r`, fresh evaluators restored from rank 0's saved state (as a resumed run's) take over
    before round r.
    """

    def fresh() -> list[ARCEvaluator]:
        return [
            ARCEvaluator(scn.identifiers, scn.test_puzzles, BLANK, aggregated_voting=aggregated)
            for _ in range(world)
        ]

    evs = fresh()
    results = []
    for r, batches in enumerate(scn.rounds):
        if r == resume_at:
            buffer = io.BytesIO()
            torch.save(evs[0].state_dict(), buffer)
            evs = fresh()
            for ev in evs:
                buffer.seek(0)
                ev.load_state_dict(torch.load(buffer, weights_only=False))
        for ev in evs:
            ev.begin_eval()
        for b, batch in enumerate(batches):
            for rank, ev in enumerate(evs):
                local = local_batch(batch, rank, world)
                for start in range(0, len(local["inputs"]), CHUNK):
                    ev.update_batch({k: v[start : start + CHUNK] for k, v in local.items()}, batch_index=b)
        folder = out / f"ours_{scn.name}_{aggregated}_{world}_{r}"
        folder.mkdir(parents=True)
        metrics = evs[0].result_from([ev.vote_log for ev in evs], folder)
        entry = summary(metrics, folder)
        entry["this_eval"] = {
            k.replace("ARC/this_eval/", "ARC/"): v
            for k, v in metrics.items()
            if k.startswith("ARC/this_eval/")
        }
        results.append(entry)
    return results


def write_dataset(scn: Scenario, folder: Path) -> None:
    """The two files upstream's evaluator reads from a data path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "identifiers.json").write_text(json.dumps(scn.identifiers))
    (folder / "test_puzzles.json").write_text(json.dumps(scn.test_puzzles))


def run_upstream(
    scn: Scenario, aggregated: bool, rank: int, world: int, data: Path, out: Path
) -> list[dict[str, Any]] | None:
    """Upstream's evaluator as pretrain.py drives it, inside an initialized process group of `world`."""
    upstream = os.environ["TRM_UPSTREAM"]
    if upstream not in sys.path:
        sys.path.insert(0, upstream)
    from evaluators.arc import ARC  # type: ignore[import-not-found]

    ev = ARC(str(data), SimpleNamespace(blank_identifier_id=BLANK), aggregated_voting=aggregated)
    results = []
    for r, batches in enumerate(scn.rounds):
        ev.begin_eval()
        for batch in batches:
            local = local_batch(batch, rank, world)
            ev.update_batch(
                {"inputs": local["inputs"], "puzzle_identifiers": local["puzzle_identifiers"]},
                {"preds": local["preds"], "q_halt_logits": local["q_halt_logits"]},
            )
        folder = out / f"upstream_{scn.name}_{aggregated}_{world}_{r}"
        if rank == 0:
            folder.mkdir(parents=True)
        metrics = ev.result(str(folder), rank=rank, world_size=world, group=None)
        if rank == 0:
            results.append(summary(metrics, folder))
    return results if rank == 0 else None


def live_worker(rank: int, world: int, init_file: str, out: str) -> None:
    """One rank: every scenario and voting mode through upstream's evaluator and ours (real gloo gather)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        root = Path(out).parent
        results: dict[str, Any] = {}
        for name in SCENARIOS:
            scn = make_scenario(name)
            data = root / f"data_{name}"
            if rank == 0:
                write_dataset(scn, data)
            dist.barrier()
            for mode, aggregated in VOTING.items():
                up = run_upstream(scn, aggregated, rank, world, data, root)
                ours = _run_ours_dist(scn, aggregated, rank, world, root)
                if rank == 0:
                    results.setdefault(name, {})[mode] = {"upstream": up, "ours": ours}
        if rank == 0:
            Path(out).write_text(json.dumps(results, indent=1))
    finally:
        dist.destroy_process_group()


def _run_ours_dist(scn: Scenario, aggregated: bool, rank: int, world: int, root: Path) -> list | None:
    import torch.distributed as dist

    ev = ARCEvaluator(scn.identifiers, scn.test_puzzles, BLANK, aggregated_voting=aggregated)
    info = DistInfo(rank=rank, world_size=world, object_group=dist.group.WORLD if world > 1 else None)
    results = []
    for r, batches in enumerate(scn.rounds):
        ev.begin_eval()
        for b, batch in enumerate(batches):
            ev.update_batch(local_batch(batch, rank, world), batch_index=b)
        folder = root / f"oursdist_{scn.name}_{aggregated}_{world}_{r}"
        if rank == 0:
            folder.mkdir(parents=True)
        metrics = ev.result(folder if rank == 0 else None, info)
        if rank == 0:
            assert metrics is not None
            results.append(summary(metrics, folder))
    return results if rank == 0 else None


def run_live(world: int, tmp: Path) -> dict[str, Any]:
    """`live_worker` on `world` spawned gloo ranks; rank 0's results."""
    import torch.multiprocessing as mp

    tmp.mkdir(parents=True, exist_ok=True)
    out = tmp / f"live_{world}.json"
    mp.spawn(live_worker, args=(world, str(tmp / f"init_{world}"), str(out)), nprocs=world, join=True)
    return json.loads(out.read_text())


def golden_from_live(live: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Upstream's results only: {scenario: {"fingerprint", mode: {world: [per round]}}}."""
    golden: dict[str, Any] = {}
    for name in SCENARIOS:
        golden[name] = {"fingerprint": fingerprint(make_scenario(name))}
        for mode in VOTING:
            golden[name][mode] = {str(world): live[world][name][mode]["upstream"] for world in WORLD_SIZES}
    return golden


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--write-golden", action="store_true", help=f"write {GOLDEN.name} from upstream's runs"
    )
    args = parser.parse_args()
    if not os.environ.get("TRM_UPSTREAM"):
        print("error: set TRM_UPSTREAM to a TinyRecursiveModels checkout", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        live = {world: run_live(world, Path(tmp) / f"w{world}") for world in WORLD_SIZES}
    golden = golden_from_live(live)
    if args.write_golden:
        GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
        print(f"wrote {GOLDEN}")
    else:
        print(json.dumps(golden, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
