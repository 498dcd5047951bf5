"""Named recipes: the dataset and the trainer configuration of each kind of run, written once.

A recipe is a typed `TrainConfig` (the schema of `python -m trm.train`) plus the ARC dataset it trains on.
The launcher (`TASK=<recipe>` of `scripts/train_prod.sh`), the CPU smoke, the benchmarks and the tests
all take their configuration from here; `Recipe.overrides` renders it as the command line of
`python -m trm.train` (the keys that differ from the schema's defaults, in the schema's order), and
`Recipe.with_changes` derives a variant without restating the rest.

Recipes:
- `arc2` / `arc1`: the paper's ARC-AGI-2 / ARC-AGI-1 runs (with ConceptARC, 1000 augmentations).
- `arc2-smoke`: the arc2 model for one epoch (one optimizer step) on the first 100 tasks of each subset: a first run on a new GPU host.
- `debug-tiny`: the smallest model that still exercises every code path (puzzle embedding, ACT halting,
  EMA, evaluation), on 4 puzzles: CPU rehearsals of the launcher, the smoke and the tests.
- `bench-tiny`: the CPU benchmark model (hidden 64, 4 heads, 1 layer, H 1, L 1, no puzzle embedding,
  fp32, batch 32), the configuration of the reference CPU measurements of upstream's trainer.
- `sudoku-mlp` / `sudoku-att` / `maze`: upstream README's Sudoku-Extreme (MLP-mixer or attention) and
  Maze-Hard runs, evaluated by exact accuracy only (`evaluators=[]`).
- `sudoku-curriculum`: `sudoku-mlp` with the opt-in depth curriculum of CGAR (arXiv 2511.08653): H, L
  cycles (1, 2) for the first 30 % of the steps, (2, 4) up to 60 %, then (3, 6); evaluation at full depth.
- `urm-arc1` / `urm-arc2` / `urm-sudoku`: the Universal Reasoning Model with the settings of its
  reference's `scripts/URM_arcagi1.sh`, `URM_arcagi2.sh` (Muon) and `URM_sudoku.sh`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trm.errors import TRMError
from trm.model.schema import TRMArch, URMArch
from trm.training.config import (
    BestConfig,
    DepthCurriculumConfig,
    EvalSubsetConfig,
    TrainConfig,
    as_dict,
    train_config,
)

GIB = 1024**3

# The published ARC model: 2 layers, H 3, L 4 (the schema's defaults are upstream's: L 6).
ARC_ARCH = TRMArch(L_layers=2, H_cycles=3, L_cycles=4)
# The tiny model of the CPU runs and tests: every code path, seconds per run.
TINY_ARCH = TRMArch(
    hidden_size=16,
    num_heads=2,
    L_layers=1,
    H_cycles=1,
    L_cycles=1,
    halt_max_steps=2,
    puzzle_emb_ndim=8,
    puzzle_emb_len=1,
    forward_dtype="float32",
)
_PLAIN_VALUE = re.compile(r"[\w.@/:+-]+")


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """One kind of run: the trainer configuration, the dataset it trains on, the expected checkpoint size."""

    name: str
    summary: str
    """One line for help texts."""
    config: TrainConfig
    """Everything but the paths (data_paths, checkpoint_path, run_name), which the caller sets."""
    dataset: str
    """Dataset directory name (under DATA_DIR for the launcher)."""
    build_args: tuple[str, ...]
    """`python -m trm data <builder>` selection flags that build `dataset`."""
    builder: str = "build-arc"
    """The `python -m trm data` subcommand that builds `dataset`: build-arc, build-sudoku or build-maze."""
    checkpoint_bytes: int
    """Expected size of one checkpoint before the first exists (weights + EMA + optimizer + puzzle table)."""

    @property
    def global_batch_size(self) -> int:
        """Examples per optimizer step over all ranks: part of the training math."""
        return self.config.global_batch_size

    @property
    def arch(self) -> str:
        """The registry name of the recipe's architecture (`arch=<name>`)."""
        from trm.model.registry import spec_of

        return spec_of(self.config.arch).name

    @property
    def overrides(self) -> tuple[str, ...]:
        """The config as `python -m trm.train` overrides: `arch=<name>` when it is not TRM, then every key
        that differs from that architecture's schema defaults."""
        defaults = flatten(as_dict(train_config(self.arch)))
        picked = () if self.arch == "trm" else (f"arch={self.arch}",)
        changed = (
            f"{key}={_hydra_value(value)}"
            for key, value in flatten(as_dict(self.config)).items()
            if defaults.get(key) != value
        )
        return (*picked, *changed)

    def with_changes(self, *, arch: Mapping[str, Any] | None = None, **train: Any) -> Recipe:
        """A variant: `arch` keys replace the architecture's, the other keywords top-level keys."""
        try:
            config = dataclasses.replace(
                self.config, arch=dataclasses.replace(self.config.arch, **(arch or {})), **train
            )
        except TypeError as err:
            raise TRMError(
                f"recipe {self.name}: {err}; use the keys of `python -m trm.train --help`"
            ) from None
        return dataclasses.replace(self, config=config)

    def model_config(
        self, *, batch_size: int, seq_len: int, vocab_size: int, num_puzzle_identifiers: int
    ) -> Any:
        """The model's config for the given data shapes (what the trainer builds from a dataset)."""
        from trm.model.registry import model_config

        arch = self.config.arch
        if not isinstance(arch.puzzle_emb_ndim, int):  # the schema default: `${.hidden_size}`
            arch = dataclasses.replace(arch, puzzle_emb_ndim=arch.hidden_size)
        return model_config(
            arch,
            batch_size=batch_size,
            seq_len=seq_len,
            vocab_size=vocab_size,
            num_puzzle_identifiers=num_puzzle_identifiers,
        )


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted keys of a nested mapping: {"arch": {"L_cycles": 4}} -> {"arch.L_cycles": 4}."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _hydra_value(value: Any) -> str:
    """A Python value in Hydra's override grammar."""
    if value is None:
        return "null"
    if isinstance(value, bool | int | float):
        return str(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(_hydra_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{_hydra_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    return text if _PLAIN_VALUE.fullmatch(text) else "'" + text.replace("'", "\\'") + "'"


# Upstream README's Sudoku-Extreme and Maze-Hard runs: 50k epochs, exact accuracy only (no ARC evaluator).
_GRID_RUN: dict[str, Any] = dict(
    evaluators=[],
    epochs=50000,
    eval_interval=5000,
    lr=1e-4,
    puzzle_emb_lr=1e-4,
    weight_decay=1.0,
    puzzle_emb_weight_decay=1.0,
    ema=True,
)
_SUDOKU_BUILD = ("--subsample-size", "1000", "--num-aug", "1000")
# One shared puzzle-embedding row: the 5-7 M-parameter core, its EMA and two Adam moments.
_GRID_CHECKPOINT = 256 * 1024**2

_ARC2_SUBSETS = ("--subsets", "training2", "evaluation2", "concept", "--test-set-name", "evaluation2")
_ARC1_SUBSETS = ("--subsets", "training", "evaluation", "concept", "--test-set-name", "evaluation")


# Both checkpoint every evaluation (checkpoint.every_eval, the default), as upstream saves after each one.
# In-run evaluations read a tenth of each test task's augmentations (every task still voted on, over ~100 of
# its 1000 augmentations); the run's end evaluates the best 3 checkpoints by that score on the whole test set
# and keeps the best of them: a twelfth of the evaluation hours, the same best checkpoint (evidence, measured
# on CPU: docs/training.md, "Evidence: does the subset rank checkpoints like the full set?" for row subsets
# and "Evidence for ARC: augmentation subsets against the full ARC evaluation").
def _arc_run() -> dict[str, Any]:
    """The paper ARC runs' training keys (fresh config objects for each recipe)."""
    return dict(
        ema=True,
        epochs=100000,
        eval_interval=800,
        eval_subset=EvalSubsetConfig(fraction=0.1),
        best=BestConfig(top_k=3),
    )


# The URM reference's scripts (URM_arcagi1.sh, URM_arcagi2.sh, URM_sudoku.sh): one model for all three
# tasks, 4 blocks, H 2 (truncated backprop: the first cycle without gradient), L 6, 16 ACT loops.
URM_ARCH = URMArch(loops=16, H_cycles=2, L_cycles=6, num_layers=4)
_URM_ARC_RUN: dict[str, Any] = dict(
    ema=True, epochs=200000, eval_interval=2000, puzzle_emb_lr=1e-2, weight_decay=0.1
)
# URM_sudoku.sh is upstream's Sudoku run (the same lr, decays and 50k epochs) at batch 128, evaluated every 2000.
_URM_SUDOKU_RUN: dict[str, Any] = {**_GRID_RUN, "eval_interval": 2000, "global_batch_size": 128}

RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe(
            name="arc2",
            summary="ARC-AGI-2 + ConceptARC",
            config=TrainConfig(arch=dataclasses.replace(ARC_ARCH), **_arc_run()),
            dataset="arc2concept-aug-1000",
            build_args=_ARC2_SUBSETS,
            # ~1.3 M puzzle identifiers x 512 floats (2.6 GB) twice (weights, EMA) + the 7 M-parameter core.
            checkpoint_bytes=6 * GIB,
        ),
        Recipe(
            name="arc1",
            summary="ARC-AGI-1 + ConceptARC",
            config=TrainConfig(arch=dataclasses.replace(ARC_ARCH), **_arc_run()),
            dataset="arc1concept-aug-1000",
            build_args=_ARC1_SUBSETS,
            checkpoint_bytes=4 * GIB,
        ),
        Recipe(
            name="arc2-smoke",
            summary="the arc2 model on the first 100 tasks of each of its 3 subsets at 100 augmentations; its 1 epoch is 1 optimizer step, then an evaluation",
            config=TrainConfig(arch=dataclasses.replace(ARC_ARCH), epochs=1, eval_interval=1),
            dataset="arc2concept-aug-100",
            build_args=(*_ARC2_SUBSETS, "--num-aug", "100", "--max-puzzles", "100"),
            checkpoint_bytes=1 * GIB,
        ),
        Recipe(
            name="debug-tiny",
            summary="a tiny model on 4 puzzles, for CPU rehearsals and tests",
            config=TrainConfig(
                arch=dataclasses.replace(TINY_ARCH),
                global_batch_size=8,
                epochs=1,
                eval_interval=1,
                lr=1e-3,
                lr_warmup_steps=1,
                ema=True,
            ),
            dataset="arc2-tiny",
            build_args=(
                "--subsets",
                "training2",
                "evaluation2",
                "--test-set-name",
                "evaluation2",
                "--num-aug",
                "1",
                "--max-puzzles",
                "4",
            ),
            checkpoint_bytes=16 * 1024**2,
        ),
        Recipe(
            name="bench-tiny",
            summary="the CPU benchmark model: hidden 64, no puzzle embedding, batch 32",
            config=TrainConfig(
                arch=TRMArch(
                    hidden_size=64,
                    num_heads=4,
                    L_layers=1,
                    H_cycles=1,
                    L_cycles=1,
                    puzzle_emb_ndim=0,
                    puzzle_emb_len=0,
                    forward_dtype="float32",
                ),
                global_batch_size=32,
                lr=1e-3,
                lr_warmup_steps=10,
            ),
            dataset="arc1-bench-tiny",
            build_args=(
                "--subsets",
                "training",
                "evaluation",
                "--test-set-name",
                "evaluation",
                "--num-aug",
                "8",
                "--max-puzzles",
                "16",
            ),
            checkpoint_bytes=64 * 1024**2,
        ),
        Recipe(
            name="sudoku-mlp",
            summary="Sudoku-Extreme, 1k puzzles x 1000 shuffles, MLP-mixer (the paper's 87%)",
            config=TrainConfig(
                arch=TRMArch(mlp_t=True, pos_encodings="none", L_layers=2, H_cycles=3, L_cycles=6),
                **_GRID_RUN,
            ),
            dataset="sudoku-extreme-1k-aug-1000",
            builder="build-sudoku",
            build_args=_SUDOKU_BUILD,
            checkpoint_bytes=_GRID_CHECKPOINT,
        ),
        Recipe(
            name="sudoku-att",
            summary="Sudoku-Extreme, 1k puzzles x 1000 shuffles, attention",
            config=TrainConfig(arch=TRMArch(L_layers=2, H_cycles=3, L_cycles=6), **_GRID_RUN),
            dataset="sudoku-extreme-1k-aug-1000",
            builder="build-sudoku",
            build_args=_SUDOKU_BUILD,
            checkpoint_bytes=_GRID_CHECKPOINT,
        ),
        Recipe(
            name="maze",
            summary="Maze-Hard 30x30, 1k mazes (upstream README's build: no augmentation), attention",
            config=TrainConfig(arch=dataclasses.replace(ARC_ARCH), **_GRID_RUN),
            dataset="maze-30x30-hard-1k",
            builder="build-maze",
            build_args=(),
            checkpoint_bytes=_GRID_CHECKPOINT,
        ),
    )
}


def _urm(base: str, name: str, summary: str, config: TrainConfig) -> Recipe:
    """A URM recipe on the dataset of TRM's `base` (and its checkpoint size: the 512-wide puzzle table,
    one prefix position in URM, dominates both; URM's core is 13.7 M parameters)."""
    return dataclasses.replace(RECIPES[base], name=name, summary=summary, config=config)


RECIPES.update(
    (r.name, r)
    for r in (
        _urm(
            "arc1",
            "urm-arc1",
            "URM on ARC-AGI-1 + ConceptARC (the reference's URM_arcagi1.sh)",
            TrainConfig(arch=dataclasses.replace(URM_ARCH), **_URM_ARC_RUN),
        ),
        _urm(
            "arc2",
            "urm-arc2",
            "URM on ARC-AGI-2 + ConceptARC with Muon (the reference's URM_arcagi2.sh)",
            TrainConfig(arch=dataclasses.replace(URM_ARCH), use_muon=True, **_URM_ARC_RUN),
        ),
        _urm(
            "sudoku-mlp",
            "urm-sudoku",
            "URM on Sudoku-Extreme, 1k puzzles x 1000 shuffles, batch 128 (the reference's URM_sudoku.sh)",
            TrainConfig(arch=dataclasses.replace(URM_ARCH), **_URM_SUDOKU_RUN),
        ),
    )
)


# Opt-in variants that change training (never a recipe's default): CGAR's progressive depth curriculum
# (arXiv 2511.08653) on upstream's Sudoku MLP run: (H, L) = (1, 2) for the first 30 % of the steps, (2, 4) up
# to 60 %, then the recipe's (3, 6); evaluation always at full depth (trm.training.curriculum).
RECIPES["sudoku-curriculum"] = RECIPES["sudoku-mlp"].with_changes(
    depth_curriculum=DepthCurriculumConfig(ramp=0.6, stages=3)
)
RECIPES["sudoku-curriculum"] = dataclasses.replace(
    RECIPES["sudoku-curriculum"],
    name="sudoku-curriculum",
    summary="sudoku-mlp with CGAR's depth curriculum (opt-in: fewer cycles for the first 60 % of the steps)",
)


def get_recipe(name: str) -> Recipe:
    """The recipe called `name`; TRMError lists the choices."""
    try:
        return RECIPES[name]
    except KeyError:
        raise TRMError(f"unknown recipe {name!r}; use one of {', '.join(RECIPES)}") from None
