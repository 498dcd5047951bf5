"""The adaptation budget's command-line flags, shared by `trm adapt`, `trm infer` and `trm.eval`."""

from __future__ import annotations

import argparse
from typing import Any

from trm.adapt.run import TRAIN_CHOICES, AdaptSettings

# The budget flags without their prefix; they default to None on the command line so that `given_flags`
# can tell which ones the user gave, and `settings_from` fills in AdaptSettings' defaults.
BUDGET_FLAGS = ("steps", "minutes", "train", "num-aug", "seed")
_DEFAULTS = AdaptSettings()


def add_budget_flags(parser: Any, prefix: str = "") -> None:
    """--steps / --minutes / --train / --num-aug / --seed (with `prefix`, e.g. `adapt-`)."""
    parser.add_argument(
        f"--{prefix}steps",
        type=int,
        default=None,
        help="optimizer steps of adaptation (0: write the unadapted start, every new row the mean row)",
    )
    parser.add_argument(
        f"--{prefix}minutes",
        type=float,
        default=None,
        help="time budget in minutes, dataset build included: saves and stops when it runs out",
    )
    parser.add_argument(
        f"--{prefix}train",
        choices=TRAIN_CHOICES,
        default=None,
        help=f"what moves: all parameters (default {_DEFAULTS.train}: the new tasks' rules need not be among "
        "the trained ones) or only the puzzle embeddings (cheaper, cannot forget)",
    )
    parser.add_argument(
        f"--{prefix}num-aug",
        type=int,
        default=None,
        help=f"augmentations per task, as build-arc (default {_DEFAULTS.num_aug})",
    )
    parser.add_argument(
        f"--{prefix}seed", type=int, default=None, help=f"the builder's seed (default {_DEFAULTS.seed})"
    )


def given_flags(args: argparse.Namespace, prefix: str = "") -> list[str]:
    """The budget flags (`--{prefix}…`) given on the command line, in `BUDGET_FLAGS` order."""
    key = prefix.replace("-", "_")
    return [f"--{prefix}{f}" for f in BUDGET_FLAGS if getattr(args, key + f.replace("-", "_")) is not None]


def settings_from(args: argparse.Namespace, overrides: list[str], prefix: str = "") -> AdaptSettings:
    """AdaptSettings from the flags `add_budget_flags` added, checked up front: TRMError naming this
    command's flags (`--{prefix}steps` …) before anything is loaded or written."""
    key = prefix.replace("-", "_")

    def value(name: str) -> Any:
        given = getattr(args, key + name)
        return getattr(_DEFAULTS, name) if given is None else given

    settings = AdaptSettings(
        steps=getattr(args, f"{key}steps"),
        minutes=getattr(args, f"{key}minutes"),
        train=value("train"),
        num_aug=value("num_aug"),
        seed=value("seed"),
        overrides=tuple(overrides),
        progress=not getattr(args, "quiet", False),
    )
    settings.check(prefix)
    return settings
