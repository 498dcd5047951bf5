"""The `resume` part: a CUDA bf16 + compile=auto training run SIGTERMed, resumed, and compared with an
uninterrupted one; the AdamATan2 backend that ran."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from tools.gpu.check.core import ROOT, Context, Outcome, run_command, tail
from tools.gpu.check.extension import part_env
from trm.optim.backend import REQUIRE_EXTENSION_ENV

# The resumed run equals the uninterrupted one within these (bf16 kernels need not be bit-identical across
# processes; the CPU test of the same flow is bitwise).
RESUME_RTOL, RESUME_ATOL = 2e-2, 2e-3

RESUME_OVERRIDES = (
    "arch=trm", "arch.hidden_size=64", "arch.num_heads=4", "arch.L_layers=1", "arch.H_cycles=1",
    "arch.L_cycles=1", "arch.halt_max_steps=2", "arch.puzzle_emb_ndim=16", "+arch.puzzle_emb_len=1",
    "arch.forward_dtype=auto", "compile=auto", "global_batch_size=2", "lr=1e-3", "lr_warmup_steps=2",
    "ema=True", "+log_interval=1", "epochs=4", "eval_interval=2",
)  # fmt: skip
RUN_LIMIT_S = 180  # one tiny training run of the resume part (compilation included)
_BACKEND_LINE = re.compile(r"AdamATan2 backend: (\w+)")


def optimizer_backend(log_text: str) -> str | None:
    """The AdamATan2 backend a training log names ("ext" or "torch"), None when it names none."""
    found = _BACKEND_LINE.findall(log_text)
    return found[-1] if found else None


def resume(ctx: Context) -> Outcome:
    import torch

    from trm import exit_codes
    from trm.training.checkpointing import layout as ckpt

    work = ctx.work / "resume"
    dataset = work / "data"
    env = part_env(ctx)
    if isinstance(env, Outcome):
        return env
    code, output = run_command(
        [ctx.python, "-m", "trm", "data", "build-arc", "--output-dir", str(dataset), "--subsets", "training",
         "evaluation", "--test-set-name", "evaluation", "--num-aug", "1", "--max-puzzles", "2", "--quiet"],
        ctx, timeout_s=ctx.limit(120), log_name="resume-data.log", env=env,
    )  # fmt: skip
    if code != 0:
        return Outcome("error", f"building the tiny dataset failed (exit {code})", output=tail(output))

    def cmd(run_dir: Path) -> list[str]:
        return [ctx.python, "-m", "trm.train", *RESUME_OVERRIDES, f"data_paths=[{dataset}]",
                f"+checkpoint_path={run_dir}"]  # fmt: skip

    straight, split = work / "straight", work / "split"
    code, out_straight = run_command(
        cmd(straight), ctx, timeout_s=ctx.limit(RUN_LIMIT_S), log_name="resume-straight.log", env=env
    )
    if code != 0:
        return Outcome("fail", f"uninterrupted run exited {code}", output=tail(out_straight))
    code, out_stop = sigterm_after_step(
        cmd(split), split, ctx, step=2, log_name="resume-stopped.log", limit_s=ctx.limit(RUN_LIMIT_S), env=env
    )
    if code != exit_codes.SAVED_RETRY:
        return Outcome(
            "fail", f"SIGTERMed run exited {code}, expected {exit_codes.SAVED_RETRY}", output=tail(out_stop)
        )
    code, out_resumed = run_command(
        cmd(split), ctx, timeout_s=ctx.limit(RUN_LIMIT_S), log_name="resume-resumed.log", env=env
    )
    if code != 0:
        return Outcome("fail", f"resumed run exited {code}", output=tail(out_resumed))
    backend = optimizer_backend(out_resumed)
    data: dict[str, Any] = {
        "resumed": "resumed from" in out_resumed,
        "optimizer_backend": backend,
        "rtol": RESUME_RTOL,
        "atol": RESUME_ATOL,
    }
    a = ckpt.load_torch(ckpt.find_complete(straight)[-1].path / ckpt.STATE)
    b = ckpt.load_torch(ckpt.find_complete(split)[-1].path / ckpt.STATE)
    data["progress_equal"] = a["progress"] == b["progress"]
    diffs = {k: float((a["model"][k].double() - b["model"][k].double()).abs().max()) for k in a["model"]}
    data["max_abs_diff"] = max(diffs.values(), default=0.0)
    data["bitwise"] = all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    close = all(
        torch.allclose(a["model"][k].double(), b["model"][k].double(), rtol=RESUME_RTOL, atol=RESUME_ATOL)
        for k in a["model"]
    )
    required = env.get(REQUIRE_EXTENSION_ENV) == "1"
    data["extension_required"] = required
    backend_ok = backend == "ext" if required else backend in ("ext", "torch")
    checks = (("resumed", data["resumed"]), ("the extension optimizer" if required else
              "a logged optimizer backend", backend_ok), ("same progress", data["progress_equal"]),
              ("states within tolerance", close))  # fmt: skip
    why = [name for name, good in checks if not good]
    summary = (
        f"SIGTERM at step 2 → exit 75 → resume; max |diff| {data['max_abs_diff']:.3g}"
        f" (bitwise: {data['bitwise']}); AdamATan2 backend: {backend}"
        + (f"; missing: {', '.join(why)}" if why else "")
    )
    return Outcome("fail" if why else "pass", summary, data, tail(out_resumed))


def sigterm_after_step(
    cmd: list[str], run_dir: Path, ctx: Context, *, step: int, log_name: str, limit_s: float = 180,
    env: dict[str, str] | None = None,
) -> tuple[int | None, str]:  # fmt: skip
    """Start `cmd`, SIGTERM it once `step` is in its metrics.jsonl, return (exit code, output)."""
    log = ctx.work / log_name
    with open(log, "w", encoding="utf-8") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env=env or ctx.env)
        deadline = time.time() + limit_s
        metrics = run_dir / "metrics.jsonl"
        while time.time() < deadline and proc.poll() is None:
            if metrics.exists() and any(
                json.loads(x).get("step", 0) >= step for x in metrics.read_text().splitlines() if x.strip()
            ):
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        try:
            code: int | None = proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = None
    return code, log.read_text(encoding="utf-8", errors="replace")
