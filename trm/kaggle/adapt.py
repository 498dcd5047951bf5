"""Adaptation inside the bundle's inference: tasks without trained rows get rows trained on their
demonstrations (`trm.adapt`) before the vote, within a time budget.

The bundle's `config.json` carries the run's training config (`train`); its table's rows before
`unseen_id` are the trained rows named by `identifiers.json` and row `unseen_id` is their mean, the row
every new identifier starts from. The adapted checkpoint is packaged (without wheels) into a bundle
under the adaptation folder and inference runs on that bundle.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import torch

from trm.adapt.run import AdaptResult, AdaptSettings, AdaptSource, adapt
from trm.errors import TRMError
from trm.kaggle import bundle as B
from trm.model.upstream import PUZZLE_EMB_KEY

log = logging.getLogger(__name__)
ADAPTED_BUNDLE = "bundle"


def source_from_bundle(bundle: B.Bundle, device: torch.device) -> AdaptSource:
    """The bundle as a starting point: its training config (on `device`), weights, trained rows, mean row."""
    from trm.training.config import from_dict

    train = bundle.config.get("train")
    if train is None:
        raise TRMError(
            f"{bundle.path}/{B.CONFIG} has no training config (packaged before adaptation existed): "
            "repackage the checkpoint with `python -m trm package kaggle` to adapt with it"
        )
    cfg = dataclasses.replace(from_dict(train), device=device.type)
    weights = torch.load(bundle.path / B.WEIGHTS, map_location="cpu", weights_only=True)
    table = weights.get(PUZZLE_EMB_KEY)
    mean = None
    if table is not None:
        unseen = bundle.unseen_id
        mean = table[unseen : unseen + 1].clone()
        weights[PUZZLE_EMB_KEY] = table[:unseen].clone()  # the trained rows (blank row first)
    return AdaptSource(cfg, weights, bundle.identifiers, mean, f"bundle {bundle.path}")


def adapt_bundle(
    bundle: B.Bundle,
    challenges: str | Path,
    work_dir: str | Path,
    settings: AdaptSettings,
    device: torch.device,
    *,
    batch_size: int,
    early_halt: bool,
) -> tuple[B.Bundle, AdaptResult]:
    """Adapt the bundle's model to `challenges` in `work_dir` and load the adapted bundle for inference."""
    from trm.kaggle.package import package_kaggle

    work_dir = Path(work_dir)
    result = adapt(source_from_bundle(bundle, device), challenges, work_dir, settings)
    adapted = work_dir / ADAPTED_BUNDLE
    package_kaggle(
        result.checkpoint, adapted, wheels=False, overwrite=True, progress=False,
        out_name="the adapted bundle in --adapt-dir,", use="infer",
    )  # fmt: skip
    log.info("adapted bundle: %s (step %d)", adapted, result.step)
    return B.load_bundle(adapted, device, batch_size=batch_size, early_halt=early_halt), result
