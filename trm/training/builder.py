"""Build the run's components from a TrainConfig: loaders, model + loss head, optimizers, EMA, evaluators."""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from trm.compile_setting import torch_compile_mode
from trm.distributed import DistInfo
from trm.errors import TRMError
from trm.training.accumulation import MicroBatchSplit
from trm.training.config import TrainConfig

log = logging.getLogger(__name__)


@dataclass
class Optim:
    """One optimizer and the base LR the schedule scales."""

    name: str
    optimizer: torch.optim.Optimizer
    base_lr: float


@dataclass
class Components:
    """Everything a run trains and evaluates with."""

    train_loader: Any
    test_loader: Any | None
    model: nn.Module
    loss_head: nn.Module
    step_module: nn.Module
    optimizers: list[Optim]
    ema: Any | None
    evaluators: list[Any]
    plan: MicroBatchSplit
    subset: Any | None = None
    """The subset evaluation's loader view and evaluators (trm.training.subset_eval), when eval_subset.fraction < 1."""


def forward_dtype(cfg: TrainConfig, device: torch.device) -> str:
    """`auto` → bfloat16 on CUDA, float32 on CPU (bf16 is slower there and not the reference)."""
    if cfg.arch.forward_dtype != "auto":
        return cfg.arch.forward_dtype
    return "bfloat16" if device.type == "cuda" else "float32"


def arch_identity(cfg: TrainConfig) -> dict[str, Any]:
    """Architecture keys that fix parameter shapes and semantics (compared on resume)."""
    from trm.training.config import ARCH_RESUMABLE_KEYS

    arch = dataclasses.asdict(cfg.arch)
    return {k: v for k, v in arch.items() if k not in ARCH_RESUMABLE_KEYS}


def build_loaders(cfg: TrainConfig, info: DistInfo) -> tuple[Any, Any | None]:
    """Train loader over data_paths and test loader over data_paths_test (or data_paths)."""
    from trm.data.loader import PuzzleLoader

    epochs_per_iter = cfg.eval_interval or cfg.epochs
    share = functools.partial(
        PuzzleLoader, global_batch_size=cfg.global_batch_size, rank=info.rank, world_size=info.world_size
    )
    train = share(
        cfg.data_paths,
        "train",
        seed=cfg.seed,
        epochs_per_iter=epochs_per_iter,
        prefetch=cfg.loader_prefetch,
        pin_memory=info.device.type == "cuda",
    )
    test = share(cfg.data_paths_test or cfg.data_paths, "test", seed=cfg.seed)
    return train, test


def build_model(
    cfg: TrainConfig, metadata: Any, plan: MicroBatchSplit, device: torch.device
) -> tuple[Any, Any]:
    """The arch's ACT model + ACTLossHead on `device`, sized from the dataset metadata."""
    from trm.model import ACTLossHead
    from trm.model.registry import build_model as build_arch
    from trm.model.registry import model_config

    model_cfg = model_config(
        cfg.arch,
        batch_size=plan.micro_batch_size,
        seq_len=metadata.seq_len,
        vocab_size=metadata.vocab_size,
        num_puzzle_identifiers=metadata.num_puzzle_identifiers,
        forward_dtype=forward_dtype(cfg, device),
    )
    with torch.device(device):
        model = build_arch(model_cfg)
    loss_head = ACTLossHead(model, cfg.arch.loss.loss_type).to(device)
    return model, loss_head


def compile_wanted(cfg: TrainConfig, device: torch.device) -> bool:
    """compile=auto compiles on CUDA only (DISABLE_COMPILE turns auto off, see config.apply_environment)."""
    if cfg.compile == "true":
        return True
    return cfg.compile == "auto" and device.type == "cuda" and not os.environ.get("DISABLE_COMPILE")


def compiled_if_wanted(cfg: TrainConfig, device: torch.device, loss_head: nn.Module) -> nn.Module:
    """The module that trains and evaluates: `torch.compile(loss_head)` (in `compile_mode`) when
    `compile_wanted`, else the head. Training and evaluation share it (one graph each: evaluation pads its
    chunks, trm.evaluation.runner)."""
    if compile_wanted(cfg, device):
        return torch.compile(loss_head, mode=torch_compile_mode(cfg.compile_mode))  # type: ignore[return-value]
    return loss_head


def build_optimizers(cfg: TrainConfig, model: Any, rows_per_rank: int | None = None) -> list[Optim]:
    """Upstream's list: [SignSGD (puzzle table), AdamATan2 (all parameters)], minus what is disabled;
    with use_muon, URM's Muon (2-D parameters) + AdamW (the rest) replaces AdamATan2. `rows_per_rank`:
    the puzzle rows every rank hands out per step, when fixed (the trainer's per-process batch)."""
    from trm.optim import SparseEmbeddingSignSGD, build_adam_atan2, build_muon

    optimizers: list[Optim] = []
    if model.puzzle_emb is not None:
        sign = SparseEmbeddingSignSGD(
            model.puzzle_emb, lr=0.0, weight_decay=cfg.puzzle_emb_weight_decay, rows_per_rank=rows_per_rank
        )
        optimizers.append(Optim("puzzle_emb", sign, cfg.puzzle_emb_lr))
    if cfg.use_muon and (model.puzzle_emb is None or not cfg.freeze_weights):
        muon = build_muon(model, lr=0.0, weight_decay=cfg.weight_decay, betas=(cfg.beta1, cfg.beta2))
        optimizers.append(Optim("muon", muon, cfg.lr))
    elif model.puzzle_emb is None or not cfg.freeze_weights:
        adam = build_adam_atan2(
            model.parameters(), lr=0.0, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay
        )
        optimizers.append(Optim("adam_atan2", adam, cfg.lr))
    elif cfg.freeze_weights and model.puzzle_emb is None:
        raise TRMError("freeze_weights=True with arch.puzzle_emb_ndim=0 leaves nothing to train.")
    return optimizers


def build(cfg: TrainConfig, info: DistInfo, loaders: tuple[Any, Any | None] | None = None) -> Components:
    """Loaders (built from data_paths unless given), model (rank 0's init broadcast), optimizers, EMA."""
    from trm.distributed import broadcast_params_
    from trm.evaluation.arc import build_evaluators
    from trm.optim import EMA

    plan = MicroBatchSplit.create(cfg.global_batch_size, info.world_size, info.rank, cfg.micro_batch_size)
    train_loader, test_loader = loaders if loaders is not None else build_loaders(cfg, info)
    torch.manual_seed(cfg.seed + info.rank)
    model, loss_head = build_model(cfg, train_loader.metadata, plan, info.device)
    broadcast_params_(model, info)
    step_module = compiled_if_wanted(cfg, info.device, loss_head)
    # Each optimizer step hands out one forward per micro-batch: the per-process batch, on every rank.
    optimizers = build_optimizers(cfg, model, rows_per_rank=plan.local_batch_size)
    ema = EMA(model, cfg.ema_rate) if cfg.ema else None
    evaluators = build_evaluators(cfg.evaluators, test_loader) if test_loader is not None else []
    if info.is_main:
        n_params = sum(p.numel() for p in model.parameters())
        log.info(
            "model: %s trainable parameters; %d micro-batch(es) of %d per process",
            f"{n_params:,}",
            plan.accum_steps,
            plan.micro_batch_size,
        )
    from trm.training.subset_eval import build_subset_target

    return Components(
        train_loader,
        test_loader,
        model,
        loss_head,
        step_module,
        optimizers,
        ema,
        evaluators,
        plan,
        build_subset_target(cfg, test_loader),
    )
