"""Token losses (stablemax / softmax cross-entropy) and ACTLossHead: the loss and metrics of one ACT step."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from trm.errors import TRMError
from trm.model.act import ACTCarry, HaltExploration, TinyRecursiveModel

IGNORE_LABEL_ID = -100
STABLEMAX_EPS = 1e-30


def stablemax_s(x: torch.Tensor) -> torch.Tensor:
    """s(x) = x + 1 for x >= 0, 1 / (1 - x) for x < 0."""
    return torch.where(x < 0, 1 / (1 - x + STABLEMAX_EPS), x + 1)


def stablemax_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-token −log stablemax probability of the label, in float64; 0 where label == IGNORE_LABEL_ID."""
    s = stablemax_s(logits.to(torch.float64))
    valid = labels != IGNORE_LABEL_ID
    target = torch.where(valid, labels, 0).long().unsqueeze(-1)
    # −log(s_label / Σ s) evaluated as log Σ s − log s_label, without materialising the full log-probs.
    loss = torch.log(s.sum(dim=-1)) - torch.log(s.gather(-1, target).squeeze(-1))
    return torch.where(valid, loss, 0)


def softmax_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-token softmax cross-entropy in fp32; 0 where label == IGNORE_LABEL_ID."""
    flat = F.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]),
        labels.long().reshape(-1),
        ignore_index=IGNORE_LABEL_ID,
        reduction="none",
    )
    return flat.view(labels.shape)


LOSS_TYPES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "stablemax_cross_entropy": stablemax_cross_entropy,
    "softmax_cross_entropy": softmax_cross_entropy,
}


class ACTLossHead(nn.Module):
    """Runs one ACT step of `model` and returns (carry, loss, metrics, outputs, all_halted).

    loss = lm_loss + 0.5·(q_halt_loss + q_continue_loss), each a SUM over the local batch (lm_loss being
    the per-sequence mean token loss); the trainer divides by the global batch size. Metrics are sums over
    the sequences that halted in this step and have at least one valid label.

    `all_halted` is a 0-d bool tensor, computed inside the graph: nothing waits for the device and nothing
    breaks a torch.compile graph unless a caller (evaluation) asks for its value. `row_mask` (bool [B])
    leaves rows out of every loss, metric and `all_halted`: evaluation pads its last chunk to the compiled
    graph's batch size with rows it masks.
    """

    def __init__(self, model: TinyRecursiveModel, loss_type: str = "stablemax_cross_entropy") -> None:
        super().__init__()
        if loss_type not in LOSS_TYPES:
            raise TRMError(
                f"arch.loss.loss_type={loss_type!r} is unknown: use one of {', '.join(sorted(LOSS_TYPES))}."
            )
        self.model = model
        self.loss_type = loss_type
        self.loss_fn = LOSS_TYPES[loss_type]

    def initial_carry(self, batch: dict[str, torch.Tensor]) -> ACTCarry:
        """The model's initial (all-halted) carry for `batch`."""
        return self.model.initial_carry(batch)

    def eval_act_steps(self) -> int | None:
        """The model's fixed number of evaluation ACT steps (None: slots may halt early)."""
        return self.model.eval_act_steps()

    def forward(
        self,
        carry: ACTCarry,
        batch: dict[str, torch.Tensor],
        return_keys: Sequence[str] = (),
        exploration: HaltExploration | None = None,
        row_mask: torch.Tensor | None = None,
    ) -> tuple[ACTCarry, torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor], torch.Tensor]:
        """One supervision step with its loss; `outputs` holds the detached `return_keys` (and "preds")."""
        carry, outputs = self.model(carry, batch, exploration=exploration)
        labels = carry.current_data["labels"]
        logits = outputs["logits"]
        q_halt = outputs["q_halt_logits"]

        with torch.no_grad():
            outputs["preds"] = logits.argmax(dim=-1)
            mask = labels != IGNORE_LABEL_ID
            counts = mask.sum(-1)
            divisor = counts.clamp_min(1).unsqueeze(-1)
            correct = mask & (outputs["preds"] == labels)
            seq_correct = correct.sum(-1) == counts
            valid = carry.halted & (counts > 0)
            if row_mask is not None:
                valid = valid & row_mask
            metrics = {
                "count": valid.sum(),
                "accuracy": torch.where(valid, (correct.float() / divisor).sum(-1), 0).sum(),
                "exact_accuracy": (valid & seq_correct).sum(),
                "q_halt_accuracy": (valid & ((q_halt >= 0) == seq_correct)).sum(),
                "steps": torch.where(valid, carry.steps, 0).sum(),
            }

        token_loss = self.loss_fn(logits, labels) / divisor
        row_weight = None
        if row_mask is not None:
            token_loss = torch.where(row_mask.unsqueeze(-1), token_loss, 0)
            row_weight = row_mask.to(q_halt.dtype)
        lm_loss = token_loss.sum()
        q_halt_loss = F.binary_cross_entropy_with_logits(
            q_halt, seq_correct.to(q_halt.dtype), weight=row_weight, reduction="sum"
        )
        metrics["lm_loss"] = lm_loss.detach()
        metrics["q_halt_loss"] = q_halt_loss.detach()
        q_loss = q_halt_loss
        if "target_q_continue" in outputs:
            q_continue_loss = F.binary_cross_entropy_with_logits(
                outputs["q_continue_logits"], outputs["target_q_continue"], weight=row_weight, reduction="sum"
            )
            metrics["q_continue_loss"] = q_continue_loss.detach()
            q_loss = q_loss + q_continue_loss
        loss = lm_loss + 0.5 * q_loss

        detached = {k: outputs[k].detach() for k in return_keys if k in outputs}
        halted = carry.halted if row_mask is None else carry.halted | ~row_mask
        return carry, loss, metrics, detached, halted.all()
