"""The `probe` part: `select-config --probe` of the paper config, its peak memory and seconds per step
against the hardware table."""

from __future__ import annotations

import json

from tools.gpu.check.core import Context, Outcome, run_command, tail
from tools.gpu.check.extension import part_env

PROBE_STEPS = {"quick": 5, "full": 10}  # optimizer steps; the first probe.WARMUP_STEPS are not timed
PROBE_LIMIT_S = 360  # includes building the arc2-smoke dataset on first use


def probe(ctx: Context) -> Outcome:
    from trm.launch.host.hardware import load_table

    workspace = ctx.work / "probe-ws"
    steps = PROBE_STEPS[ctx.profile]
    base = part_env(ctx)
    if isinstance(base, Outcome):
        return base
    env = {**base, "TASK": "arc2-smoke", "RUN_NAME": "gpu-acceptance-probe",
           "WORKSPACE": str(workspace), "NUM_GPUS": "1", "PROBE_STEPS": str(steps), "WANDB": "off"}  # fmt: skip
    code, output = run_command(
        [ctx.python, "-m", "trm", "select-config", "--probe"], ctx, timeout_s=ctx.limit(PROBE_LIMIT_S),
        log_name="probe.log", env=env,
    )  # fmt: skip
    found = sorted(workspace.rglob("launch/probe.json"))
    if not found:
        return Outcome(
            "error" if code is None else "fail", f"no probe.json (exit {code})", output=tail(output)
        )
    record = json.loads(found[-1].read_text())
    last = record["attempts"][-1]
    peak = max((int(v) for v in last.get("peak_mib", {}).values()), default=None)
    vram = last.get("vram_mib")
    tier = next((t for t in load_table().tiers if t.name == record["tier"]), None)
    data = {
        "tier": record["tier"],
        "table_micro_batch_size": record["table_micro_batch_size"],
        "chosen_micro_batch_size": record["chosen_micro_batch_size"],
        "peak_mib": peak,
        "vram_mib": vram,
        "peak_fraction_of_vram": round(peak / vram, 3) if peak and vram else None,
        "tier_min_vram_gib": tier.min_vram_gib if tier else None,
        "probe_steps": steps,
        "step_seconds": last.get("step_seconds"),
        "steps_timed": last.get("steps_timed"),
        "drift": record.get("drift", []),
    }
    timed = data["step_seconds"] is not None
    ok = (
        code == 0
        and record["chosen_micro_batch_size"] == record["table_micro_batch_size"]
        and peak is not None
        and timed
    )
    summary = (
        f"tier {record['tier']} micro-batch {record['table_micro_batch_size']} → "
        f"{record['chosen_micro_batch_size']}; peak {peak} MiB of {vram} MiB"
        + (f" ({data['peak_fraction_of_vram']:.0%})" if data["peak_fraction_of_vram"] else "")
        + (
            f"; {data['step_seconds']} s/step over {data['steps_timed']} step(s)"
            if timed
            else "; no step timed"
        )
        + (f"; drift: {'; '.join(data['drift'])}" if data["drift"] else "")
    )
    return Outcome("pass" if ok else "fail", summary, data, tail(output))
