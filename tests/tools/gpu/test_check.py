"""The GPU acceptance runner on CPU: the plan (--dry-run), the budget, the report with fake parts, the
parsers, and the parts' verdicts on recorded outputs."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools.gpu import check as ga

ROOT = Path(__file__).resolve().parents[3]


def _dry_run(tmp_path: Path, *args: str, **env_extra: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **env_extra}
    return subprocess.run(
        [sys.executable, "-m", "tools.gpu.check", "--dry-run", "--kit", str(tmp_path / "no-kit"), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.e2e  # tens of seconds: out of the default suite, run by make test-e2e
def test_dry_run_prints_every_part_and_touches_nothing(tmp_path: Path) -> None:
    out = tmp_path / "report"
    proc = _dry_run(tmp_path, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    for part in ga.PARTS:
        assert f"  {part.name} " in proc.stdout
    assert f"report: {out / 'report.json'}" in proc.stdout
    assert "upstream: not compared (TRM_UPSTREAM unset" in proc.stdout
    # Every part in one call is more than one 10-minute call holds: the plan says so.
    required = ga.planned_total(ga.PARTS, "quick", required_only=True)
    assert required > ga.DEFAULT_BUDGET_S and "does NOT fit: later parts will be skipped" in proc.stdout
    assert "eval " in proc.stdout and "[optional: runs when time is left]" in proc.stdout
    assert not out.exists()
    proc = _dry_run(tmp_path, "--only", "bench", TRM_UPSTREAM="/opt/upstream")
    assert proc.returncode == 0 and "1 part(s)" in proc.stdout and "upstream: /opt/upstream" in proc.stdout


def test_each_call_fits_the_budget_and_puts_the_proof_before_the_benches(tmp_path: Path) -> None:
    by_name = {p.name: p for p in ga.PARTS}
    for call, names in ga.CALLS.items():
        parts = [by_name[n] for n in names]
        required = ga.planned_total(parts, "quick", required_only=True)
        assert required <= ga.DEFAULT_BUDGET_S == 540, (call, required)
        proc = _dry_run(tmp_path, "--call", str(call))
        assert proc.returncode == 0, proc.stderr
        assert f"required parts {required} s (fits)" in proc.stdout
        assert f"report: {ROOT / 'build/gpu-acceptance' / f'call-{call}' / 'report.json'}" in proc.stdout
        assert f"call {call}: the extension is required" in proc.stdout
        # docs/gpu-host-checks.md states each call's plan: it must be this one
        assert f"| {required} s " in (ROOT / "docs" / "gpu-host-checks.md").read_text(), (call, required)
    # Call 1 proves (the gpu tests first of the GPU work, then the extension and training on it); call 2 measures.
    one, two = ga.CALLS[1], ga.CALLS[2]
    assert one.index("gpu-tests") < one.index("optimizer") < one.index("resume")
    assert one.index("kit") < one.index("imports") < one.index("extension-build") < one.index("gpu-tests")
    assert {"probe", "step-ab", "sdpa", "profile"} <= set(two) and not {"gpu-tests", "resume"} & set(two)
    order = [p.name for p in ga.PARTS]  # one call with every part: the proof before every bench
    assert max(order.index(n) for n in ("gpu-tests", "optimizer", "resume")) < min(
        order.index(n) for n in ("probe", "step-ab", "sdpa", "profile", "bench", "checkpoint", "eval")
    )


def test_unknown_part_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        ga.main(["--dry-run", "--only", "nope"])
    assert info.value.code == 2
    assert (
        "unknown part(s) nope; choose from facts, kit, imports, extension-build, collect, gpu-tests"
        in capsys.readouterr().err
    )


def _fake_parts(seen: list[str]) -> tuple[ga.Part, ...]:
    def passing(ctx: ga.Context) -> ga.Outcome:
        seen.append("pass")
        assert (ctx.out / "report.json").exists() is False  # the first part runs before any report exists
        return ga.Outcome("pass", "all good", {"max_abs_diff": 0.0}, "out | with a pipe")

    def failing(ctx: ga.Context) -> ga.Outcome:
        seen.append("fail")
        # The report of the parts so far is already on disk when the next one runs.
        assert json.loads((ctx.out / "report.json").read_text())["parts"][0]["status"] == "pass"
        return ga.Outcome("fail", "peak 90 % of VRAM")

    def crashing(ctx: ga.Context) -> ga.Outcome:
        seen.append("error")
        raise RuntimeError("CUDA error: an illegal memory access")

    def skipped(ctx: ga.Context) -> ga.Outcome:
        seen.append("skip")
        return ga.Outcome("skip", "upstream not requested", skipped=ga.NOT_WANTED)

    def planned(s: int) -> dict[str, int]:
        return {"quick": s, "full": s}

    return (
        ga.Part("one", "a passing part", planned(1), 5, passing, needs_cuda=False),
        ga.Part("two", "a failing part", planned(1), 5, failing, needs_cuda=False),
        ga.Part("three", "a crashing part", planned(1), 5, crashing, needs_cuda=False),
        ga.Part("four", "a skipped part", planned(1), 5, skipped, needs_cuda=False),
    )


def test_report_records_every_part_and_is_written_atomically(tmp_path: Path) -> None:
    seen: list[str] = []
    out = tmp_path / "gpu-acceptance"
    assert ga.main(["--out", str(out)], parts=_fake_parts(seen)) == 1
    assert seen == ["pass", "fail", "error", "skip"]  # a failure or crash does not stop the others
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "fail"
    assert [(p["name"], p["status"]) for p in report["parts"]] == [
        ("one", "pass"), ("two", "fail"), ("three", "error"), ("four", "skip"),
    ]  # fmt: skip
    crash = report["parts"][2]
    assert crash["summary"] == "RuntimeError: CUDA error: an illegal memory access"
    assert "Traceback" in crash["output"] and "crashing" in crash["output"]
    assert report["tolerances"]["resume_atol"] == ga.RESUME_ATOL and "seconds" in report
    md = (out / "report.md").read_text()
    assert md.startswith("# GPU acceptance: FAIL")
    assert "| one | pass |" in md and "| three | error |" in md and "out | with a pipe" in md
    assert '"max_abs_diff": 0.0' in md and "## two: fail" in md
    leftovers = [p.name for p in out.iterdir() if p.name not in ("report.json", "report.md", "work")]
    assert leftovers == []


def test_passing_and_skipped_parts_exit_0(tmp_path: Path) -> None:
    seen: list[str] = []
    parts = _fake_parts(seen)
    assert ga.main(["--out", str(tmp_path), "--only", "one", "four"], parts=parts) == 0
    assert json.loads((tmp_path / "report.json").read_text())["status"] == "pass"
    with pytest.raises(ValueError, match="status 'maybe'"):
        ga.Outcome("maybe", "")


def test_run_command_kills_the_whole_process_group_on_timeout(tmp_path: Path) -> None:
    ctx = ga.Context(out=tmp_path, work=tmp_path, python=sys.executable, env={"PATH": "/usr/bin:/bin"})
    start = time.monotonic()
    code, output = ga.run_command(
        ["bash", "-c", "echo started; sleep 30 & wait"], ctx, timeout_s=1.0, log_name="t.log"
    )
    assert code is None and time.monotonic() - start < 10
    assert output.startswith("$ bash -c") and "started" in output


def test_bench_output_parsing() -> None:
    output = "\n".join(
        [
            "config=paper device=cuda threads=16 batch=192 seq=916 hidden=512 H=3 L=4 layers=2 dtype=bfloat16",
            "ours/eager              412.3 ms/step   2.43 steps/s (first step 3.1 s) mfu=21.5%",
            "upstream/eager          530.0 ms/step   1.89 steps/s (first step 3.4 s) mfu=16.7%",
            "ours/compiled           301.9 ms/step   3.31 steps/s (first step 48.2 s) mfu=29.4%",
            "speedup eager: 1.29x vs upstream",
        ]
    )
    parsed = ga.parse_bench(output)
    assert parsed["variants"]["ours/compiled"] == {
        "ms_per_step": 301.9, "steps_per_s": 3.31, "mfu": 0.294, "first_step_s": 48.2
    }  # fmt: skip
    assert parsed["variants"]["upstream/eager"]["mfu"] == pytest.approx(0.167)
    assert parsed["speedup_vs_upstream"] == {"eager": 1.29}
    no_peak = ga.parse_bench("ours/eager   10.0 ms/step 100.00 steps/s (first step 0.1 s)")
    assert no_peak["variants"]["ours/eager"]["mfu"] is None


def test_junit_counts(tmp_path: Path) -> None:
    xml = tmp_path / "j.xml"
    xml.write_text(
        '<testsuites><testsuite name="pytest" tests="9" failures="1" errors="0" skipped="2"/></testsuites>'
    )
    assert ga.junit_counts(xml) == {"tests": 9, "failures": 1, "errors": 0, "skipped": 2}
    assert ga.junit_counts(tmp_path / "missing.xml") == {}


def _ctx(tmp_path: Path, **env: str) -> ga.Context:
    return ga.Context(
        out=tmp_path, work=tmp_path, python=sys.executable, env={"PATH": "/usr/bin:/bin", **env},
        kit=tmp_path / "no-kit",
    )  # fmt: skip


def _fake_probe(step_seconds: float | None, steps_timed: int):
    """A `run_command` that writes the record trm.launch.planning.probe writes for an H100 at micro-batch 192."""

    def fake_run(cmd, ctx, *, timeout_s, log_name, env=None):
        assert (
            cmd[-2:] == ["select-config", "--probe"]
            and env["TASK"] == "arc2-smoke"
            and env["NUM_GPUS"] == "1"
        )
        assert env["PROBE_STEPS"] == str(ga.PROBE_STEPS["quick"])
        launch = Path(env["WORKSPACE"]) / "checkpoints" / "gpu-acceptance-probe" / "launch"
        launch.mkdir(parents=True)
        attempt = {"micro_batch_size": 192, "returncode": 0, "out_of_memory": False, "peak_mib": {"0": 41234},
                   "vram_mib": 81559, "step_seconds": step_seconds, "steps_timed": steps_timed}  # fmt: skip
        record = {"tier": "h100-80g", "table_micro_batch_size": 192, "chosen_micro_batch_size": 192,
                  "attempts": [attempt], "drift": []}  # fmt: skip
        (launch / "probe.json").write_text(json.dumps(record))
        return 0, "micro-batch 192 fits"

    return fake_run


def test_probe_part_reads_the_probe_record(tmp_path: Path, monkeypatch) -> None:
    """The record as trm.launch.planning.probe writes it; the part compares it with the table (GPU-free)."""
    monkeypatch.setattr(ga, "run_command", _fake_probe(1.21, 2))
    outcome = ga.probe(_ctx(tmp_path))
    assert outcome.status == "pass", outcome
    assert outcome.data["peak_fraction_of_vram"] == round(41234 / 81559, 3)
    assert outcome.data["tier_min_vram_gib"] == 75
    assert outcome.summary == (
        "tier h100-80g micro-batch 192 → 192; peak 41234 MiB of 81559 MiB (51%); 1.21 s/step over 2 step(s)"
    )


def test_bench_part_requires_the_upstream_comparison_when_asked(tmp_path: Path, monkeypatch) -> None:
    line = "ours/compiled           301.9 ms/step   3.31 steps/s (first step 48.2 s) mfu=29.4%"
    monkeypatch.setattr(ga, "run_command", lambda *a, **k: (0, line))
    outcome = ga.bench(_ctx(tmp_path))
    assert outcome.status == "pass" and "301.9 ms/step, MFU 29.4%, compile 48 s" in outcome.summary
    assert "upstream not compared" in outcome.summary
    failed = ga.bench(_ctx(tmp_path, TRM_UPSTREAM="/opt/upstream"))
    assert failed.status == "fail" and "no comparison came out" in failed.summary


def test_gpu_tests_part_fails_on_skips(tmp_path: Path, monkeypatch) -> None:
    def fake_run(cmd, ctx, *, timeout_s, log_name, env=None):
        assert env["TRM_REQUIRE_GPU"] == "1" and cmd[cmd.index("-m", 2) + 1] == "gpu and not adam_ext"
        # the host's own pytest plugins stay out (pytest-benchmark broke this part on an H100 host)
        assert env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1"
        assert f"not {ga.RESUME_TWIN_TEST}" in cmd  # the quick profile leaves out what `resume` repeats
        junit = next(c.split("=", 1)[1] for c in cmd if c.startswith("--junitxml="))
        Path(junit).write_text('<testsuite tests="11" failures="0" errors="0" skipped="1"/>')
        return 0, "10 passed, 1 skipped"

    monkeypatch.setattr(ga, "run_command", fake_run)
    outcome = ga.gpu_tests(_ctx(tmp_path))
    assert outcome.status == "fail" and outcome.data["skipped"] == 1


def _timed_parts(ran: list[str]) -> tuple[ga.Part, ...]:
    def make(name: str) -> ga.Part:
        def run(ctx: ga.Context) -> ga.Outcome:
            ran.append(name)
            time.sleep(0.3)
            return ga.Outcome("pass", f"{name} ran")

        return run

    return (
        ga.Part("cpu-a", "runs on CPU", {"quick": 1, "full": 1}, 5, make("cpu-a"), needs_cuda=False),
        ga.Part("cuda-b", "needs CUDA", {"quick": 1, "full": 1}, 5, make("cuda-b")),
        ga.Part("cpu-big", "planned longer than the budget", {"quick": 50, "full": 50}, 60, make("cpu-big"),
                needs_cuda=False),
        ga.Part("cpu-c", "fits what is left", {"quick": 1, "full": 1}, 5, make("cpu-c"), needs_cuda=False),
    )  # fmt: skip


def test_without_a_gpu_cuda_parts_skip_and_parts_that_do_not_fit_are_skipped_for_time(tmp_path, monkeypatch):
    monkeypatch.setattr(ga, "cuda_available", lambda: False)
    ran: list[str] = []
    code = ga.main(["--out", str(tmp_path), "--budget-s", "10"], parts=_timed_parts(ran))
    assert code == 3  # incomplete: nothing failed, parts were skipped
    assert ran == ["cpu-a", "cpu-c"]
    report = json.loads((tmp_path / "report.json").read_text())
    parts = {p["name"]: p for p in report["parts"]}
    assert parts["cuda-b"]["status"] == "skip" and parts["cuda-b"]["skipped"] == ga.NO_GPU
    assert parts["cuda-b"]["summary"] == "skipped: no GPU (torch sees no CUDA device)"
    assert parts["cpu-big"]["skipped"] == ga.NO_TIME
    assert parts["cpu-big"]["summary"].startswith("skipped for time: planned 50 s on an H100, ")
    assert report["status"] == "incomplete" and report["budget_s"] == 10
    assert report["planned_h100_s"] == 53 and report["plan_fits_budget"] is False
    md = (tmp_path / "report.md").read_text()
    assert md.startswith("# GPU acceptance: INCOMPLETE") and "| cpu-big | skip | 50 |" in md
    assert "planned on one H100 53 s, required parts 53 s (does NOT fit)" in md


def test_with_a_gpu_every_part_that_fits_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(ga, "cuda_available", lambda: True)
    ran: list[str] = []
    assert ga.main(["--out", str(tmp_path), "--only", "cpu-a", "cuda-b"], parts=_timed_parts(ran)) == 0
    assert ran == ["cpu-a", "cuda-b"]
    with pytest.raises(SystemExit) as info:
        ga.main(["--budget-s", "0", "--dry-run"])
    assert info.value.code == 2


def test_the_optimizer_backend_is_read_from_the_training_log() -> None:
    log = "INFO trm.optim: AdamATan2 backend: torch (the adam_atan2 extension does not import; …)\nstep 3"
    assert ga.optimizer_backend(log) == "torch"
    assert ga.optimizer_backend("AdamATan2 backend: ext (compiled adam_atan2 extension)") == "ext"
    assert ga.optimizer_backend("no optimizer line") is None


def test_the_extension_is_built_only_from_an_sdist_and_required_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.setattr(ga, "extension_imports", lambda python, env: False)
    ctx = _ctx(tmp_path)
    ctx.adam_sdist = tmp_path / "missing.tar.gz"
    outcome = ga.extension_build(ctx)
    assert outcome.status == "skip" and outcome.skipped == ga.NOT_WANTED and "make gpu-kit" in outcome.summary
    ctx.require_extension = True
    assert ga.extension_build(ctx).status == "fail"
    # Not built and not required: the optimizer part records why and that training uses the torch backend.
    ctx.require_extension = False
    skipped = ga.optimizer(ctx)
    assert (
        skipped.status == "skip"
        and "torch backend" in skipped.summary
        and "install-adam-atan2" in skipped.summary
    )
    ctx.require_extension = True
    assert ga.optimizer(ctx).status == "fail"


def test_the_host_torch_version_range() -> None:
    assert all(ga.torch_supported(v) for v in ("2.10.0+cu128", "2.11.0+cu130", "2.13.0", "2.12.1+cpu"))
    assert not any(ga.torch_supported(v) for v in ("2.9.1+cu128", "2.14.0", "garbage"))


def test_a_probe_that_timed_no_step_fails(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(ga, "run_command", _fake_probe(None, 0))
    outcome = ga.probe(_ctx(tmp_path))
    assert outcome.status == "fail" and outcome.summary.endswith("; no step timed")


def test_make_gpu_check_runs_the_hosts_python_as_it_is() -> None:
    """`make gpu-check` starts the check with the given (host) Python and nothing else: no venv, no pip,
    so a host's own CUDA torch is never replaced; TRM_REQUIRE_GPU is the gpu-tests part's business."""
    proc = subprocess.run(
        ["make", "-n", "-s", "-C", str(ROOT), "gpu-check", "GPU_PYTHON=/opt/host/bin/python3", "ARGS=--budget-s 300"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    commands = [line for line in proc.stdout.splitlines() if not line.startswith("make")]
    assert commands == ["/opt/host/bin/python3 -m tools.gpu.check --budget-s 300"]


CHECKPOINT_JSON = {
    "device": "cuda:0", "identifiers": 1191730, "puzzle_emb_ndim": 512, "puzzle_table_mb": 2440.663,
    "checkpoint_mb": 4890.1, "sync_save_s": 9.5, "async_first_blocked_s": 2.1, "async_blocked_s": 0.41,
    "async_total_s": 9.9, "blocked_share": 0.0432, "target_share": 0.1, "identical": True, "files": {"a": "b"},
}  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "status"),
    [({}, "pass"), ({"identical": False}, "fail"), ({"device": "cpu"}, "fail")],
)
def test_checkpoint_part_reads_the_bench_json(tmp_path: Path, monkeypatch, changes, status) -> None:
    """The bench's stderr line comes first in the merged output; the state must have been on the GPU and
    every save must have written the same files."""
    record = {**CHECKPOINT_JSON, **changes}
    output = "cpu cores: 16, load average: 1.0, work dir: /x\n" + json.dumps(record, indent=2) + "\n"

    def fake_run(cmd, ctx, *, timeout_s, log_name, env=None):
        assert cmd[2:] == [
            "tools.bench.checkpoint",
            "--device",
            "cuda",
            "--json",
            "--dir",
            str(tmp_path / "checkpoint-bench"),
        ]
        return 0, output

    monkeypatch.setattr(ga, "run_command", fake_run)
    outcome = ga.checkpoint_save(_ctx(tmp_path))
    assert outcome.status == status, outcome
    assert "files" not in outcome.data and outcome.data["async_blocked_s"] == 0.41
    if status == "pass":
        assert "asynchronous blocks the loop 0.410 s (4.3%, target ≤ 10%)" in outcome.summary
    monkeypatch.setattr(ga, "run_command", lambda *a, **k: (1, "Traceback …\nRuntimeError: CUDA error"))
    broken = ga.checkpoint_save(_ctx(tmp_path))
    assert broken.status == "fail" and "without its JSON" in broken.summary


def test_eval_part_parses_rows_per_second(tmp_path: Path, monkeypatch) -> None:
    output = "\n".join(
        [
            "config=paper device=cuda threads=16 chunk=192 rows/pass=480 (batches of 192+48) halt_max_steps=16",
            "compiled: first pass (compiles) 41.5 s",
            "eager        812.4 rows/s (median of 2 passes: 0.59 0.60 s)",
            "compiled    1650.0 rows/s (median of 2 passes: 0.29 0.29 s)",
            "speedup compiled vs eager evaluation: 2.03x",
            "predictions identical in 99.6% of rows",
        ]
    )
    assert ga.parse_eval(output) == {
        "rows_per_s": {"eager": 812.4, "compiled": 1650.0},
        "first_compiled_pass_s": 41.5,
        "identical_predictions": pytest.approx(0.996),
    }
    monkeypatch.setattr(ga, "run_command", lambda *a, **k: (0, output))
    outcome = ga.evaluation(_ctx(tmp_path))
    assert outcome.status == "pass"
    assert outcome.summary == (
        "paper config: eager 812.4 rows/s, compiled 1650.0 rows/s (2.03x); compiling pass 41.5 s"
    )
    monkeypatch.setattr(ga, "run_command", lambda *a, **k: (0, output.replace("compiled    1650.0", "x")))
    assert ga.evaluation(_ctx(tmp_path)).status == "fail"


def test_an_optional_part_skipped_for_time_leaves_the_verdict_alone() -> None:
    base = {"status": "pass", "skipped": None}
    optional = {"status": "skip", "skipped": ga.NO_TIME, "required": False}
    assert ga.overall([base, optional]) == "pass"
    assert ga.overall([base, {**optional, "required": True}]) == "incomplete"
    assert ga.overall([base, {**optional, "skipped": ga.NO_GPU}]) == "incomplete"


def test_a_required_part_skipped_for_time_is_named_in_the_status() -> None:
    parts = [
        {"name": "facts", "status": "pass", "required": True},
        {"name": "gpu-tests", "status": "skip", "skipped": ga.NO_TIME, "required": True},
        {"name": "eval", "status": "skip", "skipped": ga.NO_TIME, "required": False},
    ]
    assert ga.overall(parts) == "incomplete"
    reason = ga.status_reason(parts)
    assert reason == "required part(s) skipped for time: gpu-tests; optional part(s) skipped for time: eval"
    report = {"status": "incomplete", "status_reason": reason, "started_unix": 0, "host": "h", "profile": "quick",
              "budget_s": 540, "planned_h100_s": 1, "planned_required_h100_s": 1, "plan_fits_budget": True,
              "parts": []}  # fmt: skip
    title = ga.render_markdown(report).splitlines()[0]
    assert title == f"# GPU acceptance: INCOMPLETE ({reason})"


def test_both_calls_run_in_order_and_a_cpu_host_reports_every_cuda_part_as_no_gpu(
    tmp_path, monkeypatch
) -> None:
    """The simulated loan: call 1, then call 2, each writing its own report; on CPU only the CUDA parts skip."""
    from tools.gpu import kit as gpu_kit

    monkeypatch.setattr(ga, "cuda_available", lambda: False)
    ran: list[str] = []

    def fake(name: str):
        def run(ctx: ga.Context) -> ga.Outcome:
            ran.append(name)
            assert ctx.require_extension  # a call insists on the extension
            return ga.Outcome("pass", f"{name} ok")

        return run

    parts = tuple(dataclasses.replace(p, run=fake(p.name)) for p in ga.PARTS)
    cuda = {p.name for p in parts if p.needs_cuda}
    for call in (1, 2):
        out = tmp_path / f"call-{call}"
        assert ga.main(["--call", str(call), "--out", str(out)], parts=parts) == 3
        report = json.loads((out / "report.json").read_text())
        assert report["call"] == call and [p["name"] for p in report["parts"]] == list(ga.CALLS[call])
        assert gpu_kit.check_simulated_report(report, cuda) == []
        assert report["status_reason"].startswith("skipped: no GPU: ")
    assert ran == [n for c in (1, 2) for n in ga.CALLS[c] if n not in cuda]


TRAIN_TABLE = """paper setup on cuda, batch 192, torch threads default
  trm-stack: 4.52 steps/s (0.221 s/step median of 40, MFU 34.9%)
  upstream:  4.41 steps/s (0.227 s/step median of 21, MFU 34.0%)
  ratio:     1.03x (misses the 1.3x goal)
"""


def test_step_ab_reads_the_trainer_bench_and_wants_twenty_timed_steps_each(tmp_path, monkeypatch) -> None:
    data = ga.parse_step_ab(TRAIN_TABLE)
    assert data["ours"] == {"s_per_step": 0.221, "steps_per_s": 4.52, "timed_steps": 40, "mfu": 0.349}
    assert data["upstream"]["timed_steps"] == 21 and data["ratio_vs_upstream"] == 1.03
    calls = []

    def fake_run(cmd, ctx, *, timeout_s, log_name, env=None):
        calls.append((cmd, env))
        return 0, TRAIN_TABLE

    monkeypatch.setattr(ga, "run_command", fake_run)
    ctx = _ctx(tmp_path)
    assert ga.step_ab(ctx).status == "fail"  # no upstream checkout: nothing to compare with
    ctx = _ctx(tmp_path, TRM_UPSTREAM="/opt/upstream")
    outcome = ga.step_ab(ctx)
    assert outcome.status == "pass" and "1.03x" in outcome.summary, outcome
    cmd, env = calls[-1]
    assert cmd[cmd.index("--setup") + 1] == "paper" and int(cmd[cmd.index("--steps") + 1]) >= 20 + 5
    assert env["TRM_UPSTREAM"] == "/opt/upstream"
    monkeypatch.setattr(
        ga, "run_command", lambda *a, **k: (0, TRAIN_TABLE.replace("median of 21", "median of 9"))
    )
    short = ga.step_ab(ctx)
    assert short.status == "fail" and short.summary.endswith("too few timed steps: upstream")
