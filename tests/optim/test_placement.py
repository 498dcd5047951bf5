"""Optimizer state after a resume sits on its parameter's device in the dtype the step kernels read.

The compiled adam-atan2 extension is a plain `torch.optim.Optimizer` subclass (no fused/capturable flags)
whose CUDA kernel reads `step` through a device pointer as a 0-d float32. `ExtensionLayout` below has that
shape; the "meta" device stands in for CUDA: torch's `load_state_dict` treats every non-CPU device alike.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch.optim import Optimizer

from trm.errors import TRMError
from trm.optim import AdamATan2
from trm.optim import backend as backend_module
from trm.optim.adam_atan2 import _update
from trm.optim.placement import place_state, state_problems


class ExtensionLayout(Optimizer):
    """The extension's Python side: lazy state (`step` 0-d fp32 on the param device, moments like the param).

    Its `step` checks what the extension's kernel relies on before doing the same update as ours.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), weight_decay=1e-2):
        super().__init__(params, {"lr": lr, "betas": betas, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                problems = state_problems(self)
                assert not problems, f"the kernel would read garbage: {problems}"
                state["step"] += 1
                beta1, beta2 = group["betas"]
                _update(
                    [p], [p.grad], [state["exp_avg"]], [state["exp_avg_sq"]],
                    t=int(state["step"].item()), lr=group["lr"], beta1=beta1, beta2=beta2,
                    weight_decay=group["weight_decay"], low_precision=p.dtype in (torch.float16, torch.bfloat16),
                )  # fmt: skip


def trained_state(cls: type[Optimizer], dtype: torch.dtype = torch.float32, steps: int = 3) -> dict:
    g = torch.Generator().manual_seed(0)
    param = torch.nn.Parameter(torch.randn(5, 3, generator=g, dtype=dtype))
    opt = cls([param], lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)
    for _ in range(steps):
        param.grad = torch.randn(5, 3, generator=g, dtype=dtype)
        opt.step()
    return copy.deepcopy(opt.state_dict())  # as after torch.save + torch.load(map_location="cpu")


@pytest.mark.parametrize("cls", [ExtensionLayout, AdamATan2])
def test_state_follows_parameters_on_another_device(cls):
    saved = trained_state(cls)
    param = torch.nn.Parameter(torch.empty(5, 3, device="meta"))
    opt = cls([param], lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)
    opt.load_state_dict(saved)
    if cls is ExtensionLayout:
        # What torch does on its own: moments follow the parameter, `step` stays where it was loaded.
        assert any("'step' is on cpu" in p for p in state_problems(opt))
        place_state(opt)
    assert state_problems(opt) == []
    state = opt.state[param]
    assert state["step"].device.type == "meta" and state["step"].dtype == torch.float32
    assert state["exp_avg"].device.type == "meta"


@pytest.mark.parametrize("cls", [ExtensionLayout, AdamATan2])
def test_state_takes_the_parameter_dtype_and_a_0d_fp32_step(cls):
    saved = trained_state(cls, torch.float32)
    for state in saved["state"].values():  # a step stored in another dtype and shape
        state["step"] = state["step"].to(torch.float64).reshape(1)
    param = torch.nn.Parameter(torch.zeros(5, 3, dtype=torch.float64))
    opt = cls([param], lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)
    opt.load_state_dict(saved)
    place_state(opt)
    assert state_problems(opt) == []
    state = opt.state[param]
    assert state["step"].shape == () and state["step"].item() == 3.0
    assert state["exp_avg"].dtype == torch.float64 and state["exp_avg_sq"].dtype == torch.float64
    param.grad = torch.ones_like(param)
    opt.step()  # ExtensionLayout asserts the layout again before its update
    assert opt.state[param]["step"].item() == 4.0


def test_our_load_state_dict_places_a_misshapen_step():
    """Before the fix ours kept a 1-element `step` as shape (1,), which the extension's layout forbids."""
    saved = trained_state(AdamATan2)
    for state in saved["state"].values():
        state["step"] = state["step"].reshape(1).to(torch.float64)
    param = torch.nn.Parameter(torch.zeros(5, 3))
    opt = AdamATan2([param], lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)
    opt.load_state_dict(saved)
    assert state_problems(opt) == []


def test_state_of_another_shape_is_a_clear_error():
    saved = trained_state(ExtensionLayout)
    opt = ExtensionLayout([torch.nn.Parameter(torch.zeros(4, 3))])
    opt.load_state_dict(saved)  # torch does not compare state shapes with the parameters
    with pytest.raises(TRMError, match=r"ckpt/step_3/state\.pt optimizer adam_atan2: .*'exp_avg' has shape"):
        place_state(opt, source="ckpt/step_3/state.pt optimizer adam_atan2")


def test_python_number_step_becomes_a_tensor():
    param = torch.nn.Parameter(torch.zeros(2))
    opt = ExtensionLayout([param])
    opt.state[param] = {"step": 7, "exp_avg": torch.zeros(2), "exp_avg_sq": torch.zeros(2)}
    place_state(opt)
    assert state_problems(opt) == [] and opt.state[param]["step"].item() == 7.0


def test_trainer_resume_places_state_for_the_extension_backend(tmp_path: Path, monkeypatch):
    """A resume through the Trainer with the extension's optimizer class, from a checkpoint whose `step`
    tensors were stored as float64: every state tensor must come back in the extension's layout."""
    import tests.training.test_trainer_inprocess as inproc
    from trm import exit_codes
    from trm.training.checkpointing import resume

    monkeypatch.setattr(backend_module, "_extension_class", lambda: ExtensionLayout)
    monkeypatch.setattr(backend_module, "_extension_problem", lambda cls, devices: None)
    code, _ = inproc.run(tmp_path, stop_at=2)
    assert code == exit_codes.SAVED_RETRY

    real_read = resume.read_main_state

    def read_with_float64_steps(folder):
        state = real_read(folder)
        for opt_state in state["optimizers"].values():
            for s in opt_state["state"].values():
                if "step" in s:
                    s["step"] = s["step"].to(torch.float64)
        return state

    monkeypatch.setattr(resume, "read_main_state", read_with_float64_steps)
    trainer = inproc.make_trainer(tmp_path)
    try:
        adam = next(o.optimizer for o in trainer.components.optimizers if o.name == "adam_atan2")
        assert type(adam) is ExtensionLayout and adam.state
        assert state_problems(adam) == []
        assert trainer.train() == exit_codes.OK  # ExtensionLayout.step re-checks the layout every step
    finally:
        trainer.close()
