"""A tiny real checkpoint (written by the trainer's own save path) on a tiny shipped-ARC dataset."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from trm.data.arc_source import DEFAULT_PREFIX
from trm.data.build_arc import build_arc_dataset
from trm.training.recipes import get_recipe

TINY = get_recipe("debug-tiny")  # batch 8, 1 epoch, EMA
TINY_ARCH = [o for o in TINY.overrides if o.startswith("arch.")]  # what packaging an upstream file needs
SEEN_TASKS = 2  # the first tasks of each subset go into the dataset


@dataclass
class Smoke:
    """Paths of the smoke dataset and checkpoint, and the shipped evaluation tasks."""

    root: Path
    dataset: Path
    checkpoint: Path
    challenges: dict

    def write_challenges(self, name: str, task_ids: list[str]) -> Path:
        path = self.root / name
        path.write_text(json.dumps({t: self.challenges[t] for t in task_ids}))
        return path


def make_smoke(root: Path) -> Smoke:
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
    return Smoke(root=root, dataset=dataset, checkpoint=root / "run" / "step_0", challenges=challenges)


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
