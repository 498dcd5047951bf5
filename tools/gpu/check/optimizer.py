"""The `optimizer` part: the adam-atan2 extension against our AdamATan2 on CUDA, and the extension's own
gpu tests."""

from __future__ import annotations

import json
from typing import Any

from tools.gpu.check.core import NOT_WANTED, Context, Outcome, run_command, tail
from tools.gpu.check.extension import extension_imports, with_extension
from tools.gpu.check.suite import PYTEST_ENV, junit_counts, pytest_command

# Extension vs ours after 100 steps (adam-atan2 0.0.3's own test tolerances, as tests/optim/test_adam_atan2.py).
OPTIMIZER_ATOL = {"float32": 1e-6, "bfloat16": 5e-3}
OPTIMIZER_STEPS = 100
OPTIMIZER_LIMIT_S = 300  # includes waiting for the background extension build


def optimizer(ctx: Context) -> Outcome:
    from trm.optim.backend import EXTENSION_INSTALL

    env = ctx.env
    build_note = "adam_atan2 imported before the check"
    if not extension_imports(ctx.python, env):
        built, build_note = (
            (False, "no build was started")
            if ctx.extension is None
            else ctx.extension.wait(ctx.limit(OPTIMIZER_LIMIT_S) - 30)
        )
        env = with_extension(ctx)
        if not (built and extension_imports(ctx.python, env)):
            why = f"the adam_atan2 extension is not available ({build_note}); install: {EXTENSION_INSTALL}"
            if ctx.require_extension:
                return Outcome("fail", why)
            return Outcome("skip", why + "; training uses the torch backend (--require-extension to insist)",
                           skipped=NOT_WANTED)  # fmt: skip
    code, output = run_command(
        [ctx.python, "-m", "tools.gpu.check", "--compare-optimizer"],
        ctx, timeout_s=ctx.limit(60), log_name="optimizer.log", env=env,
    )  # fmt: skip
    lines = output.strip().splitlines()
    if code != 0 or not lines:
        return Outcome("fail", f"the comparison exited {code}", output=tail(output))
    data = json.loads(lines[-1])
    data["build"] = build_note
    junit = ctx.work / "adam-ext-tests.xml"
    code, test_output = run_command(
        pytest_command(ctx, "-m", "gpu and adam_ext", "-q", f"--junitxml={junit}"),
        ctx, timeout_s=ctx.limit(120), log_name="adam-ext-tests.log", env={**env, **PYTEST_ENV, "TRM_REQUIRE_GPU": "1"},
    )  # fmt: skip
    data["extension_tests"] = junit_counts(junit)
    bad = {k: v for k, v in data["max_abs_diff"].items() if v > OPTIMIZER_ATOL[k]}
    diffs = ", ".join(f"{k} {v:.3g} (≤ {OPTIMIZER_ATOL[k]:g})" for k, v in data["max_abs_diff"].items())
    summary = f"max |ext − ours| after {OPTIMIZER_STEPS} steps: {diffs}; extension tests: pytest exit {code}"
    return Outcome("fail" if bad or code != 0 else "pass", summary, data, tail(test_output))


def compare_optimizer() -> dict[str, Any]:
    """The extension against our AdamATan2 on CUDA over OPTIMIZER_STEPS steps, per dtype (max |diff|)."""
    import adam_atan2
    import torch

    from trm.optim import AdamATan2

    gen = torch.Generator().manual_seed(0)
    p0 = torch.randn(256, 192, generator=gen, dtype=torch.float64) * 0.05
    grads = [torch.randn(256, 192, generator=gen, dtype=torch.float64) * 0.01 for _ in range(OPTIMIZER_STEPS)]
    data: dict[str, Any] = {"steps": OPTIMIZER_STEPS, "max_abs_diff": {}, "atol": OPTIMIZER_ATOL}
    for dtype_name in OPTIMIZER_ATOL:
        dtype = getattr(torch, dtype_name)
        finals = []
        for cls in (adam_atan2.AdamATan2, AdamATan2):
            param = torch.nn.Parameter(p0.to("cuda", dtype).clone())
            opt = cls([param], lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
            for g in grads:
                param.grad = g.to("cuda", dtype)
                opt.step()
            finals.append(param.detach().double().cpu())
        data["max_abs_diff"][dtype_name] = float((finals[0] - finals[1]).abs().max())
    return data
