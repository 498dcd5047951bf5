"""AdamATan2 (0.0.3 rule) against a float64 oracle; lr=0; state layout and state_dict round trips; backends."""

from __future__ import annotations

import copy
import logging
import math

import pytest
import torch

from trm.errors import TRMError
from trm.optim import AdamATan2, build_adam_atan2
from trm.optim import backend as backend_module

LR, BETAS, WD, STEPS = 1e-3, (0.9, 0.95), 0.1, 100
# The tolerances of adam-atan2's own tests (upstream's package) after 100 steps.
ATOL = {torch.float64: 1e-15, torch.float32: 1e-6, torch.float16: 2e-3, torch.bfloat16: 5e-3}


def oracle(
    p0: torch.Tensor, grads: list[torch.Tensor], *, inside: bool = False, store: torch.dtype = torch.float64
) -> torch.Tensor:
    """The update rule in float64, storing p/m/v rounded to `store` after each step like the kernel does.

    inside=True is the 0.0.2 variant (β1 correction inside atan2).
    """
    p, m, v = (
        p0.double().clone(),
        torch.zeros_like(p0, dtype=torch.float64),
        torch.zeros_like(p0, dtype=torch.float64),
    )
    b1, b2 = BETAS
    for t, g in enumerate(grads, start=1):
        g = g.double()
        p = p * (1 - LR * WD)
        m = m + (1 - b1) * (g - m)
        v = v + (1 - b2) * (g * g - v)
        bc1, bc2 = 1 - b1**t, 1 - b2**t
        if inside:
            p = p - LR * torch.atan2(m / bc1, torch.sqrt(v) / math.sqrt(bc2))
        else:
            p = p - (LR / bc1) * torch.atan2(m, torch.sqrt(v) / math.sqrt(bc2))
        p, m, v = (x.to(store).double() for x in (p, m, v))
    return p


def run_ours(p0: torch.Tensor, grads: list[torch.Tensor], dtype: torch.dtype, lr: float = LR) -> torch.Tensor:
    param = torch.nn.Parameter(p0.to(dtype).clone())
    opt = AdamATan2([param], lr=lr, betas=BETAS, weight_decay=WD)
    for g in grads:
        param.grad = g.to(dtype)
        opt.step()
    return param.detach()


def data(shape=(64, 48), seed=0) -> tuple[torch.Tensor, list[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    p0 = torch.randn(shape, generator=g, dtype=torch.float64) * 0.05  # the scale of LeCun-initialised weights
    grads = [torch.randn(shape, generator=g, dtype=torch.float64) * 0.01 for _ in range(STEPS)]
    grads[3][0] = 0.0  # atan2(0, 0) rows: weight decay only
    return p0, grads


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_matches_float64_oracle(dtype):
    p0, grads = data()
    want = oracle(p0.to(dtype).double(), [g.to(dtype).double() for g in grads])
    got = run_ours(p0, grads, dtype)
    assert (got.double() - want).abs().max().item() <= ATOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_params_stay_within_upstream_tolerance(dtype):
    p0, grads = data()
    want = oracle(p0.to(dtype).double(), [g.to(dtype).double() for g in grads], store=dtype)
    got = run_ours(p0, grads, dtype)
    assert got.dtype == dtype
    assert (got.double() - want).abs().max().item() <= ATOL[dtype]


def test_differs_from_the_0_0_2_rule():
    p0, grads = data()
    got = run_ours(p0, grads, torch.float64)
    gap = (got - oracle(p0, grads, inside=True)).abs().max().item()
    assert gap > 100 * ATOL[torch.float32]  # the oracle test would catch a 0.0.2 implementation


def test_first_step_is_lr_times_sign_scaled():
    param = torch.nn.Parameter(torch.zeros(3))
    param.grad = torch.tensor([2.0, -0.5, 0.0])
    AdamATan2([param], lr=0.1, betas=(0.9, 0.999), weight_decay=0.0).step()
    step = 0.1 * 10 * math.atan(0.1)  # (lr/bc1)·atan2(0.1·g, |g|)
    torch.testing.assert_close(param.detach(), torch.tensor([-step, step, 0.0]))


def test_lr_zero_construction_and_steps():
    p0, grads = data(shape=(5, 4))
    param = torch.nn.Parameter(p0.float().clone())
    opt = AdamATan2([param], lr=0.0, betas=BETAS, weight_decay=WD)
    for g in grads[:3]:
        param.grad = g.float()
        opt.step()
    assert torch.equal(param.detach(), p0.float())
    state = opt.state[param]
    assert state["step"].item() == 3.0 and state["exp_avg"].abs().sum() > 0


def test_state_layout_matches_extension():
    param = torch.nn.Parameter(torch.randn(4, 2, dtype=torch.bfloat16))
    param.grad = torch.randn(4, 2, dtype=torch.bfloat16)
    opt = AdamATan2([param])
    opt.step()
    state = opt.state[param]
    assert set(state) == {"step", "exp_avg", "exp_avg_sq"}
    assert state["step"].shape == () and state["step"].dtype == torch.float32
    assert state["exp_avg"].dtype == torch.bfloat16 and state["exp_avg_sq"].dtype == torch.bfloat16
    assert set(opt.state_dict()["param_groups"][0]) == {"lr", "betas", "weight_decay", "params"}


def test_state_dict_round_trip_continues_identically():
    p0, grads = data(shape=(6, 5))
    a = torch.nn.Parameter(p0.float().clone())
    opt_a = AdamATan2([a], lr=LR, betas=BETAS, weight_decay=WD)
    for g in grads[:5]:
        a.grad = g.float()
        opt_a.step()
    b = torch.nn.Parameter(a.detach().clone())
    opt_b = AdamATan2([b], lr=0.5, betas=(0.5, 0.5), weight_decay=0.0)
    opt_b.load_state_dict(copy.deepcopy(opt_a.state_dict()))  # as after torch.save / torch.load
    assert opt_b.param_groups[0]["betas"] == BETAS
    for g in grads[5:10]:
        a.grad, b.grad = g.float(), g.float()
        opt_a.step()
        opt_b.step()
    assert torch.equal(a.detach(), b.detach())
    assert opt_b.state[b]["step"].item() == 10.0


def test_params_without_grad_are_skipped_and_keep_their_own_step():
    x, y = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))
    opt = AdamATan2([x, y], lr=0.1, weight_decay=0.0)
    x.grad = torch.ones(2)
    opt.step()
    y.grad = torch.ones(2)
    opt.step()
    assert opt.state[x]["step"].item() == 2.0 and opt.state[y]["step"].item() == 1.0
    torch.testing.assert_close(y.detach(), torch.full((2,), 1 - 0.1 * 10 * math.atan(0.1)))


@pytest.mark.parametrize(("kwargs", "fragment"), [({"lr": -1.0}, "lr"), ({"betas": (1.0, 0.9)}, "betas")])
def test_invalid_hyperparameters(kwargs, fragment):
    with pytest.raises(TRMError, match=fragment):
        AdamATan2([torch.nn.Parameter(torch.ones(1))], **kwargs)


def test_build_auto_and_torch_use_ours_on_cpu(caplog, monkeypatch):
    monkeypatch.setattr(backend_module, "_logged", set())
    params = [torch.nn.Parameter(torch.ones(2))]
    with caplog.at_level(logging.INFO, logger="trm.optim"):
        opt = build_adam_atan2(params, lr=0.0, betas=BETAS, weight_decay=WD, backend="auto")
        build_adam_atan2(params, lr=0.0, betas=BETAS, weight_decay=WD, backend="torch")
    assert isinstance(opt, AdamATan2) and opt.trm_backend == "torch"
    assert [r.getMessage() for r in caplog.records].count(caplog.records[0].getMessage()) == 1
    assert "AdamATan2 backend: torch" in caplog.records[0].getMessage()


def test_build_ext_without_extension_is_a_trm_error(monkeypatch):
    monkeypatch.setattr(backend_module, "_extension_class", lambda: None)
    with pytest.raises(TRMError, match=r"install-adam-atan2 --sdist \S*adam_atan2-0\.0\.3\.tar\.gz"):
        build_adam_atan2(
            [torch.nn.Parameter(torch.ones(2))], lr=0.0, betas=BETAS, weight_decay=WD, backend="ext"
        )
    with pytest.raises(TRMError, match="unknown"):
        build_adam_atan2([], lr=0.0, betas=BETAS, weight_decay=WD, backend="fused")


def test_build_auto_uses_extension_when_it_runs(monkeypatch):
    class FakeExtension(AdamATan2):
        pass

    monkeypatch.setattr(backend_module, "_extension_class", lambda: FakeExtension)
    monkeypatch.setattr(backend_module, "_extension_problem", lambda cls, devices: None)
    opt = build_adam_atan2([torch.nn.Parameter(torch.ones(2))], lr=0.0, betas=BETAS, weight_decay=WD)
    assert type(opt) is FakeExtension and opt.trm_backend == "ext"


def test_extension_is_refused_for_cpu_parameters():
    problem = backend_module._extension_problem(AdamATan2, {torch.device("cpu")})
    assert problem is not None and "CUDA only" in problem


def _extension():
    """The compiled extension; its absence fails the test (a GPU run that skips it proves nothing)."""
    try:
        import adam_atan2
    except ImportError as err:
        pytest.fail(
            f"the adam_atan2 extension does not import ({err}); install it: {backend_module.EXTENSION_INSTALL}"
        )
    return adam_atan2


@pytest.mark.gpu
@pytest.mark.adam_ext
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_extension_matches_ours_on_cuda(dtype):
    extension = _extension()
    p0, grads = data()
    results = []
    for cls in (extension.AdamATan2, AdamATan2):
        param = torch.nn.Parameter(p0.to("cuda", dtype).clone())
        opt = cls([param], lr=LR, betas=BETAS, weight_decay=WD)
        for g in grads:
            param.grad = g.to("cuda", dtype)
            opt.step()
        results.append((param.detach().double().cpu(), opt.state_dict()))
    assert (results[0][0] - results[1][0]).abs().max().item() <= ATOL[dtype]
    ours = AdamATan2([torch.nn.Parameter(p0.to("cuda", dtype).clone())], lr=LR, betas=BETAS, weight_decay=WD)
    ours.load_state_dict(results[0][1])  # the extension's checkpoint loads into ours
    assert ours.state[ours.param_groups[0]["params"][0]]["step"].device.type == "cuda"


@pytest.mark.gpu
@pytest.mark.adam_ext
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_extension_resumes_from_a_cpu_loaded_checkpoint(tmp_path, dtype):
    """Issue 12 item 3 on the real kernel: save, load with map_location="cpu", place, continue = straight."""
    from trm.optim.placement import place_state, state_problems

    extension = _extension()
    p0, grads = data()

    def fresh():
        param = torch.nn.Parameter(p0.to("cuda", dtype).clone())
        return param, extension.AdamATan2([param], lr=LR, betas=BETAS, weight_decay=WD)

    param, opt = fresh()
    for g in grads:
        param.grad = g.to("cuda", dtype)
        opt.step()
    straight = param.detach().clone()

    param, opt = fresh()
    for g in grads[:40]:
        param.grad = g.to("cuda", dtype)
        opt.step()
    torch.save({"param": param.detach(), "opt": opt.state_dict()}, tmp_path / "ckpt.pt")
    saved = torch.load(tmp_path / "ckpt.pt", map_location="cpu", weights_only=False, mmap=True)
    param, opt = fresh()
    with torch.no_grad():
        param.copy_(saved["param"])
    opt.load_state_dict(saved["opt"])
    assert state_problems(opt), "torch now moves `step` itself; place_state may be unnecessary"
    place_state(opt)
    assert state_problems(opt) == []
    for g in grads[40:]:
        param.grad = g.to("cuda", dtype)
        opt.step()
    torch.cuda.synchronize()
    assert torch.equal(param.detach(), straight)


def test_required_extension_turns_auto_into_ext_for_cuda_parameters(monkeypatch):
    """TRM_REQUIRE_ADAM_EXT=1 (set by the GPU check once it built the extension): "auto" on CUDA parameters
    may not fall back to the torch backend; CPU parameters (the extension is CUDA-only) still use ours."""
    monkeypatch.setattr(backend_module, "_extension_class", lambda: None)
    monkeypatch.setenv(backend_module.REQUIRE_EXTENSION_ENV, "1")
    cuda_param = torch.nn.Parameter(torch.empty(2, device="meta"))
    monkeypatch.setattr(torch.Tensor, "device", property(lambda self: torch.device("cuda", 0)), raising=False)
    with pytest.raises(TRMError, match=r"backend 'ext' is not usable.*unset TRM_REQUIRE_ADAM_EXT"):
        build_adam_atan2([cuda_param], lr=0.0, betas=BETAS, weight_decay=WD, backend="auto")
    monkeypatch.undo()
    monkeypatch.setattr(backend_module, "_extension_class", lambda: None)
    monkeypatch.setenv(backend_module.REQUIRE_EXTENSION_ENV, "1")
    cpu = build_adam_atan2([torch.nn.Parameter(torch.ones(2))], lr=0.0, betas=BETAS, weight_decay=WD)
    assert cpu.trm_backend == "torch"
