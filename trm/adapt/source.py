"""Where adaptation starts: a checkpoint (ours or a reference file) and its run's identifiers."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from trm.adapt.rows import mean_trained_row
from trm.adapt.run import AdaptSource
from trm.model.upstream import PUZZLE_EMB_KEY

log = logging.getLogger(__name__)


def source_from_checkpoint(checkpoint: str | Path, overrides: list[str] | None = None) -> AdaptSource:
    """The run config, weights (EMA when saved) and row identifiers of `checkpoint`.

    The identifiers come from the run's dataset (`identifiers.json` of its single data path) when that
    is at hand and has one name per row; otherwise every identifier of the task file starts from the
    mean row (the identifiers only let tasks the run was trained on keep their rows)."""
    from trm.model.registry import spec_of
    from trm.training.checkpointing.initial_weights import read_checkpoint_weights
    from trm.training.standalone_eval import resolve_config

    checkpoint = Path(checkpoint)
    cfg, _step, _ours = resolve_config(checkpoint, list(overrides or []), use="adapt")
    weights, kind = read_checkpoint_weights(str(checkpoint), spec_of(cfg.arch).name)
    table = weights.get(PUZZLE_EMB_KEY)
    names = None
    if table is not None and len(cfg.data_paths) == 1:
        path = Path(cfg.data_paths[0]) / "identifiers.json"
        if path.is_file():
            names = json.loads(path.read_text(encoding="utf-8"))
            if len(names) != len(table):
                log.warning("%s has %d names for %d rows: not using it", path, len(names), len(table))
                names = None
    if table is not None and names is None:
        log.warning("no identifiers of %s's rows: every identifier starts from the mean row", checkpoint)
    mean = mean_trained_row(table) if table is not None else None
    return AdaptSource(cfg, weights, names, mean, f"{checkpoint} ({kind})")
