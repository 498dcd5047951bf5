from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import trm_in_process
from trm.errors import TRMError
from trm.launch.handoff.handoff import build_bundle, last_good_checkpoint, session_summary
from trm.secrets import Finding, scan_folder

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Token-shaped values built at run time (literal ones would trip the repository's own scan).
HF = "hf_" + "".join(chr(ord("a") + (3 * i) % 26) for i in range(34))
HEX = "".join("0123456789abcdef"[(5 * i + 3) % 16] for i in range(40))


def write_checkpoint(run: Path, step: int, *, complete: bool = True, corrupt: bool = False) -> None:
    folder = run / f"step_{step}"
    folder.mkdir(parents=True)
    (folder / "state.pt").write_bytes(f"state {step}".encode())
    digest = hashlib.sha256((folder / "state.pt").read_bytes()).hexdigest()
    manifest = {
        "step": step,
        "git_sha": "abc123",
        "image_digest": None,
        "files": {"state.pt": {"sha256": digest}},
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    if corrupt:
        (folder / "state.pt").write_bytes(b"bit rot")
    if complete:
        (folder / "COMPLETE").write_text(f"{step}\n")


def synthetic_run(root: Path) -> Path:
    """A run directory as the trainer and the launcher leave it after two sessions."""
    run = root / "checkpoints" / "trm-arc2"
    write_checkpoint(run, 100)
    write_checkpoint(run, 200, corrupt=True)  # complete but its files no longer match the manifest
    write_checkpoint(run, 300, complete=False)  # torn save
    rows = ["step,wall_time,name,value"]
    for step in range(1, 201):
        rows += [
            f"{step},{1000 + step},train/lm_loss,{3 / step:.5f}",
            f"{step},{1000 + step},train/accuracy,{step / 250:.4f}",
        ]
    rows += [
        "200,1300,eval/all/exact_accuracy,0.125",
        "200,1300,ARC/pass@2,0.05",
        "201,1301,train/lm_loss,nan",
    ]
    (run / "metrics.csv").write_text("\n".join(rows) + "\n")
    (run / "run.json").write_text(
        json.dumps(
            {
                "config": {"lr": 1e-4, "global_batch_size": 768},
                "world_size": 4,
                "git_sha": "abc123",
                "versions": {"torch": "2.13.0", "python": "3.11.9"},
            }
        )
    )
    ev = run / "evaluator_ARC_step_100"
    ev.mkdir()
    (ev / "submission.json").write_text('{"00576224": []}')
    launch = run / "launch"
    launch.mkdir()
    (launch / "train.log").write_text("step 1 loss 3.0\nstep 200 loss 0.015\n")
    gpus = [
        {"index": i, "name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-{i}", "memory_mib": 81559}
        for i in range(4)
    ]
    (launch / "plan.json").write_text(json.dumps({
        "run_name": "trm-arc2", "recipe": "arc2", "gpus": gpus, "gpu_hourly_usd": 2.0,
        "hardware": {"tier": "h100-80g", "world_size": 4, "gpu_name": "NVIDIA H100 80GB HBM3", "micro_batch_size": 192,
                     "grad_accumulation": 1, "global_batch_size": 768},
        "resume_command": "MAX_HOURS=70 bash scripts/train_prod.sh", "image_digest": "sha256:feed",
    }))  # fmt: skip
    (launch / "preflight.json").write_text(json.dumps({
        "ok": True, "driver_version": "550.127.05", "driver_cuda": "12.4", "torch": "2.13.0+cu128",
        "torch_cuda": "12.8", "nccl": "2.27.3", "python": "3.11.9", "dev_shm_bytes": 8 * 1024**3,
    }))  # fmt: skip
    events = [
        {"event": "session_start", "time": 0.0, "utc": "a", "gpus": 4, "hourly_usd": 2.0},
        {"event": "process_end", "time": 1800.0, "label": "train attempt 1", "seconds": 1700.0},
        {"event": "session_end", "time": 3600.0, "utc": "b", "exit_code": 75},
        {"event": "session_start", "time": 10000.0, "utc": "c", "gpus": 4, "hourly_usd": 2.0},
        {"event": "process_end", "time": 11000.0, "label": "train attempt 1", "seconds": 900.0},
        {"event": "session_end", "time": 11800.0, "utc": "d", "exit_code": 0},
    ]
    (launch / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events) + '{"event": "torn')
    return run


def test_bundle_contents(tmp_path):
    run = synthetic_run(tmp_path)
    out = build_bundle(run, tmp_path / "artifacts" / "trm-arc2")
    names = sorted(p.name for p in out.iterdir())
    for name in ("handoff.json", "run.info", "train.log", "metrics.csv", "metrics.png", "submission.json"):
        assert name in names
    data = json.loads((out / "handoff.json").read_text())
    ckpt = data["last_good_checkpoint"]
    assert ckpt["step"] == 100  # 300 is torn, 200 fails its manifest
    assert any("step_200" in s and "differ" in s for s in ckpt["skipped_newer"])
    assert any("step_300" in s and "COMPLETE" in s for s in ckpt["skipped_newer"])
    listing = f"{hashlib.sha256(b'state 100').hexdigest()}  state.pt\n"
    manifest = (run / "step_100" / "manifest.json").read_bytes()
    complete = (run / "step_100" / "COMPLETE").read_bytes()
    expected_lines = sorted(
        [
            f"{hashlib.sha256(complete).hexdigest()}  COMPLETE\n",
            f"{hashlib.sha256(manifest).hexdigest()}  manifest.json\n",
            listing,
        ],
        key=lambda line: line.split("  ")[1],
    )
    assert ckpt["sha256"] == hashlib.sha256("".join(expected_lines).encode()).hexdigest()
    assert data["image_digest"] == "sha256:feed" and data["git_sha"] == "abc123"
    assert [g["uuid"] for g in data["gpus"]] == ["GPU-0", "GPU-1", "GPU-2", "GPU-3"]
    assert data["versions"]["nccl"] == "2.27.3" and data["versions"]["driver"] == "550.127.05"
    assert data["dev_shm_bytes"] == 8 * 1024**3
    assert data["wall_time"]["wall_seconds"] == 3600 + 1800
    assert data["wall_time"]["train_seconds"] == 2600
    assert data["cost_estimate_usd"] == pytest.approx(1.5 * 4 * 2.0)
    assert data["status"] == "finished"
    assert data["resume_command"] == "MAX_HOURS=70 bash scripts/train_prod.sh"
    summary = data["metrics_summary"]
    assert summary["last_step"] == 200  # the nan row is dropped
    assert summary["metrics"]["train/lm_loss"]["min"] == pytest.approx(0.015)
    assert summary["metrics"]["ARC/pass@2"]["last"] == 0.05
    assert data["resolved_config"]["global_batch_size"] == 768
    assert (out / "metrics.png").read_bytes().startswith(PNG_SIGNATURE)
    assert (out / "submission.json").read_text() == '{"00576224": []}'
    info = (out / "run.info").read_text()
    assert "status:         finished" in info and "step 100" in info and "$12.00" in info
    assert "h100-80g: 4 x NVIDIA H100 80GB HBM3" in info


def test_secrets_in_the_runs_files_are_redacted_in_the_bundle_only(tmp_path):
    run = synthetic_run(tmp_path)
    launch = run / "launch"
    pin = f"hf://org/tokenizer-run@{'0' * 40}"  # a Hub revision: a commit id, not a key, and kept
    (launch / "train.log").write_text(
        f"step 1 loss 3.0\nuser code: logging in with {HF}\nwandb: WANDB_API_KEY={HEX}\n"
        f"loading {pin} for the tokenizer\nstep 200 loss 0.015\n"
    )
    plan = json.loads((launch / "plan.json").read_text())  # as an older launcher recorded it
    plan["trainer_env"] = {"WANDB_API_KEY": HEX, "WANDB_MODE": "online"}
    plan["overrides"] = [f"hub_token={HF}", "lr=1e-4"]
    plan["resume_command"] = f"WANDB_API_KEY={HEX} MAX_HOURS=70 bash scripts/train_prod.sh"
    (launch / "plan.json").write_text(json.dumps(plan))
    originals = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}

    out = build_bundle(run, tmp_path / "bundle")
    for file in out.iterdir():
        text = file.read_bytes().decode("latin-1")
        assert HF not in text and HEX not in text, file.name
    # the publish-time scan's loose rule still names the Hub pin's line (a key word and 40 hex), nothing else
    assert scan_folder(out) == [Finding("train.log", "line 4", "W&B API Key")]
    data = json.loads((out / "handoff.json").read_text())
    assert data["redacted"] == {"handoff.json": 3, "train.log": 2}  # lines and values, never the values
    assert data["launch"]["trainer_env"] == {"WANDB_API_KEY": "***", "WANDB_MODE": "online"}
    assert data["launch"]["overrides"] == ["hub_token=***", "lr=1e-4"]
    assert data["resume_command"] == "WANDB_API_KEY=*** MAX_HOURS=70 bash scripts/train_prod.sh"
    log = (out / "train.log").read_text()
    assert "logging in with ***\n" in log and "WANDB_API_KEY=***" in log and f"loading {pin} " in log
    assert "step 200 loss 0.015" in log
    info = (out / "run.info").read_text()
    assert "secrets:        replaced by *** in handoff.json (3), train.log (2); the run's own files" in info
    assert HEX not in info and HF not in info
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == originals  # the run's own: as were
    submission = run / "evaluator_ARC_step_100" / "submission.json"
    assert (out / "submission.json").read_bytes() == submission.read_bytes()  # nothing in it: copied as is


def test_a_secret_used_as_a_key_is_redacted_in_the_bundle(tmp_path):
    run = synthetic_run(tmp_path)
    launch = run / "launch"
    plan = json.loads((launch / "plan.json").read_text())
    plan["trainer_env"] = {HF: "set by user code", "WANDB_MODE": "online"}  # a token as a key
    (launch / "plan.json").write_text(json.dumps(plan))
    (launch / "probe.json").write_text(json.dumps({"tokens": {HF: 1, HF[:-1] + "z": 2}}))

    out = build_bundle(run, tmp_path / "bundle")
    for file in out.iterdir():
        assert HF not in file.read_bytes().decode("latin-1"), file.name
    data = json.loads((out / "handoff.json").read_text())
    assert data["launch"]["trainer_env"] == {"***": "set by user code", "WANDB_MODE": "online"}
    assert json.loads((out / "probe.json").read_text()) == {"tokens": {"***": 1, "*** (2)": 2}}  # none merged
    assert data["redacted"] == {"handoff.json": 1, "probe.json": 2}


def test_a_bundle_without_secrets_says_so_and_copies_byte_for_byte(tmp_path):
    run = synthetic_run(tmp_path)
    (run / "launch" / "train.log").write_bytes(b"step 1 loss 3.0\r\nodd byte \xff\nno newline")
    out = build_bundle(run, tmp_path / "bundle")
    assert (out / "train.log").read_bytes() == (run / "launch" / "train.log").read_bytes()
    assert (out / "metrics.csv").read_bytes() == (run / "metrics.csv").read_bytes()
    assert json.loads((out / "handoff.json").read_text())["redacted"] == {}
    assert "secrets:        none found in the copies" in (out / "run.info").read_text()


def test_regeneration_is_idempotent(tmp_path):
    run = synthetic_run(tmp_path)
    out = tmp_path / "bundle"
    build_bundle(run, out)
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    build_bundle(run, out)
    second = {p.name: p.read_bytes() for p in out.iterdir()}
    assert first == second
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".bundle")]  # no temp leftovers


def test_bundle_of_a_bare_run_without_launcher_records(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    out = build_bundle(run, tmp_path / "out")
    data = json.loads((out / "handoff.json").read_text())
    assert data["last_good_checkpoint"] is None and data["cost_estimate_usd"] is None
    assert data["status"].startswith("unknown")
    assert (out / "metrics.png").read_bytes().startswith(PNG_SIGNATURE)
    assert "submission.json" not in data["files"]


def test_missing_run_dir_is_a_clean_error(tmp_path):
    with pytest.raises(TRMError, match="does not exist"):
        build_bundle(tmp_path / "nope", tmp_path / "out")
    proc = subprocess.run(
        [sys.executable, "-m", "trm", "handoff", str(tmp_path / "nope")], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_handoff_command_default_location(tmp_path, monkeypatch, capsys):
    run = synthetic_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    # in this process (test_missing_run_dir_is_a_clean_error starts `python -m trm handoff` itself)
    env = {**os.environ, "ARTIFACTS_DIR": str(tmp_path / "arts")}
    proc = trm_in_process(monkeypatch, capsys, ["handoff", str(run)], env)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "arts" / "trm-arc2" / "handoff.json").exists()


def test_another_runs_bundle_of_the_same_name_is_never_replaced(tmp_path, monkeypatch, capsys):
    """Two runs named alike under different checkpoint folders share ARTIFACTS_DIR/RUN_NAME: the second used
    to replace the first's bundle, which may be all that is left of it once its machine is gone."""
    first, second = synthetic_run(tmp_path / "a"), synthetic_run(tmp_path / "b")
    env = {**os.environ, "ARTIFACTS_DIR": str(tmp_path / "arts")}
    assert trm_in_process(monkeypatch, capsys, ["handoff", str(first)], env).returncode == 0
    bundle = tmp_path / "arts" / first.name
    before = {p.name: p.read_bytes() for p in bundle.iterdir()}
    proc = trm_in_process(monkeypatch, capsys, ["handoff", str(second)], env)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert (
        f"the handoff folder {bundle}: refusing to replace it: it holds the bundle of another run ({first})"
        in (proc.stderr)
    )
    assert {p.name: p.read_bytes() for p in bundle.iterdir()} == before
    monkeypatch.chdir(first.parent)  # the same run, named by a relative path: rebuilt in place
    assert trm_in_process(monkeypatch, capsys, ["handoff", first.name], env).returncode == 0
    assert json.loads((bundle / "handoff.json").read_text())["run_dir"] == str(first)
    link = tmp_path / "mount"  # and through a symbolic link to its folder (a /workspace link and its mount)
    link.symlink_to(first.parent)
    assert trm_in_process(monkeypatch, capsys, ["handoff", str(link / first.name)], env).returncode == 0


def test_the_command_refuses_a_folder_that_is_no_run_and_writes_nothing(tmp_path, monkeypatch, capsys):
    """A path named by mistake (a home folder, a dataset) used to get an empty bundle and exit 0."""
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "todo.txt").write_text("mine")
    proc = trm_in_process(monkeypatch, capsys, ["handoff", str(mine), "--out", str(tmp_path / "out")])
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert f"error: {mine} is no run directory (no run.json, launch/ or step_N/ in it)" in proc.stderr
    assert not (tmp_path / "out").exists() and [p.name for p in mine.iterdir()] == ["todo.txt"]


def test_session_summary_without_price():
    events = [
        {"event": "session_start", "time": 0.0, "gpus": 8},
        {"event": "session_end", "time": 7200.0, "exit_code": 2},
    ]
    summary = session_summary(events, None)
    assert summary["wall_seconds"] == 7200 and summary["cost_usd"] is None and summary["last_exit_code"] == 2
    assert session_summary(events, 3.0)["cost_usd"] == pytest.approx(2 * 8 * 3.0)


def test_last_good_checkpoint_none_when_all_torn(tmp_path):
    write_checkpoint(tmp_path, 5, complete=False)
    assert last_good_checkpoint(tmp_path) is None


def test_killed_session_is_bounded_by_its_last_event():
    events = [
        {"event": "session_start", "time": 0.0, "gpus": 4, "hourly_usd": 1.0},
        {"event": "process_start", "time": 60.0, "label": "train attempt 1"},
        {"event": "heartbeat", "time": 1800.0, "usd": 2.0},
    ]
    summary = session_summary(events, None)
    assert summary["wall_seconds"] == 1800 and summary["last_exit_code"] is None
    assert summary["cost_usd"] == pytest.approx(2.0)


def test_bundle_of_an_image_run_resumes_with_the_launcher_inside_that_image(tmp_path):
    run = synthetic_run(tmp_path)
    plan_path = run / "launch" / "plan.json"
    plan = json.loads(plan_path.read_text())
    where = "inside the trm image sha256:feed: the same container, or a new one of this image"
    plan.update(resume_command="TASK=arc2 python -m trm launch", resume_where=where)
    plan_path.write_text(json.dumps(plan))
    out = build_bundle(run, tmp_path / "artifacts" / "trm-arc2")
    data = json.loads((out / "handoff.json").read_text())
    assert data["resume_command"] == "TASK=arc2 python -m trm launch"  # no scripts/ in the image
    assert data["resume_where"] == where
    info = (out / "run.info").read_text()
    assert "resume:         TASK=arc2 python -m trm launch\n" in info and f"resume in:      {where}\n" in info


def test_throughput_summary_plan_against_actual_and_the_second_plot_row(tmp_path):
    import struct

    run = synthetic_run(tmp_path)
    perf = []
    for step, (seconds, mfu) in enumerate([(0.30, 0.25), (0.25, 0.31), (0.25, 0.31), (0.26, 0.30)], 1):
        perf += [
            f"{step},{1000 + step},perf/step_seconds,{seconds}",
            f"{step},{1000 + step},perf/examples_per_second,{768 / seconds}",
            f"{step},{1000 + step},perf/mfu,{mfu}",
            f"{step},{1000 + step},perf/loader_wait_fraction,0.02",
            f"{step},{1000 + step},perf/peak_memory_gib,{40 + step}",
        ]
    with open(run / "metrics.csv", "a") as f:
        f.write("\n".join(perf) + "\n")
    estimate = {"total_steps": 518250, "step_seconds": 0.258, "step_source": "estimate: FLOPs at MFU 0.30",
                "evaluations": 125, "eval_seconds": 1242.0, "gpus": 4, "hourly_usd": 2.0,
                "train_seconds": 133700.0, "wall_seconds": 4000.0, "cost_usd": 8.0}  # fmt: skip
    (run / "launch" / "estimate.json").write_text(json.dumps(estimate))
    out = build_bundle(run, tmp_path / "bundle")
    data = json.loads((out / "handoff.json").read_text())
    t = data["throughput"]
    assert t["windows"] == 4 and t["step_seconds_median"] == pytest.approx(0.255)
    assert t["step_seconds_mean"] == pytest.approx(0.265) and t["mfu_median"] == pytest.approx(0.305)
    assert t["peak_memory_gib"] == 44 and t["loader_wait_fraction_mean"] == pytest.approx(0.02)
    pva = data["plan_vs_actual"]
    assert pva["planned"] == estimate
    assert pva["actual"]["wall_seconds"] == 5400 and pva["actual"]["cost_usd"] == pytest.approx(12.0)
    assert pva["wall_ratio"] == pytest.approx(1.35) and pva["cost_ratio"] == pytest.approx(1.5)
    info = (out / "run.info").read_text()
    assert (
        "step 0.255 s median (mean 0.265)" in info and "MFU 30.5 %" in info and "peak GPU memory 44.0" in info
    )
    assert (
        "planned:        1.11 h / $8.00 (estimate: FLOPs at MFU 0.30); actual so far 1.50 h / $12.00" in info
    )
    width, height = struct.unpack(">II", (out / "metrics.png").read_bytes()[16:24])
    assert (width, height) == (1200, 900)  # two rows of panels: curves, then throughput


def test_bundle_without_throughput_or_estimate_says_so(tmp_path):
    out = build_bundle(synthetic_run(tmp_path), tmp_path / "bundle")
    data = json.loads((out / "handoff.json").read_text())
    assert data["throughput"]["windows"] == 0 and data["throughput"]["mfu_median"] is None
    assert data["plan_vs_actual"] is None
    info = (out / "run.info").read_text()
    assert "throughput:     not logged" in info and "planned:        no estimate recorded" in info


def test_a_subset_run_hands_off_its_chosen_checkpoint_and_that_evaluations_predictions(tmp_path):
    """A run whose in-run evaluations read a subset: the handoff names the checkpoint the run chose by the full
    evaluation of its top-k (not the newest, not the subset's best) and ships that evaluation's predictions."""
    from trm.training.checkpointing import layout as ckpt
    from trm.training.checkpointing.best import select_best

    run = tmp_path / "run"
    subset = "subset/ARC/pass@2"
    full = {100: 0.02, 200: 0.08, 300: 0.04}  # step -> full score; the subset prefers 300
    for step, sub in ((100, 0.05), (200, 0.10), (300, 0.12)):
        folder = ckpt.prepare_partial(run, step)
        (folder / "state.pt").write_bytes(b"w")
        ckpt.publish(run, step, {"step": step, "kind": ckpt.EVAL, "eval_metrics": {subset: sub},
                                 "best_metric": subset, "best_top_k": 2})  # fmt: skip
        ev = run / "subset" / f"evaluator_ARC_step_{step}"  # the subset's own predictions: never shipped
        ev.mkdir(parents=True)
        (ev / "submission.json").write_text(f'{{"subset": {step}}}')
    chosen = run / "best_candidates" / "step_200" / "evaluator_ARC_step_200"
    chosen.mkdir(parents=True)
    (chosen / "submission.json").write_text('{"chosen": 200}')
    select_best(run, 2, lambda info: {"ARC/pass@2": full[info.step], "ARC/count": 120.0})

    out = build_bundle(run, tmp_path / "out")
    data = json.loads((out / "handoff.json").read_text())
    best = data["best_checkpoint"]
    assert (best["step"], best["metric"], best["value"], best["evaluation"]) == (
        200,
        "ARC/pass@2",
        0.08,
        "full",
    )
    assert [c["step"] for c in best["candidates"]] == [300, 200]
    assert data["submission"] == str(chosen / "submission.json")
    assert (out / "submission.json").read_text() == '{"chosen": 200}'
    info = (out / "run.info").read_text()
    assert (
        "best:           step 200: ARC/pass@2 = 0.08 (full evaluation of the top 2 by subset score)" in info
    )


def test_a_run_before_its_first_evaluation_has_no_best_yet(tmp_path):
    data = json.loads((build_bundle(synthetic_run(tmp_path), tmp_path / "out") / "handoff.json").read_text())
    assert data["best_checkpoint"] is None  # its checkpoints carry no evaluation metrics
    assert "best:           none yet" in (tmp_path / "out" / "run.info").read_text()


def _chosen_subset_run(tmp_path):
    """The subset run of the test above, reduced: step 200 chosen by the full evaluation, 300 the subset's best."""
    from trm.training.checkpointing import layout as ckpt
    from trm.training.checkpointing.best import select_best

    run = tmp_path / "run"
    subset = "subset/ARC/pass@2"
    for step, sub in ((100, 0.05), (200, 0.10), (300, 0.12)):
        folder = ckpt.prepare_partial(run, step)
        (folder / "state.pt").write_bytes(b"weights")
        ckpt.publish(run, step, {"step": step, "kind": ckpt.EVAL, "eval_metrics": {subset: sub},
                                 "best_metric": subset, "best_top_k": 2})  # fmt: skip
    full = {100: 0.02, 200: 0.08, 300: 0.04}
    select_best(run, 2, lambda info: {"ARC/pass@2": full[info.step]})
    return run


def test_a_subset_run_whose_chosen_checkpoint_is_gone_states_the_fallback(tmp_path, caplog):
    import shutil

    run = _chosen_subset_run(tmp_path)
    shutil.rmtree(run / "step_200")
    with caplog.at_level("WARNING"):
        out = build_bundle(run, tmp_path / "out")
    best = json.loads((out / "handoff.json").read_text())["best_checkpoint"]
    assert (best["step"], best["evaluation"]) == (300, "subset")
    assert "chose step_200" in best["note"] and "missing or incomplete" in best["note"]
    assert "best by subset/ARC/pass@2 instead" in best["note"] and "chose step_200" in caplog.text
    info = (out / "run.info").read_text()
    assert "(subset evaluation)" in info and "NOTE: " in info and "Restore step_200" in info


def test_a_subset_run_whose_chosen_checkpoint_is_damaged_says_so(tmp_path):
    run = _chosen_subset_run(tmp_path)
    (run / "step_200" / "state.pt").write_bytes(b"WEIGHTS")  # same size, other bytes
    out = build_bundle(run, tmp_path / "out")
    best = json.loads((out / "handoff.json").read_text())["best_checkpoint"]
    assert best["step"] == 200 and "note" not in best
    assert "state.pt does not match its sha256" in best["damaged"]
    assert "DAMAGED: " in (out / "run.info").read_text()
    intact = json.loads(
        (build_bundle(_chosen_subset_run(tmp_path / "b"), tmp_path / "o2") / "handoff.json").read_text()
    )
    assert "damaged" not in intact["best_checkpoint"] and "note" not in intact["best_checkpoint"]


def test_a_run_that_early_stopping_ended_hands_off_as_finished_with_where_and_why(tmp_path):
    run = synthetic_run(tmp_path)
    plain = json.loads((build_bundle(run, tmp_path / "plain") / "handoff.json").read_text())
    assert plain["early_stop"] is None
    assert "early stop" not in (tmp_path / "plain" / "run.info").read_text()
    record = {"step": 200, "step_limit": 1000, "evaluations": 5, "metric": "ARC/pass@2", "best_step": 100,
              "best_value": 0.05, "reason": "no new best of ARC/pass@2 (by more than 0) in the last 3 in-run "
              "evaluations (early_stop.patience=3)"}  # fmt: skip
    run_json = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**run_json, "early_stop": record}))
    out = build_bundle(run, tmp_path / "stopped")
    data = json.loads((out / "handoff.json").read_text())
    assert data["status"] == "finished" and data["early_stop"] == record  # exit 0: a finished run
    info = (out / "run.info").read_text()
    assert "early stop:     step 200 of 1000 (5 evaluations): no new best of ARC/pass@2" in info
    assert "best 0.05 at step 100" in info
