"""Test helpers shared across the suite: fakes of external tools and data, and tiny real fixtures."""

from __future__ import annotations

import collections
import contextlib
import email.message
import http.server
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from trm.data.arc_source import DEFAULT_PREFIX
from trm.data.build_arc import build_arc_dataset
from trm.model import TRMConfig
from trm.training.recipes import get_recipe


def ended_pid() -> int:
    """The pid of a process that has just ended: what a killed writer's pid looks like to the next run."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


# A test that uploads to a real rclone remote (a local-path one) needs rclone; .ci/run installs it.
needs_rclone = pytest.mark.skipif(
    shutil.which("rclone") is None,
    reason="rclone is not installed (apt-get install -y rclone; .ci/run installs it)",
)

# --- A fake `nvidia-smi` on PATH that replays recorded outputs (launch tooling) --------------------------

FIXTURES = Path(__file__).parent / "fixtures" / "nvidia_smi"
FAKE_SMI = FIXTURES / "fake-nvidia-smi"
SHAPES = [
    f"{model}x{n}"
    for model in ("h100", "h200", "a100-40g", "a100-80g", "l40s", "rtx4090")
    for n in (1, 2, 4, 8)
] + ["b200x8", "rtx5090x1", "rtxpro6000x1", "a6000x2", "l4x4"]


def fake_smi_env(tmp_path: Path, shape: str | None, base: dict[str, str] | None = None) -> dict[str, str]:
    """An environment whose PATH has a fake nvidia-smi for `shape` (None: no nvidia-smi at all), without
    CUDA_VISIBLE_DEVICES: the real host's would select among the fake host's GPUs."""
    env = dict(base if base is not None else os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    bindir = tmp_path / "fake-bin"
    bindir.mkdir(exist_ok=True)
    link = bindir / "nvidia-smi"
    if link.exists() or link.is_symlink():
        link.unlink()
    # Keep python/torchrun reachable, but hide any real nvidia-smi that the host may have.
    path = [str(bindir)] + [
        p for p in env.get("PATH", "").split(os.pathsep) if p and not (Path(p) / "nvidia-smi").exists()
    ]
    if shape is not None:
        link.symlink_to(FAKE_SMI)
        env["FAKE_NVIDIA_SMI_DIR"] = str(FIXTURES / shape)
    env["PATH"] = os.pathsep.join(path)
    return env


def install_fake_smi(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, shape: str | None) -> dict[str, str]:
    """Put a fake nvidia-smi for `shape` (None: no nvidia-smi) on this process's PATH; returns the env."""
    env = fake_smi_env(tmp_path, shape)
    for key in ("PATH", "FAKE_NVIDIA_SMI_DIR", "CUDA_VISIBLE_DEVICES"):
        if key in env:
            monkeypatch.setenv(key, env[key])
        else:
            monkeypatch.delenv(key, raising=False)
    return env


# --- A fake `vastai` CLI on PATH that answers the way vastai 1.9.1 (the pinned one) does -------------------

# vastai 1.9.1 exits 0 whatever the API answered: a refusal is "Failed with error <status>: <message>" on
# stderr. `destroy instance` asks for confirmation on stdin unless --yes; a closed stdin answers "Aborted.".
# VASTAI_FAIL_STATUS (in the environment the CLI gets) makes it refuse with that HTTP status.
_FAKE_VASTAI = """#!/bin/sh
echo "$* key=$VAST_API_KEY" >> {record}
if [ -n "$VASTAI_FAIL_STATUS" ]; then echo "Failed with error $VASTAI_FAIL_STATUS: refused" >&2; exit 0; fi
case "$1 $*" in
  "destroy "*" --yes"*|"destroy "*" -y"*) echo "destroying instance $3." ;;
  "destroy "*) printf 'Are you sure you want to destroy instance %s? [y/N] ' "$3"
               if read -r answer && [ "$answer" = y ]; then echo "destroying instance $3."; else echo Aborted.; fi ;;
  "stop "*) echo "stopping instance $3." ;;
  *) echo "usage: vastai ..." >&2; exit 2 ;;
esac
"""


def write_fake_vastai(bin_dir: Path, record: Path) -> Path:
    """A `vastai` in `bin_dir` answering like vastai 1.9.1 and recording each command line (and the key it
    got in its environment, vastai's --api-key default) as a line of `record`; returns the script."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "vastai"
    script.write_text(_FAKE_VASTAI.format(record=record))
    script.chmod(0o755)
    return script


def main_in_process(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    main: Callable[[list[str]], int],
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """A command line's `main(argv)` run in this process as its `python -m …` would run: with os.environ
    replaced by `env` (None: as it is; restored after the test), its exit code and captured output. The same
    result as the subprocess, without starting an interpreter that imports torch again (about 2 s of CPU
    each). An exception the command does not turn into an error line propagates and fails the test, where
    the subprocess would print a traceback. Tests of the process boundary itself (a script, its exit status
    through bash, signals) start the real process."""
    if env is not None:
        for key in set(os.environ) - set(env):
            monkeypatch.delenv(key)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(list(argv), code, out, err)


def trm_in_process(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`python -m trm ARGV` in this process (main_in_process)."""
    from trm.commands import main

    return main_in_process(monkeypatch, capsys, main, argv, env)


# --- A stand-in for PuzzleLoader with the same interface, for in-process trainer tests -------------------


@dataclass
class FakeMetadata:
    seq_len: int = 16
    vocab_size: int = 12
    num_puzzle_identifiers: int = 9
    blank_identifier_id: int = 0
    pad_id: int = 0
    ignore_label_id: int = -100
    total_groups: int = 8
    mean_puzzle_examples: float = 1.0
    sets: list[str] = field(default_factory=lambda: ["all"])


class FakeLoader:
    """Deterministic random token batches; a pass has `total_groups * epochs_per_iter / gbs` batches."""

    def __init__(
        self,
        split: str,
        *,
        global_batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        epochs_per_iter: int = 1,
        metadata: FakeMetadata | None = None,
    ) -> None:
        self.split = split
        self.metadata = metadata or FakeMetadata()
        self.gbs, self.rank, self.world = global_batch_size, rank, world_size
        self.seed, self.epochs_per_iter = seed, epochs_per_iter
        self.fingerprint = "fake-fingerprint"
        self.identifiers = ["<blank>"] + [f"task{i}" for i in range(1, self.metadata.num_puzzle_identifiers)]
        self.test_puzzles: dict[str, Any] = {}
        self._pass, self._pos = 0, 0
        # Called with the test batch's index just before it is handed out (tests stop an evaluation).
        self.before_test_batch: Callable[[int], None] | None = None

    def _global_batch(self, pass_id: int, index: int) -> dict[str, torch.Tensor]:
        rng = np.random.default_rng([self.seed, pass_id, index])
        m = self.metadata
        inputs = rng.integers(2, m.vocab_size, (self.gbs, m.seq_len))
        labels = np.where(rng.random((self.gbs, m.seq_len)) < 0.2, -100, (inputs + 1) % m.vocab_size)
        labels = np.where(labels < 2, 2, labels)
        labels = np.where(rng.random((self.gbs, m.seq_len)) < 0.2, -100, labels)
        ids = rng.integers(1, m.num_puzzle_identifiers, (self.gbs,))
        return {
            "inputs": torch.tensor(inputs, dtype=torch.int32),
            "labels": torch.tensor(labels, dtype=torch.int32),
            "puzzle_identifiers": torch.tensor(ids, dtype=torch.int32),
        }

    def _local(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        n = self.gbs // self.world
        return {k: v[self.rank * n : (self.rank + 1) * n].clone() for k, v in batch.items()}

    def batches_per_pass(self) -> int:
        m = self.metadata
        return int(m.total_groups * m.mean_puzzle_examples * self.epochs_per_iter // self.gbs)

    def iter_train(self):
        while self._pos < self.batches_per_pass():
            batch = self._global_batch(self._pass, self._pos)
            self._pos += 1
            yield "all", self._local(batch), self.gbs
        self._pass, self._pos = self._pass + 1, 0

    TEST_BATCHES = 2

    def test_layout(self) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """Every test row is its own puzzle and group (a grid set: subsets pick rows)."""
        rows = np.arange(self.TEST_BATCHES * self.gbs + 1)
        return [("all", rows, rows)]

    def iter_test(self, examples=None):
        if examples is not None:  # PuzzleLoader's subset iteration: the listed rows, padded with blanks
            rows = [self._global_batch(10_000, index) for index in range(self.TEST_BATCHES)]
            every = {k: torch.cat([r[k] for r in rows]) for k in rows[0]}
            ids = torch.as_tensor(np.asarray(examples["all"]), dtype=torch.long)
            for index, start in enumerate(range(0, len(ids), self.gbs)):
                take = ids[start : start + self.gbs]
                batch = {k: v[take] for k, v in every.items()}
                pad = self.gbs - len(take)
                batch = {
                    "inputs": torch.cat([batch["inputs"], torch.zeros(pad, self.metadata.seq_len, dtype=torch.int32)]),
                    "labels": torch.cat([batch["labels"], torch.full((pad, self.metadata.seq_len), -100, dtype=torch.int32)]),
                    "puzzle_identifiers": torch.cat([batch["puzzle_identifiers"], torch.zeros(pad, dtype=torch.int32)]),
                }  # fmt: skip
                if self.before_test_batch is not None:
                    self.before_test_batch(index)
                yield "all", self._local(batch), len(take)
            return
        for index in range(self.TEST_BATCHES):
            if self.before_test_batch is not None:
                self.before_test_batch(index)
            yield "all", self._local(self._global_batch(10_000, index)), self.gbs

    def state_dict(self) -> dict[str, int]:
        return {"pass": self._pass, "pos": self._pos}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._pass, self._pos = state["pass"], state["pos"]


# --- Tiny ARC inputs written to disk and the smoke build settings (data tests) ---------------------------

SMOKE_BUILD = {
    "subsets": ["training2", "evaluation2"],
    "test_set_name": "evaluation2",
    "num_aug": 8,
    "max_puzzles": 12,
}


def write_subset(directory: Path, subset: str, challenges: dict, solutions: dict | None = None) -> Path:
    """Write `<dir>/arc-agi_<subset>_{challenges,solutions}.json`; returns the input prefix."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"arc-agi_{subset}_challenges.json").write_text(json.dumps(challenges))
    if solutions is not None:
        (directory / f"arc-agi_{subset}_solutions.json").write_text(json.dumps(solutions))
    return directory / "arc-agi"


def tiny_task(seed: int, test_output: bool = True) -> tuple[dict, list]:
    """A small valid task with 2 demos and 1 test input (colours depend on seed), and its solutions."""
    a, b = seed % 9 + 1, (seed + 3) % 9 + 1
    task = {
        "train": [
            {"input": [[a, 0], [0, b]], "output": [[b, 0, 0], [0, a, 0]]},
            {"input": [[0, a, a]], "output": [[a], [b], [0]]},
        ],
        "test": [{"input": [[b, b], [a, 0], [0, 0]]}],
    }
    return task, [[[a, b], [b, a]]] if test_output else []


# --- A tiny real checkpoint, written by the trainer's own save path, on a tiny shipped-ARC dataset -------

TINY = get_recipe("debug-tiny")  # batch 8, 1 epoch, EMA
TINY_ARCH = [o for o in TINY.overrides if o.startswith("arch.")]  # what packaging an upstream file needs
SEEN_TASKS = 2  # the first tasks of each subset go into the dataset


@dataclass
class SmokeCheckpoint:
    """Paths of the smoke dataset and checkpoint, and the shipped evaluation tasks."""

    root: Path
    dataset: Path
    checkpoint: Path
    challenges: dict

    def write_challenges(self, name: str, task_ids: list[str]) -> Path:
        path = self.root / name
        path.write_text(json.dumps({t: self.challenges[t] for t in task_ids}))
        return path


def train_in_process(overrides: list[str]) -> None:
    """Compose `overrides`, fill the run defaults and train to the end in this process (exit 0)."""
    from trm.distributed import DistInfo
    from trm.training.config import compose, fill_run_defaults
    from trm.training.loop import Trainer

    cfg = compose(overrides)
    fill_run_defaults(cfg)
    trainer = Trainer.create(cfg, DistInfo())
    try:
        assert trainer.train() == 0
    finally:
        trainer.close()


def make_smoke(root: Path) -> SmokeCheckpoint:
    """Build the dataset, create a trainer, perturb its puzzle table and EMA, save step_0 with its code."""
    from trm.distributed import DistInfo
    from trm.training.config import compose, fill_run_defaults
    from trm.training.loop import Trainer

    dataset = root / "ds"
    build_arc_dataset(
        dataset,
        subsets=["training", "evaluation"],
        test_set_name="evaluation",
        num_aug=3,
        max_puzzles=SEEN_TASKS,
    )
    cfg = compose(
        [
            *TINY.overrides,
            "device=cpu",
            "compile=false",
            f"data_paths=[{dataset}]",
            f"checkpoint_path={root / 'run'}",
        ]
    )
    fill_run_defaults(cfg)
    trainer = Trainer.create(cfg, DistInfo())
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        table = trainer.components.model.puzzle_emb.weight
        table.copy_(torch.randn(table.shape, generator=generator))
        for shadow in trainer.components.ema.shadow.values():  # EMA weights differ from the live ones
            shadow.add_(0.25)
    trainer.save_checkpoint()
    trainer.close()
    challenges = json.loads(
        DEFAULT_PREFIX.with_name(DEFAULT_PREFIX.name + "_evaluation_challenges.json").read_text()
    )
    return SmokeCheckpoint(
        root=root, dataset=dataset, checkpoint=root / "run" / "step_0", challenges=challenges
    )


def torch_only_path(dest: Path) -> Path:
    """A folder of links to the installed torch and its own dependencies (nothing else), like a Kaggle
    image's preinstalled torch, for a fresh venv to see through a .pth file."""
    import importlib.metadata as md

    from packaging.requirements import Requirement

    dest.mkdir(parents=True, exist_ok=True)
    queue, seen = ["torch"], set()
    while queue:
        name = queue.pop()
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        key = dist.metadata["Name"].lower()
        if key in seen:
            continue
        seen.add(key)
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                queue.append(req.name)
        site = Path(dist.locate_file(""))
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            source = site / top
            if source.exists() and not (dest / top).exists() and top != "__pycache__":
                (dest / top).symlink_to(source)
    return dest


# --- Tiny model configs and batches (model tests) ----------------------------------------------------


def small_config(**overrides) -> TRMConfig:
    values = dict(
        batch_size=3,
        seq_len=10,
        vocab_size=7,
        num_puzzle_identifiers=5,
        puzzle_emb_ndim=16,
        puzzle_emb_len=2,
        H_cycles=2,
        L_cycles=2,
        L_layers=1,
        hidden_size=16,
        num_heads=2,
        halt_max_steps=4,
        forward_dtype="float32",
    )
    values.update(overrides)
    return TRMConfig(**values)


def make_batch(config: Any, seed: int = 0) -> dict[str, torch.Tensor]:
    """A random batch for any model config with batch_size, seq_len, vocab_size, num_puzzle_identifiers."""
    g = torch.Generator().manual_seed(seed)
    b, s = config.batch_size, config.seq_len
    labels = torch.randint(0, config.vocab_size, (b, s), generator=g, dtype=torch.int32)
    labels[:, -2:] = -100
    return {
        "inputs": torch.randint(0, config.vocab_size, (b, s), generator=g, dtype=torch.int32),
        "labels": labels,
        "puzzle_identifiers": torch.randint(
            0, config.num_puzzle_identifiers, (b,), generator=g, dtype=torch.int32
        ),
    }


# --- Reference checkouts (TRM_UPSTREAM, TRM_URM) ---------------------------------------------------------


def require_modules(*names: str) -> None:
    """Fail (never skip) when a reference checkout was asked for but its imports are missing."""
    import importlib.util

    missing = [name for name in names if importlib.util.find_spec(name) is None]
    if missing:
        pytest.fail(f"the reference code needs {', '.join(missing)}: pip install -e '.[upstream]'")


def without_timings(row: dict) -> dict:
    """A metrics.jsonl row without what depends on the host's clock (wall_time, evaluation time, perf/*)."""
    clock = ("wall_time", "eval/seconds", "eval/wall_share")
    return {k: v for k, v in row.items() if k not in clock and not k.startswith("perf/")}


# Operators whose result size or value the host must read from the device (a host synchronisation on a GPU).
HOST_SYNC_OPS = frozenset(
    {"_local_scalar_dense", "unique", "_unique", "_unique2", "unique_dim", "unique_consecutive", "nonzero",
     "nonzero_static", "masked_select", "is_nonzero", "equal"}
)  # fmt: skip


class HostSyncCounter(TorchDispatchMode):
    """Counts, by operator name, the data-dependent operators run inside the `with` block (on any device:
    on the CPU this finds the `.item()`, `unique` or boolean-mask code that would stall a GPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name.split("::")[-1]
        if name in HOST_SYNC_OPS:
            self.counts[name] += 1
        return func(*args, **(kwargs or {}))


def sign_sgd_reference(
    table: torch.Tensor, ids: torch.Tensor, grads: torch.Tensor, lr: float, weight_decay: float
) -> torch.Tensor:
    """The puzzle table after one SignSGD step as first written (and as upstream does it): `unique` +
    `index_add_` over the inverse, then w·(1 − lr·wd) − lr·sign(sum) on the touched rows."""
    unique_ids, inverse = ids.unique(return_inverse=True)
    summed = torch.zeros(unique_ids.shape[0], grads.shape[1], dtype=grads.dtype).index_add_(0, inverse, grads)
    out = table.clone()
    out[unique_ids] = table[unique_ids] * (1 - lr * weight_decay) - lr * torch.sign(summed)
    return out


# --- A local JSON HTTP API on 127.0.0.1 that answers canned replies and records each request -------------

Reply = tuple[int, Any]  # (HTTP status, a JSON-serialisable body)


@dataclass(frozen=True)
class HttpRequest:
    """One request the double received, as sent: the path as on the request line (a full URL when the
    client goes through the double as its proxy), the headers (looked up case-insensitively), the body."""

    method: str
    path: str
    headers: email.message.Message
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON ({} when there is none)."""
        return json.loads(self.body or b"{}")


Route = Callable[[HttpRequest], Reply] | Mapping[str, Reply | list[Reply]]


@dataclass
class JsonApi:
    """The running double: where it listens and the requests it got, in order."""

    port: int
    requests: list[HttpRequest] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _table_answer(table: Mapping[str, Reply | list[Reply]]) -> Callable[[HttpRequest], Reply]:
    """Answers from `table`, keyed by "METHOD /path", else "*" (no key: 404). A list is answered one reply a
    request to its key, the last one repeating (a server that fails, then recovers)."""
    served: collections.Counter[str] = collections.Counter()

    def answer(request: HttpRequest) -> Reply:
        key = next((k for k in (f"{request.method} {request.path}", "*") if k in table), None)
        if key is None:
            return 404, {"detail": f"the test double has no reply for {request.method} {request.path}"}
        replies = table[key]
        served[key] += 1
        return replies[min(served[key], len(replies)) - 1] if isinstance(replies, list) else replies

    return answer


@contextlib.contextmanager
def json_api(route: Route) -> Iterator[JsonApi]:
    """Serve on 127.0.0.1 (a free port) in a daemon thread until the `with` block ends. Each request is
    recorded, then answered by `route`: a function of the request, or a table (see `_table_answer`).
    Requests are handled one at a time, so a route may keep state without a lock."""
    answer = route if callable(route) else _table_answer(route)
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            request = HttpRequest(self.command, self.path, self.headers, body)
            with lock:
                api.requests.append(request)
                status, payload = answer(request)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    api = JsonApi(port=server.server_address[1])
    # a short poll: shutdown() waits for the serving loop's next look, 0.5 s by default
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
