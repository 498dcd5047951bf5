"""Muon (use_muon=True): the update rule written out independently, the grouping, the trainer's wiring, and
equality with the URM reference's optimizer when TRM_URM points at a URM checkout."""

from __future__ import annotations

import math
import os
import sys

import pytest
import torch

from trm.errors import TRMError
from trm.optim.muon import NS_COEFFICIENTS, Muon, build_muon, orthogonalize

URM_CHECKOUT = os.environ.get("TRM_URM")


def rule_ns(u: torch.Tensor, steps: int) -> torch.Tensor:
    """Newton–Schulz in float64 from the update rule: X ← aX + b(XXᵀ)X + c(XXᵀ)²X on the wide orientation."""
    x = u.double()
    tall = x.shape[0] > x.shape[1]
    x = x.T if tall else x
    x = x / max(x.norm().item(), 1e-7)
    for i in range(steps):
        a, b, c = NS_COEFFICIENTS[min(i, 7)]
        g = x @ x.T
        x = a * x + b * (g @ x) + c * (g @ g @ x)
    return x.T if tall else x


def test_newton_schulz_matches_the_rule_and_orthogonalises() -> None:
    torch.manual_seed(0)
    for shape in ((8, 5), (5, 8), (6, 6)):
        u = torch.randn(shape)
        ours = orthogonalize(u, 5)
        torch.testing.assert_close(ours.double(), rule_ns(u, 5), rtol=1e-4, atol=1e-4)
        # An odd polynomial of u: the same singular vectors, every singular value moved to O(1).
        uu, _, vv = torch.linalg.svd(u.double(), full_matrices=False)
        projected = uu.T @ ours.double() @ vv.T
        off = projected - torch.diag(torch.diagonal(projected))
        assert off.abs().max() < 1e-3
        assert torch.diagonal(projected).min() > 0.3 and torch.diagonal(projected).max() < 2.0


def test_two_steps_follow_the_update_rule() -> None:
    torch.manual_seed(1)
    w, bias = torch.randn(6, 4), torch.randn(4)
    params = [w.clone().requires_grad_(), bias.clone().requires_grad_()]
    opt = Muon(
        [{"params": [params[0]], "use_muon": True}, {"params": [params[1]], "use_muon": False}],
        lr=0.01,
        weight_decay=0.1,
    )
    buf, m, v = (
        torch.zeros(6, 4, dtype=torch.float64),
        torch.zeros(4, dtype=torch.float64),
        torch.zeros(4, dtype=torch.float64),
    )
    ew, eb = w.double(), bias.double()
    for t in (1, 2):
        gw, gb = torch.randn(6, 4), torch.randn(4)
        params[0].grad, params[1].grad = gw.clone(), gb.clone()
        opt.step()
        buf = 0.95 * buf + gw.double()
        nesterov = gw.double() + 0.95 * buf
        ortho = rule_ns(nesterov.to(torch.bfloat16).double(), 5)
        ew = ew * (1 - 0.01 * 0.1) - 0.01 * 0.2 * math.sqrt(6) * ortho
        m = 0.9 * m + 0.1 * gb.double()
        v = 0.95 * v + 0.05 * gb.double() ** 2
        eb = eb * (1 - 0.001) - 0.01 * math.sqrt(1 - 0.95**t) / (1 - 0.9**t) * m / (1e-8 + v.sqrt())
        torch.testing.assert_close(params[0].detach().double(), ew, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(params[1].detach().double(), eb, rtol=1e-5, atol=1e-6)


def test_grouping_and_errors() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Conv1d(3, 3, 2, groups=3))
    opt = build_muon(model, lr=0.0, weight_decay=0.1)
    muon, other = opt.param_groups
    assert muon["use_muon"] and [p.ndim for p in muon["params"]] == [2]
    assert not other["use_muon"] and sorted(p.ndim for p in other["params"]) == [1, 1, 3]
    with pytest.raises(TRMError, match="matrices only"):
        Muon([{"params": [torch.zeros(3, requires_grad=True)], "use_muon": True}])


def test_use_muon_selects_it_in_the_trainer() -> None:
    from trm.model.registry import build_model, model_config
    from trm.model.schema import URMArch
    from trm.training.builder import build_optimizers
    from trm.training.config import compose, config_hash

    cfg = compose(["arch=urm", "use_muon=True", "data_path=x"])
    assert cfg.data_paths == ["x"] and config_hash(cfg) != config_hash(compose(["arch=urm", "data_path=x"]))
    arch = URMArch(hidden_size=16, num_heads=2, num_layers=1, puzzle_emb_ndim=16)
    model = build_model(
        model_config(
            arch, batch_size=2, seq_len=4, vocab_size=5, num_puzzle_identifiers=3, forward_dtype="float32"
        )
    )
    names = [o.name for o in build_optimizers(cfg, model)]
    assert names == ["puzzle_emb", "muon"]


@pytest.mark.skipif(not URM_CHECKOUT, reason="set TRM_URM to a URM checkout")
# the reference's msign is torch.compile'd: run it eagerly. config.patch restores the setting; a monkeypatch
# of the config module deleted it on undo, breaking every later compile in the process.
@torch._dynamo.config.patch(disable=True)
def test_same_updates_as_the_reference_optimizer() -> None:
    saved = {n: m for n, m in sys.modules.items() if n == "models" or n.startswith("models.")}
    for n in saved:
        del sys.modules[n]
    sys.path.insert(0, URM_CHECKOUT)
    try:
        from models.muon import Muon as ReferenceMuon
    finally:
        sys.path.remove(URM_CHECKOUT)
        for n in [n for n in sys.modules if n == "models" or n.startswith("models.")]:
            del sys.modules[n]
        sys.modules.update(saved)

    torch.manual_seed(2)
    shapes = [(16, 8), (8, 16), (12,), (5, 1, 2)]
    init = [torch.randn(s) for s in shapes]
    ours_p = [t.clone().requires_grad_() for t in init]
    ref_p = [t.clone().requires_grad_() for t in init]

    def groups(ps: list[torch.Tensor]) -> list[dict]:
        return [
            {"params": [p for p in ps if p.ndim == 2], "use_muon": True, "lr": 1e-4},
            {
                "params": [p for p in ps if p.ndim != 2],
                "use_muon": False,
                "lr": 1e-4,
                "weight_decay": 0.1,
                "adamw_betas": (0.9, 0.95),
                "adamw_eps": 1e-8,
            },
        ]

    ours, ref = Muon(groups(ours_p)), ReferenceMuon(groups(ref_p))
    worst = 0.0
    for step in range(3):
        for group in (*ours.param_groups, *ref.param_groups):
            group["lr"] = 3e-3 * (step + 1)  # what the trainer's schedule does each step
        for a, b in zip(ours_p, ref_p, strict=True):
            g = torch.randn(a.shape)
            a.grad, b.grad = g.clone(), g.clone()
        ours.step()
        ref.step()
        for a, b in zip(ours_p, ref_p, strict=True):
            torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-6, atol=1e-7)
            worst = max(worst, (a - b).abs().max().item())
    print(f"Muon vs reference: max |Δparam| after 3 steps {worst:.3g}")
