"""The handoff bundle of a run: handoff.json, run.info, train.log, metrics.csv, metrics.png, submission.json.

handoff.json summarises throughput (step time, examples/s, MFU, peak GPU memory, loader wait share from the
trainer's `perf/*` metrics) and sets the launch's estimate (launch/estimate.json) against the actual wall
time and cost. metrics.png has the loss and accuracy curves, and below them throughput and MFU.

Everything is derived from the run directory (checkpoints, metrics, the launcher's `launch/` records), so
regenerating the bundle gives the same files. The bundle is built in a temp directory and published with
one rename: readers never see half a bundle. Its copies have their secrets replaced by `***` before that
rename (trm.launch.handoff.redaction; handoff.json's `redacted` names the files); the run's own files are
left as they are.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import re
from pathlib import Path
from typing import Any

from tqdm import tqdm

from trm.compile_setting import FALLBACK_FILE
from trm.errors import TRMError
from trm.gitinfo import UNKNOWN, code_git_sha
from trm.io import atomic_directory, atomic_write_json, atomic_write_text, sha256_file
from trm.launch.cost.estimate import ESTIMATE_FILE
from trm.launch.handoff.redaction import copy_redacted, redaction_line
from trm.launch.supervision.stepdown import STEP_DOWN_FILE
from trm.launch.supervision.supervisor import read_events
from trm.secrets import redact_object
from trm.training.early_stop import EARLY_STOP
from trm.training.throughput import summarize as summarize_throughput

STEP_RE = re.compile(r"^step_(\d+)$")
EVAL_RE = re.compile(r"^evaluator_ARC_step_(\d+)$")
BUNDLE_FILES = ("handoff.json", "run.info", "train.log", "metrics.csv", "metrics.png", "submission.json")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def checkpoint_digest(folder: Path) -> tuple[str, int, list[str]]:
    """(sha256 over the sorted `sha256  name` lines of every file, total bytes, files differing from manifest)."""
    manifest = _read_json(folder / "manifest.json").get("files", {})
    lines, total, mismatched = [], 0, []
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    for path in tqdm(files, desc=f"hashing {folder.name}", unit="file", leave=False, disable=None):
        rel = path.relative_to(folder).as_posix()
        digest = sha256_file(path)
        total += path.stat().st_size
        lines.append(f"{digest}  {rel}\n")
        expected = manifest.get(rel, {}).get("sha256") if isinstance(manifest.get(rel), dict) else None
        if expected is not None and expected != digest:
            mismatched.append(rel)
    return hashlib.sha256("".join(lines).encode()).hexdigest(), total, mismatched


def last_good_checkpoint(run_dir: Path) -> dict[str, Any] | None:
    """The newest `step_N/` that has COMPLETE and whose files match its manifest."""
    steps = sorted(
        ((int(m.group(1)), p) for p in run_dir.iterdir() if p.is_dir() and (m := STEP_RE.match(p.name))),
        reverse=True,
    )
    skipped = []
    for step, path in steps:
        if not (path / "COMPLETE").exists():
            skipped.append(f"{path.name}: no COMPLETE marker")
            continue
        digest, size, mismatched = checkpoint_digest(path)
        if mismatched:
            skipped.append(f"{path.name}: files differ from manifest.json: {', '.join(mismatched)}")
            continue
        return {"step": step, "path": str(path), "sha256": digest, "bytes": size, "skipped_newer": skipped}
    return None


def read_metrics(path: Path) -> dict[str, list[tuple[int, float]]]:
    """metrics.csv (long format `step,wall_time,name,value`) -> name -> [(step, value)]."""
    series: dict[str, list[tuple[int, float]]] = {}
    if not path.exists():
        return series
    with open(path, encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            try:
                step, value = int(float(row["step"])), float(row["value"])
            except (KeyError, TypeError, ValueError):
                continue
            if math.isfinite(value):
                series.setdefault(row["name"], []).append((step, value))
    return series


def summarize_metrics(series: dict[str, list[tuple[int, float]]]) -> dict[str, Any]:
    """Per metric: last step and value, min, max, count; plus the last step logged."""
    summary: dict[str, Any] = {}
    for name, points in sorted(series.items()):
        values = [v for _, v in points]
        summary[name] = {
            "last_step": points[-1][0],
            "last": values[-1],
            "min": min(values),
            "max": max(values),
            "count": len(values),
        }
    last = max((p[-1][0] for p in series.values() if p), default=None)
    return {"last_step": last, "metrics": summary}


def plot_metrics(series: dict[str, list[tuple[int, float]]], path: Path, title: str) -> None:
    """Loss curves (left) and accuracy curves (right) above examples/s and MFU (left) and the loader wait
    share (right), as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    losses = {n: p for n, p in series.items() if "loss" in n.lower()}
    # pass@1 and pass@2 (the competition metric); the larger K only crowd the plot (they are in handoff.json).
    accuracies = {
        n: p for n, p in series.items() if "accuracy" in n.lower() or n.lower().endswith(("pass@1", "pass@2"))
    }
    fig, ((ax_loss, ax_acc), (ax_speed, ax_wait)) = plt.subplots(2, 2, figsize=(12, 9))
    panels = (
        (ax_loss, losses, "loss"),
        (ax_acc, accuracies, "accuracy"),
        (ax_speed, {n: p for n, p in series.items() if n == "perf/examples_per_second"}, "examples/s"),
        (ax_wait, {n: p for n, p in series.items() if n == "perf/loader_wait_fraction"}, "loader wait share"),
    )
    for ax, group, label in panels:
        for name, points in sorted(group.items()):
            ax.plot(
                [s for s, _ in points],
                [v for _, v in points],
                label=name,
                marker="." if len(points) < 50 else None,
            )
        ax.set_xlabel("step")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        if group:
            ax.legend(fontsize=7)
        else:
            ax.text(
                0.5, 0.5, f"no {label} metrics logged yet", ha="center", va="center", transform=ax.transAxes
            )
    mfu = series.get("perf/mfu")
    if mfu:  # GPU runs: MFU on the throughput panel's second axis
        ax_mfu = ax_speed.twinx()
        ax_mfu.plot([s for s, _ in mfu], [100 * v for _, v in mfu], color="tab:red", label="MFU %")
        ax_mfu.set_ylabel("MFU %")
        ax_mfu.set_ylim(bottom=0)
        ax_mfu.legend(fontsize=7, loc="upper right")
        ax_speed.legend(fontsize=7, loc="upper left")
    ax_speed.set_ylim(bottom=0)
    ax_wait.set_ylim(0, 1)
    fig.suptitle(title)
    fig.tight_layout()
    # No timestamp in the metadata: regenerating the bundle gives the same bytes.
    fig.savefig(path, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)


def best_choice(run_dir: Path) -> dict[str, Any] | None:
    """The run's best checkpoint as `python -m trm best RUN_DIR --json` gives it, without evaluating anything:
    a subset run's own choice (the full evaluation of its best.top_k, recorded in best.json), else the
    highest value of the run's ranking metric; None before the first evaluation checkpoint. `note` states
    a fallback (the recorded choice's checkpoint is gone); `damaged` says why the chosen checkpoint's files
    no longer match their sha256 (its predictions, made before, still stand; the weights do not)."""
    from trm.training.checkpointing.best import best_checkpoint
    from trm.training.checkpointing.layout import check_folder

    try:
        best = best_checkpoint(run_dir)
    except TRMError:
        return None
    out = best.as_dict()
    try:
        check_folder(best.info.path, verify_hashes=True)
    except ValueError as why:
        out["damaged"] = f"{best.info.path} no longer matches its manifest ({why}): restore it from a copy"
    return out


def best_submission(run_dir: Path, best: dict[str, Any] | None) -> Path | None:
    """The predictions of the best checkpoint's full evaluation (in-run, or the end's re-evaluation of a
    subset run's candidates under best_candidates/), if they were saved."""
    from trm.training.full_eval import CANDIDATES_DIR

    if best is None or best.get("evaluation") != "full":
        return None
    step = best["step"]
    for folder in (run_dir, run_dir / CANDIDATES_DIR / f"step_{step}"):
        found = folder / f"evaluator_ARC_step_{step}" / "submission.json"
        if found.is_file():
            return found
    return None


def newest_submission(run_dir: Path) -> Path | None:
    """The newest `evaluator_ARC_step_N/submission.json` of the run, if any."""
    found = sorted(
        (int(m.group(1)), p / "submission.json")
        for p in run_dir.iterdir()
        if p.is_dir() and (m := EVAL_RE.match(p.name)) and (p / "submission.json").exists()
    )
    return found[-1][1] if found else None


def session_summary(events: list[dict[str, Any]], default_hourly: float | None) -> dict[str, Any]:
    """Wall time per launcher session, training seconds and the cost estimate (GPUs x hours x price)."""
    sessions: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    train_seconds = 0.0
    for ev in events:
        kind = ev.get("event")
        if kind == "session_start":
            current = {"start": ev.get("utc"), "t0": ev.get("time"), "gpus": ev.get("gpus", 0),
                       "hourly_usd": ev.get("hourly_usd"), "host": ev.get("host")}  # fmt: skip
            sessions.append(current)
        elif current is not None:
            # Any later event bounds the session (a killed launcher leaves no session_end; the cost guard's
            # heartbeat events keep the undercount below COST_LOG_MINUTES).
            current["end"], current["t1"] = ev.get("utc"), ev.get("time")
            if kind == "session_end":
                current["exit_code"] = ev.get("exit_code")
        if kind == "process_end" and str(ev.get("label", "")).startswith("train attempt"):
            train_seconds += float(ev.get("seconds") or 0.0)
    total_seconds, cost, priced = 0.0, 0.0, False
    for sess in sessions:
        seconds = max(0.0, float(sess.pop("t1", sess["t0"]) or 0.0) - float(sess.pop("t0") or 0.0))
        sess["seconds"] = round(seconds, 3)
        total_seconds += seconds
        hourly = sess.get("hourly_usd") if sess.get("hourly_usd") is not None else default_hourly
        if hourly is not None:
            priced = True
            sess_cost = seconds / 3600 * max(int(sess.get("gpus") or 0), 1) * float(hourly)
            sess["cost_usd"] = round(sess_cost, 4)
            cost += sess_cost
    return {
        "sessions": sessions,
        "wall_seconds": round(total_seconds, 3),
        "train_seconds": round(train_seconds, 3),
        "cost_usd": round(cost, 2) if priced else None,
        "last_exit_code": sessions[-1].get("exit_code") if sessions else None,
    }


def _git_sha() -> str | None:
    sha = code_git_sha()
    return None if sha == UNKNOWN else sha


def status_of(exit_code: object) -> str:
    """Human status of a run from the exit code of its last launcher session."""
    return {
        None: "unknown (no launcher session recorded, or still running)",
        0: "finished",
        75: "stopped after saving a checkpoint (run the resume command to continue)",
        74: "stopped: a checkpoint save found the disk full (free space, then run the resume command)",
        76: "stopped before training: the preflight found a fault of this node (run on another node)",
        77: "stopped: the trainer hung (thread stacks in hang_rank*.txt; run the resume command to continue)",
        78: "failed: a non-finite loss or gradient (repro in nonfinite_step*_rank*.pt; change lr or "
        "grad_clip_norm before resuming)",
        80: "stopped: CUDA out of memory (even at micro-batch 1, or a multi-node run restarting at a smaller "
        "micro-batch: see oom_step_down)",
        79: "stopped by the MAX_HOURS budget after saving (run the resume command to continue)",
        2: "failed: configuration or preflight error (exit 2)",
        3: "failed: some runs of an experiment batch failed (each run's status is in batch_results.json)",
        4: "failed: a Kaggle publish call failed (`python -m trm kaggle publish` names it; rerun it)",
    }.get(exit_code, f"failed (exit {exit_code})")  # type: ignore[call-overload]


def plan_vs_actual(
    estimate: dict[str, Any], timing: dict[str, Any], throughput: dict[str, Any]
) -> dict[str, Any] | None:
    """The launch's estimate next to what the run took (None when no estimate was recorded)."""
    if not estimate:
        return None
    planned_cost, cost = estimate.get("cost_usd"), timing["cost_usd"]
    return {
        "planned": estimate,
        "actual": {
            "wall_seconds": timing["wall_seconds"],
            "cost_usd": cost,
            "step_seconds_median": throughput["step_seconds_median"],
        },
        "wall_ratio": round(timing["wall_seconds"] / estimate["wall_seconds"], 3)
        if estimate.get("wall_seconds")
        else None,
        "cost_ratio": round(cost / planned_cost, 3) if cost is not None and planned_cost else None,
    }


def collect(run_dir: Path) -> dict[str, Any]:
    """The contents of handoff.json for `run_dir`."""
    launch = run_dir / "launch"
    plan = _read_json(launch / "plan.json")
    preflight = _read_json(launch / "preflight.json")
    run_json = _read_json(run_dir / "run.json")
    checkpoint = last_good_checkpoint(run_dir)
    manifest = _read_json(Path(checkpoint["path"]) / "manifest.json") if checkpoint else {}
    timing = session_summary(read_events(launch / "events.jsonl"), plan.get("gpu_hourly_usd"))
    series = read_metrics(run_dir / "metrics.csv")
    throughput = summarize_throughput(series)
    best = best_choice(run_dir)
    submission = best_submission(run_dir, best) or newest_submission(run_dir)
    versions = {
        "driver": preflight.get("driver_version"),
        "driver_cuda": preflight.get("driver_cuda"),
        "torch": preflight.get("torch") or run_json.get("versions", {}).get("torch"),
        "torch_cuda": preflight.get("torch_cuda"),
        "nccl": preflight.get("nccl"),
        "python": preflight.get("python") or run_json.get("versions", {}).get("python"),
        # the AdamATan2 that ran (run.json, written by the trainer), else what preflight found
        "optimizer_backend": (run_json.get("optimizer_backends") or {}).get("adam_atan2")
        or preflight.get("optimizer_backend"),
    }
    gpus = plan.get("gpus") or preflight.get("gpus") or []
    resume = plan.get("resume_command") or (
        f"python -m trm.train {' '.join(run_json.get('command', [])[1:])}".strip()
        if run_json.get("command")
        else None
    )
    return {
        "run_name": plan.get("run_name") or run_json.get("config", {}).get("run_name") or run_dir.name,
        "run_dir": os.path.abspath(run_dir),
        "status": status_of(timing["last_exit_code"]),
        "image_digest": plan.get("image_digest") or run_json.get("image_digest") or manifest.get("image_digest")
        or os.environ.get("TRM_IMAGE_DIGEST") or None,
        "git_sha": run_json.get("git_sha") or manifest.get("git_sha") or _git_sha(),
        "resolved_config": run_json.get("config"),
        "launch": {k: plan.get(k) for k in ("recipe", "hardware", "overrides", "train_command", "trainer_env")},
        "gpus": [{"name": g.get("name"), "uuid": g.get("uuid"), "memory_mib": g.get("memory_mib")} for g in gpus],
        "versions": versions,
        "dev_shm_bytes": preflight.get("dev_shm_bytes"),
        "world_size": run_json.get("world_size"),
        "wall_time": timing,
        "cost_estimate_usd": timing["cost_usd"],
        "last_good_checkpoint": checkpoint,
        "metrics_summary": summarize_metrics(series),
        "throughput": throughput,
        "plan_vs_actual": plan_vs_actual(_read_json(launch / ESTIMATE_FILE), timing, throughput),
        "best_checkpoint": best,
        # set when early stopping ended the run (early_stop.patience): where, why, the best so far then
        "early_stop": run_json.get(EARLY_STOP) or None,
        "submission": str(submission) if submission else None,
        "resume_command": resume,
        "resume_where": plan.get("resume_where") or (
            "the trm-stack checkout and venv that ran it" if resume else None
        ),
        "restore_command": plan.get("restore_command"),
        # set when torch.compile failed in the smoke gate and the run trained eager (trm.compile_setting)
        "compile_fallback": _read_json(launch / FALLBACK_FILE) or None,
        # set when the trainer ran out of GPU memory and the launcher halved the micro-batch
        # (trm.launch.supervision.stepdown): what was planned, what trains now, each step
        "oom_step_down": _read_json(launch / STEP_DOWN_FILE) or None,
    }  # fmt: skip


def render_info(data: dict[str, Any]) -> str:
    """run.info: the same facts for a human reader."""
    ckpt = data["last_good_checkpoint"]
    timing = data["wall_time"]
    metrics = data["metrics_summary"]["metrics"]
    hw = (data["launch"] or {}).get("hardware") or {}
    lines = [
        f"run:            {data['run_name']}",
        f"status:         {data['status']}",
        f"run dir:        {data['run_dir']}",
        f"image:          {data['image_digest'] or 'unknown'}",
        f"git sha:        {data['git_sha'] or 'unknown'}",
        f"hardware:       {hw.get('tier', '?')}: {hw.get('world_size', '?')} x {hw.get('gpu_name', '?')}, "
        f"micro-batch {hw.get('micro_batch_size', '?')} x {hw.get('grad_accumulation', '?')} accumulation, "
        f"global batch {hw.get('global_batch_size', '?')}",
        *([f"out of memory:  {_step_down_line(data['oom_step_down'])}"] if data.get("oom_step_down") else []),
        "gpus:           " + (", ".join(f"{g['name']} {g['uuid']}" for g in data["gpus"]) or "none (CPU)"),
        "versions:       " + ", ".join(f"{k} {v}" for k, v in data["versions"].items() if v),
        f"/dev/shm:       {data['dev_shm_bytes'] / 1024**3:.2f} GiB" if data["dev_shm_bytes"] else "/dev/shm:       ?",
        f"wall time:      {timing['wall_seconds'] / 3600:.2f} h over {len(timing['sessions'])} session(s), "
        f"training {timing['train_seconds'] / 3600:.2f} h",
        f"cost estimate:  ${data['cost_estimate_usd']:.2f}" if data["cost_estimate_usd"] is not None
        else "cost estimate:  unknown (set GPU_HOURLY_USD)",
        f"throughput:     {_throughput_line(data['throughput'])}",
        f"planned:        {_plan_line(data['plan_vs_actual'])}",
        f"checkpoint:     step {ckpt['step']} {ckpt['path']} sha256 {ckpt['sha256']}" if ckpt
        else "checkpoint:     none complete",
        f"best:           {_best_line(data.get('best_checkpoint'))}",
        *([f"early stop:     {_early_stop_line(data['early_stop'])}"] if data.get("early_stop") else []),
        f"submission:     {data['submission'] or 'none yet'}",
        f"secrets:        {redaction_line(data.get('redacted') or {})}",
        f"resume:         {data['resume_command'] or 'unknown'}",
        f"resume in:      {data['resume_where'] or 'unknown'}",
        *([f"restore from:   {data['restore_command']}  (on a new machine, before the resume command)"]
          if data.get("restore_command") else []),
        "",
        f"metrics (last logged step {data['metrics_summary']['last_step']}):",
    ]  # fmt: skip
    for name, m in metrics.items():
        lines.append(
            f"  {name:<36} last {m['last']:.6g} @ {m['last_step']}  min {m['min']:.6g}  max {m['max']:.6g}"
        )
    return "\n".join(lines) + "\n"


def _best_line(best: dict[str, Any] | None) -> str:
    """`step 200: ARC/pass@2 = 0.075 (full evaluation of the top 3 by subset score) PATH`."""
    if not best:
        return "none yet (no evaluation checkpoint)"
    candidates = best.get("candidates") or []
    how = f"{best['evaluation']} evaluation" + (
        f" of the top {len(candidates)} by subset score" if candidates else ""
    )
    line = f"step {best['step']}: {best['metric']} = {best['value']:.4g} ({how}) {best['path']}"
    return "; ".join([line, *(f"{key.upper()}: {best[key]}" for key in ("note", "damaged") if best.get(key))])


def _early_stop_line(record: dict[str, Any]) -> str:
    """`step 4000 of 10000 (12 evaluations): no new best of … ; best 0.31 at step 2400`."""
    best = record.get("best_value")
    return (
        f"step {record.get('step', '?')} of {record.get('step_limit', '?')} ({record.get('evaluations', '?')} "
        f"evaluations): {record.get('reason', '?')}; best "
        + (f"{best:.4g}" if isinstance(best, int | float) else "?")
        + f" at step {record.get('best_step', '?')}"
    )


def _step_down_line(record: dict[str, Any]) -> str:
    """`micro-batch 4 -> 2 (train attempt 1, resumed from step 2) -> 1 (...); global batch 16 kept`."""
    parts = [str(record.get("planned_micro_batch_size", "?"))]
    for step in record.get("steps") or []:
        resumed = step.get("resumes_from_step")
        where = f"{step.get('where', '?')}, resumed from " + (
            f"step {resumed}" if resumed is not None else "the start"
        )
        parts.append(f"{step.get('to', '?')} ({where})")
    return f"micro-batch {' -> '.join(parts)}; global batch {record.get('global_batch_size', '?')} kept"


def _throughput_line(t: dict[str, Any]) -> str:
    if not t["windows"]:
        return "not logged (perf/* metrics appear at each log_interval)"
    parts = [
        f"step {t['step_seconds_median']:.3g} s median (mean {t['step_seconds_mean']:.3g})",
        f"{t['examples_per_second_median']:.4g} examples/s",
        f"MFU {100 * t['mfu_median']:.1f} %" if t["mfu_median"] is not None else "MFU n/a (CPU)",
    ]
    if t["peak_memory_gib"] is not None:
        parts.append(f"peak GPU memory {t['peak_memory_gib']:.1f} GiB")
    parts.append(f"loader wait {100 * (t['loader_wait_fraction_mean'] or 0.0):.1f} %")
    return ", ".join(parts)


def _plan_line(p: dict[str, Any] | None) -> str:
    if p is None:
        return "no estimate recorded (launch/estimate.json is written by the launcher's hardware step)"
    planned, actual = p["planned"], p["actual"]
    cost = f" / ${planned['cost_usd']:.2f}" if planned.get("cost_usd") is not None else ""
    got = f" / ${actual['cost_usd']:.2f}" if actual["cost_usd"] is not None else ""
    return (
        f"{planned['wall_seconds'] / 3600:.2f} h{cost} ({planned['step_source']}); "
        f"actual so far {actual['wall_seconds'] / 3600:.2f} h{got}"
    )


class OtherRunsBundle(TRMError):
    """The handoff folder holds the bundle of another run (check_same_run)."""


def check_same_run(run_dir: Path, out_dir: Path) -> None:
    """Refuse (TRMError) to replace the bundle in `out_dir` when it is another run's: two runs of one RUN_NAME
    under different checkpoint folders share the default ARTIFACTS_DIR/RUN_NAME, and the first one's bundle
    may be all that is left of it once its machine is gone. The launch checks it before anything runs too. Paths
    compare after symbolic links are followed (a /workspace link and its mount name one run)."""
    recorded = _read_json(out_dir / "handoff.json").get("run_dir")
    if isinstance(recorded, str) and os.path.realpath(recorded) != os.path.realpath(run_dir):
        raise OtherRunsBundle(
            f"the handoff folder {out_dir}: refusing to replace it: it holds the bundle of another run "
            f"({os.path.abspath(recorded)}); nothing was changed. Pass another --out (the launcher: another "
            "ARTIFACTS_DIR or RUN_NAME), or move that bundle away yourself if it is this run's from another path"
        )


def build_bundle(run_dir: str | Path, out_dir: str | Path) -> Path:
    """Write the bundle of `run_dir` into `out_dir` (replaced as a whole); returns `out_dir`."""
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    if not run_dir.is_dir():
        raise TRMError(
            f"run directory {run_dir} does not exist; pass the trainer's checkpoint_path "
            "(CHECKPOINT_DIR/RUN_NAME) to `python -m trm handoff`"
        )
    check_same_run(run_dir, out_dir)
    data = collect(run_dir)
    redacted: dict[str, int] = {}  # bundle file -> lines or values whose secrets were replaced

    def copy(src: Path, dst: Path) -> None:
        if count := copy_redacted(src, dst):
            redacted[dst.name] = count

    with atomic_directory(out_dir, overwrite=True, flag="the handoff folder") as tmp:
        log = run_dir / "launch" / "train.log"
        if log.exists():
            copy(log, tmp / "train.log")
        else:
            atomic_write_text(
                tmp / "train.log", "no train.log: the run was not started by scripts/train_prod.sh\n"
            )
        for name in ("launch.log", "smoke.log", "probe.json"):
            if (run_dir / "launch" / name).exists():
                copy(run_dir / "launch" / name, tmp / name)
        if (run_dir / "metrics.csv").exists():
            copy(run_dir / "metrics.csv", tmp / "metrics.csv")
        else:
            atomic_write_text(tmp / "metrics.csv", "step,wall_time,name,value\n")
        # drawn here from numbers: metrics.png holds no text of the run's
        plot_metrics(read_metrics(run_dir / "metrics.csv"), tmp / "metrics.png", f"{data['run_name']}")
        if data["submission"]:
            copy(Path(data["submission"]), tmp / "submission.json")
        # handoff.json and run.info carry plan.json's launch settings and run.json's config
        data, count = redact_object(data)
        if count:
            redacted["handoff.json"] = count
        data["redacted"] = dict(sorted(redacted.items()))
        data["files"] = sorted({*(p.name for p in tmp.iterdir()), "handoff.json", "run.info"})
        atomic_write_json(tmp / "handoff.json", data)
        atomic_write_text(tmp / "run.info", render_info(data))
    return out_dir
