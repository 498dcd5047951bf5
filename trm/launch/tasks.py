"""Named training tasks: which dataset to build and which trainer overrides define the run."""

from __future__ import annotations

from dataclasses import dataclass

from trm.errors import TRMError

GIB = 1024**3

# The architecture of the published ARC runs (USER_GUIDES production command).
_ARC_ARCH = ("arch=trm", "arch.L_layers=2", "arch.H_cycles=3", "arch.L_cycles=4")
# Upstream README's Sudoku-Extreme / Maze-Hard runs: exact accuracy only (no ARC evaluator), 50k epochs.
_GRID_TRAINING = (
    "evaluators=[]", "epochs=50000", "eval_interval=5000", "lr=1e-4", "puzzle_emb_lr=1e-4",
    "weight_decay=1.0", "puzzle_emb_weight_decay=1.0", "ema=True", "checkpoint_every_eval=True",
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Task:
    """A dataset recipe plus the trainer overrides of one kind of run."""

    name: str
    dataset: str
    build_args: tuple[str, ...]
    builder: str = "build-arc"
    """The `python -m trm data` subcommand that builds `dataset` from `build_args`."""
    overrides: tuple[str, ...]
    global_batch_size: int = 768
    checkpoint_bytes: int
    """Expected size of one checkpoint before the first exists (weights + EMA + optimizer + puzzle table)."""


TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        Task(
            name="arc2",
            dataset="arc2concept-aug-1000",
            build_args=("--subsets", "training2", "evaluation2", "concept", "--test-set-name", "evaluation2"),
            overrides=(*_ARC_ARCH, "ema=True", "epochs=100000", "eval_interval=800", "checkpoint_every_eval=True"),
            # ~1.3 M puzzle identifiers x 512 floats (2.6 GB) twice (weights, EMA) + the 7 M-parameter core.
            checkpoint_bytes=6 * GIB,
        ),
        Task(
            name="arc1",
            dataset="arc1concept-aug-1000",
            build_args=("--subsets", "training", "evaluation", "concept", "--test-set-name", "evaluation"),
            overrides=(*_ARC_ARCH, "ema=True", "epochs=100000", "eval_interval=800", "checkpoint_every_eval=True"),
            checkpoint_bytes=4 * GIB,
        ),
        Task(
            name="arc2-smoke",
            dataset="arc2concept-aug-100",
            build_args=(
                "--subsets", "training2", "evaluation2", "concept", "--test-set-name", "evaluation2",
                "--num-aug", "100", "--max-puzzles", "100",
            ),
            overrides=(*_ARC_ARCH, "epochs=1", "eval_interval=1"),
            checkpoint_bytes=1 * GIB,
        ),
        Task(
            name="cpu-tiny",
            dataset="arc2-tiny",
            build_args=(
                "--subsets", "training2", "evaluation2", "--test-set-name", "evaluation2",
                "--num-aug", "1", "--max-puzzles", "4",
            ),
            overrides=(
                "arch=trm", "arch.hidden_size=64", "arch.num_heads=4", "arch.L_layers=1", "arch.H_cycles=1",
                "arch.L_cycles=1", "arch.puzzle_emb_ndim=0", "arch.puzzle_emb_len=0", "arch.halt_max_steps=2",
                "arch.forward_dtype=float32", "epochs=1", "eval_interval=1", "lr_warmup_steps=1",
            ),
            global_batch_size=8,
            checkpoint_bytes=16 * 1024**2,
        ),
        Task(
            name="sudoku-mlp",
            dataset="sudoku-extreme-1k-aug-1000",
            builder="build-sudoku",
            build_args=("--subsample-size", "1000", "--num-aug", "1000"),
            overrides=(
                "arch=trm", "arch.mlp_t=True", "arch.pos_encodings=none", "arch.L_layers=2", "arch.H_cycles=3",
                "arch.L_cycles=6", *_GRID_TRAINING,
            ),
            # one shared puzzle-embedding row: the ~5 M-parameter core, its EMA and two Adam moments
            checkpoint_bytes=256 * 1024**2,
        ),
        Task(
            name="sudoku-att",
            dataset="sudoku-extreme-1k-aug-1000",
            builder="build-sudoku",
            build_args=("--subsample-size", "1000", "--num-aug", "1000"),
            overrides=("arch=trm", "arch.L_layers=2", "arch.H_cycles=3", "arch.L_cycles=6", *_GRID_TRAINING),
            checkpoint_bytes=256 * 1024**2,
        ),
        Task(
            name="maze",
            dataset="maze-30x30-hard-1k",
            builder="build-maze",
            build_args=(),  # upstream's README runs the builder with its defaults (no --aug)
            overrides=(*_ARC_ARCH, *_GRID_TRAINING),
            checkpoint_bytes=256 * 1024**2,
        ),
    )
}  # fmt: skip


def get_task(name: str) -> Task:
    """The task called `name`; TRMError lists the choices."""
    try:
        return TASKS[name]
    except KeyError:
        raise TRMError(f"unknown TASK {name!r}; use one of {', '.join(TASKS)}") from None
