"""The adaptation budget's command-line flags, shared by `trm adapt`, `trm infer` and `trm.eval`."""

from __future__ import annotations

import argparse
from typing import Any

from trm.adapt.run import TRAIN_CHOICES, AdaptSettings


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
        default="all",
        help="what moves: all parameters (default: the new tasks' rules need not be among the trained "
        "ones) or only the puzzle embeddings (cheaper, cannot forget)",
    )
    parser.add_argument(
        f"--{prefix}num-aug",
        type=int,
        default=1000,
        help="augmentations per task, as build-arc (default 1000)",
    )
    parser.add_argument(f"--{prefix}seed", type=int, default=42, help="the builder's seed (default 42)")


def settings_from(args: argparse.Namespace, overrides: list[str], prefix: str = "") -> AdaptSettings:
    """AdaptSettings from the flags `add_budget_flags` added."""
    key = prefix.replace("-", "_")
    return AdaptSettings(
        steps=getattr(args, f"{key}steps"),
        minutes=getattr(args, f"{key}minutes"),
        train=getattr(args, f"{key}train"),
        num_aug=getattr(args, f"{key}num_aug"),
        seed=getattr(args, f"{key}seed"),
        overrides=tuple(overrides),
        progress=not getattr(args, "quiet", False),
    )
