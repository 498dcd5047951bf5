"""Non-finite loss or gradients: flagged on the device every step, read where the loop already syncs,
never saved.

Each step computes, on the device and without a host sync, one flag for the step's losses and one for
the global L2 norm of the all-reduced dense gradients (the norm `grad_clip_norm` clips with). The loop
reads the flags in the per-step `distributed.any_rank` all-reduce it already does for stop and save
requests, so a multi-rank run adds no host sync; a single process reads them there too (free on CPU;
on one GPU the read waits for the step's last kernels, as the next forward's halting check would). The
optimizer step of that step has run by then: its weights are never saved (the run stops at once, and
`check_weights` at the top of every save refuses non-finite weights, e.g. an optimizer that produced
them from finite gradients). Every rank then writes a repro (its batch, the RNG state before the step,
the step) and exits NONFINITE (78), which orchestrators must not retry: the resumed run replays the same
data. The puzzle embedding's sparse sign-SGD gradient is not in the norm: sign-SGD does not scale with
it, and a NaN there shows up as a non-finite loss one step later.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn

import torch

from trm import distributed as dist_utils
from trm import exit_codes
from trm.distributed import DistInfo
from trm.errors import TRMError
from trm.io import atomic_write_bytes
from trm.training.checkpointing import layout as ckpt
from trm.training.checkpointing.state import rng_state

log = logging.getLogger(__name__)
SHOWN_PUZZLES = 10  # puzzle names in the log line and the error; the repro has all of them
CHECK_CHUNK = 1 << 26  # elements per finiteness check of a saved tensor (a 64 MiB bool mask at most)


class NonFiniteError(TRMError):
    """A step's loss or gradients (or the weights about to be saved) were NaN/Inf; nothing was saved."""

    exit_code = exit_codes.NONFINITE


def repro_path(run_dir: Path, step: int, rank: int) -> Path:
    """Where rank `rank` writes the repro of step `step`."""
    return run_dir / f"nonfinite_step{step}_rank{rank}.pt"


def step_flags(
    totals: dict[str, torch.Tensor], params: Iterable[torch.nn.Parameter], clip: float | None
) -> torch.Tensor:
    """int32 device tensor [losses not finite, gradients not finite]; clips the gradients to `clip`.

    `totals` are the step's summed metrics (the `*loss` ones are checked); the parameters' `.grad` the
    all-reduced gradients, clipped in place to global L2 norm `clip` (torch's clip_grad_norm_ rule).
    No host sync: everything stays on the device."""
    with_grad = [p for p in params if p.grad is not None]
    losses = [v for k, v in totals.items() if k.endswith("loss")]
    loss_sum = torch.stack([v.float().sum() for v in losses]).sum() if losses else torch.zeros(())
    norm = torch.nn.utils.get_total_norm([p.grad for p in with_grad])
    if clip is not None and with_grad:
        torch.nn.utils.clip_grads_with_norm_(with_grad, clip, norm)
    return torch.stack([~torch.isfinite(loss_sum.to(norm.device)), ~torch.isfinite(norm)]).to(torch.int32)


class NonFiniteGuard:
    """One rank's view of the current step (batch, RNG before it, device flags) and the repro it writes."""

    def __init__(
        self,
        run_dir: Path,
        info: DistInfo,
        puzzle_names: Callable[[], list[str]],
        config: dict[str, Any],
    ) -> None:
        self.run_dir = run_dir
        self.info = info
        self.puzzle_names = puzzle_names
        self.config = config
        self.flags: torch.Tensor | None = None
        self._batch: dict[str, torch.Tensor] | None = None
        self._rng: dict[str, Any] | None = None

    def begin_step(self, batch: dict[str, torch.Tensor]) -> None:
        """Remember the step's batch (a reference, no copy) and the RNG state before it."""
        self._batch = batch
        self._rng = rng_state()
        self.flags = None

    def observe(
        self, totals: dict[str, torch.Tensor], params: Iterable[torch.nn.Parameter], clip: float | None
    ) -> None:
        """After the gradient all-reduce: the step's flags (see `step_flags`), clipping when `clip`."""
        self.flags = step_flags(totals, params, clip)

    def check_weights(self, tensors: Iterable[torch.Tensor], step: int) -> None:
        """Before a save: raise NonFiniteError (after the repro) when any rank holds a NaN/Inf weight."""
        # In chunks: the puzzle-embedding table can be GBs, and a whole-tensor isfinite mask would need
        # a quarter of that again in device memory at every save.
        checks = [
            ~torch.isfinite(chunk).all()
            for t in tensors
            if t.is_floating_point()
            for chunk in t.detach().reshape(-1).split(CHECK_CHUNK)
        ]
        bad = torch.stack(checks).any() if checks else torch.zeros((), dtype=torch.bool)
        if dist_utils.any_rank([], self.info, extra=bad.reshape(1))[0]:
            self.fail(step, why="the weights about to be saved are not finite")

    def fail(self, step: int, why: str | None = None) -> NoReturn:
        """Log, write this rank's repro and raise NonFiniteError (every rank calls it at the same step)."""
        loss_bad, grads_bad = (
            (bool(v) for v in self.flags.tolist()) if self.flags is not None else (False, False)
        )
        if why is None:
            parts = [name for name, bad in (("loss", loss_bad), ("gradients", grads_bad)) if bad]
            why = (
                f"the {' and '.join(parts)} of step {step} are not finite (NaN/Inf)"
                if parts
                else f"another rank's loss or gradients at step {step} are not finite (NaN/Inf)"
            )
        names = self._batch_puzzles()
        path = repro_path(self.run_dir, step, self.info.rank)
        self._write_repro(path, step, why, names, loss_bad, grads_bad)
        newest = ckpt.find_complete(self.run_dir, warn=False)
        kept = f"the newest checkpoint {newest[-1].path} is intact" if newest else "no checkpoint exists yet"
        shown = ", ".join(names[:SHOWN_PUZZLES]) + (
            f" (+{len(names) - SHOWN_PUZZLES} more)" if len(names) > SHOWN_PUZZLES else ""
        )
        message = (
            f"rank {self.info.rank}: {why}; nothing was saved and {kept}. Puzzles in this rank's batch: "
            f"{shown or 'none'}. Repro (batch, RNG state, step): {path}. Resuming replays the same data: "
            f"change the math first (a lower lr, or grad_clip_norm=1.0), then rerun (exit {exit_codes.NONFINITE})."
        )
        log.error(message)
        raise NonFiniteError(message)

    def _batch_puzzles(self) -> list[str]:
        """Names of the distinct puzzle identifiers in the batch (numbers when the names are unavailable)."""
        if self._batch is None or "puzzle_identifiers" not in self._batch:
            return []
        ids = sorted(set(self._batch["puzzle_identifiers"].reshape(-1).tolist()))
        try:
            names = self.puzzle_names()
        except (TRMError, OSError, AttributeError):
            names = []
        return [names[i] if 0 <= i < len(names) else str(i) for i in ids]

    def _write_repro(
        self, path: Path, step: int, why: str, names: list[str], loss_bad: bool, grads_bad: bool
    ) -> None:
        batch = {k: v.detach().cpu() for k, v in (self._batch or {}).items()}
        payload = {
            "step": step,
            "rank": self.info.rank,
            "world_size": self.info.world_size,
            "why": why,
            "loss_finite": not loss_bad,
            "grads_finite": not grads_bad,
            "batch": batch,
            "puzzle_names": names,
            "rng": self._rng,
            "config": self.config,
        }
        buf = io.BytesIO()
        torch.save(payload, buf)
        atomic_write_bytes(path, buf.getvalue())
