"""ON_END / ON_BUDGET: a fake `vastai` on PATH, a Prime Intellect API on 127.0.0.1, Kubernetes, a plain host;
the token never reaches a log or a file of the run."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import JsonApi, json_api, needs_rclone, trm_in_process, write_fake_vastai
from trm import exit_codes
from trm.errors import TRMError
from trm.launch.config.settings import LaunchSettings, policy_from_env
from trm.launch.plan.plan import build_plan
from trm.launch.provider.release import VASTAI_CLI, ReleasePolicy, release
from trm.launch.supervision.supervisor import read_events

ROOT = Path(__file__).resolve().parents[3]
TOKEN = "pi-test-token-7f3c9a1e5b"
VAST_KEY = "vast-scoped-key-0d4e8b2a"


def fake_vastai(tmp_path: Path) -> tuple[Path, Path]:
    """A `vastai` (as vastai 1.9.1 answers) that records its arguments, one call a line; returns (bin dir,
    record file)."""
    bin_dir, record = tmp_path / "bin", tmp_path / "vastai.calls"
    write_fake_vastai(bin_dir, record)
    return bin_dir, record


def vast_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    bin_dir, _ = fake_vastai(tmp_path)
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "CONTAINER_ID": "4242",
        "CONTAINER_API_KEY": VAST_KEY,
        **extra,
    }


def prime_api(*statuses: int) -> contextlib.AbstractContextManager[JsonApi]:
    """A Prime Intellect API double on 127.0.0.1 whose pod-abc is deleted with each of `statuses` in turn
    (the last one repeats; none: 200): 200 with the pod terminated, any other with a refusal."""
    replies = [(s, {"status": "TERMINATED"} if s == 200 else {"detail": "not authorized"}) for s in statuses]
    return json_api({"DELETE /api/v1/pods/pod-abc": replies or [(200, {"status": "TERMINATED"})]})


def test_actions_follow_the_exit_code():
    policy = ReleasePolicy(on_end="destroy", on_budget="stop")
    assert policy.action_for(exit_codes.OK) == "destroy"
    assert policy.action_for(exit_codes.BUDGET_STOPPED) == "stop"
    for code in (1, exit_codes.CONFIG_ERROR, exit_codes.DISK_FULL, exit_codes.SAVED_RETRY, 143):
        assert policy.action_for(code) == "keep"
    # ON_BUDGET follows ON_END unless set
    assert (
        policy_from_env(
            {"ON_END": "stop", "CONTAINER_ID": "1", "CONTAINER_API_KEY": "k"}, sync_to=""
        ).on_budget
        == "stop"
    )


@pytest.mark.parametrize(
    ("env", "sync_to", "message"),
    [
        ({"ON_END": "halt"}, "", "ON_END='halt': use one of keep, stop, destroy"),
        ({"ON_END": "stop", "RELEASE_VIA": "aws"}, "", "RELEASE_VIA='aws'"),
        ({"ON_END": "stop"}, "", "set RELEASE_VIA=host"),
        ({"ON_END": "destroy", "CONTAINER_ID": "1", "CONTAINER_API_KEY": "k"}, "", "set SYNC_TO="),
        ({"ON_BUDGET": "stop", "PRIME_POD_ID": "p", "PRIME_API_KEY": "t"}, "r:b", "cannot be stopped"),
        ({"ON_END": "destroy", "PRIME_POD_ID": "p"}, "r:b", "PRIME_API_KEY"),
    ],
)
def test_bad_release_settings_name_the_variable_and_the_fix(env, sync_to, message):
    with pytest.raises(TRMError, match=message):
        policy_from_env(env, sync_to=sync_to)


def test_kubernetes_destroy_needs_no_sync_the_exit_code_ends_the_job():
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "ON_END": "destroy"}
    policy = policy_from_env(env, sync_to="")
    lines: list[str] = []
    assert release(policy, exit_codes.BUDGET_STOPPED, env, lines.append) == "exit"
    assert "ends the Job with the launcher's exit code 79" in lines[-1]


@pytest.mark.parametrize(
    ("code", "action"), [(exit_codes.OK, "destroy"), (exit_codes.BUDGET_STOPPED, "stop")]
)
def test_vast_instance_is_released_through_the_cli(tmp_path, code, action):
    env = vast_env(tmp_path, ON_END="destroy", ON_BUDGET="stop")
    policy = policy_from_env(env, sync_to="remote:bucket")
    lines: list[str] = []
    assert release(policy, code, env, lines.append) == action
    yes = " --yes" if action == "destroy" else ""  # vastai 1.9.1's destroy asks for confirmation without it
    assert (tmp_path / "vastai.calls").read_text().splitlines() == [
        f"{action} instance 4242{yes} key={VAST_KEY}"
    ]
    assert VAST_KEY not in "\n".join(lines) and "(API key from the environment)" in "\n".join(lines)


def test_vast_destroy_becomes_stop_when_the_final_sync_failed(tmp_path):
    env = vast_env(tmp_path, ON_END="destroy")
    policy = policy_from_env(env, sync_to="remote:bucket")
    assert release(policy, exit_codes.OK, env, print, synced=False) == "stop"
    assert (tmp_path / "vastai.calls").read_text().startswith("stop instance 4242")


def test_a_failing_vastai_keeps_the_machine_and_says_so(tmp_path):
    """vastai exits 1 when an error escaped it (the network's, after its own retries): tried three times."""
    env = vast_env(tmp_path, ON_END="stop")
    (tmp_path / "bin" / "vastai").write_text(f"#!/bin/sh\necho 'connection error {VAST_KEY}' >&2\nexit 1\n")
    lines: list[str] = []
    waits: list[float] = []
    policy = policy_from_env(env, sync_to="")
    assert release(policy, exit_codes.OK, env, lines.append, sleep=waits.append) == "keep"
    text = "\n".join(lines)
    assert "release FAILED" in text and "release it by hand" in text and VAST_KEY not in text
    assert waits == [15.0, 60.0]  # the CLI's failure may be the network's: tried three times


@pytest.mark.parametrize(
    ("status", "tries", "hint"),
    [(401, 1, "a key allowed to manage this instance"), (404, 1, ""), (503, 3, "")],
)
def test_a_vastai_refusal_is_a_failure_and_only_a_passing_one_is_tried_again(tmp_path, status, tries, hint):
    """vastai 1.9.1 exits 0 when the API refuses ("Failed with error 401: ..."): the release is not taken
    for done, and a refusal no retry changes (a bad key, no such instance) is not waited on."""
    env = vast_env(tmp_path, ON_END="destroy", VASTAI_FAIL_STATUS=str(status))
    lines: list[str] = []
    waits: list[float] = []
    assert (
        release(policy_from_env(env, sync_to="r:b"), exit_codes.OK, env, lines.append, sleep=waits.append)
        == "keep"
    )
    assert len((tmp_path / "vastai.calls").read_text().splitlines()) == tries
    assert waits == [15.0, 60.0][: tries - 1]
    assert f"HTTP {status}" in lines[-1] and hint in lines[-1] and "release it by hand" in lines[-1], lines


def test_vast_destroy_is_confirmed_and_never_waits_for_an_answer(tmp_path):
    """vastai 1.9.1's `destroy instance` asks "Are you sure?" on stdin: the release answers --yes and gives the
    CLI no stdin (the launcher's may be a terminal nobody watches); an unconfirmed answer is no release."""
    env = vast_env(tmp_path, ON_END="destroy")
    read, write = os.pipe()  # a stdin that never answers nor closes, like an unattended terminal
    saved = os.dup(0)
    os.dup2(read, 0)
    try:
        lines: list[str] = []
        assert release(policy_from_env(env, sync_to="r:b"), exit_codes.OK, env, lines.append) == "destroy", (
            lines
        )
    finally:
        os.dup2(saved, 0)
        for fd in (saved, read, write):
            os.close(fd)
    assert lines[-1] == "release: vastai: destroying instance 4242."
    (tmp_path / "bin" / "vastai").write_text("#!/bin/sh\necho Aborted.\n")
    lines.clear()
    waits: list[float] = []
    assert (
        release(policy_from_env(env, sync_to="r:b"), exit_codes.OK, env, lines.append, sleep=waits.append)
        == "keep"
    )
    assert "did not confirm the destroy: Aborted." in lines[-1] and waits == [], lines
    # vastai 1.9.1 with a 2FA key file: it prints the expired session's 401, logs in again itself, then
    # destroys; a long stderr after the confirmation must not hide it either
    (tmp_path / "bin" / "vastai").write_text(
        "#!/bin/sh\necho 'Failed with error 401: Your 2FA session has expired.' >&2\n"
        "echo 'destroying instance 4242.'\n" + "echo 'warning: a long deprecation notice' >&2\n" * 40
    )
    lines.clear()
    assert release(policy_from_env(env, sync_to="r:b"), exit_codes.OK, env, lines.append) == "destroy", lines


def test_prime_intellect_pod_is_deleted_with_the_bearer_token(tmp_path):
    with prime_api() as api:
        env = {
            "PRIME_POD_ID": "pod-abc",
            "PRIME_API_KEY": TOKEN,
            "PRIME_API_URL": api.url,
            "ON_END": "destroy",
        }
        lines: list[str] = []
        assert release(policy_from_env(env, sync_to="r:b"), exit_codes.OK, env, lines.append) == "destroy"
        # the token from a file works the same
        key_file = tmp_path / "prime.key"
        key_file.write_text(TOKEN + "\n")
        env_file = {
            **{k: v for k, v in env.items() if k != "PRIME_API_KEY"},
            "PRIME_API_KEY_FILE": str(key_file),
        }
        assert (
            release(policy_from_env(env_file, sync_to="r:b"), exit_codes.OK, env_file, lines.append)
            == "destroy"
        )
    sent = [(r.method, r.path, r.headers.get("Authorization")) for r in api.requests]
    assert sent == [("DELETE", "/api/v1/pods/pod-abc", f"Bearer {TOKEN}")] * 2
    assert TOKEN not in "\n".join(lines)


def test_prime_intellect_refusal_is_reported_without_the_token():
    with prime_api(401) as api:
        env = {
            "PRIME_POD_ID": "pod-abc",
            "PRIME_API_KEY": TOKEN,
            "PRIME_API_URL": api.url,
            "ON_BUDGET": "destroy",
        }
        lines: list[str] = []
        assert (
            release(policy_from_env(env, sync_to="r:b"), exit_codes.BUDGET_STOPPED, env, lines.append)
            == "keep"
        )
    text = "\n".join(lines)
    assert "HTTP 401" in text and "Instances read+write" in text and TOKEN not in text


def test_a_plain_host_is_shut_down_only_when_asked(tmp_path):
    with pytest.raises(TRMError, match="RELEASE_VIA=host"):
        policy_from_env({"ON_END": "stop"}, sync_to="")
    record = tmp_path / "shutdown.calls"
    fake = tmp_path / "bin" / "shutdown"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$*" >> {record}\n')
    fake.chmod(0o755)
    env = {"ON_END": "stop", "RELEASE_VIA": "host", "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"}
    assert release(policy_from_env(env, sync_to=""), exit_codes.OK, env, print) == "stop"
    assert record.read_text().strip() == "-h now"


def _all_text(*roots: Path) -> str:
    parts = []
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                parts.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(parts)


def test_a_budget_stop_hands_off_then_releases_and_no_file_holds_a_token(tmp_path, monkeypatch, capsys):
    """A launch whose training ends 79 (MAX_HOURS) with ON_BUDGET=stop on a Vast.ai instance: the launcher
    itself writes the bundle, then stops the instance; `--handoff` by hand rebuilds the bundle and releases
    nothing; every file of the run directory and of the bundle is free of both secrets."""
    from trm.launch.launcher.runner import Launch
    from trm.launch.supervision.supervisor import Console

    ws = tmp_path / "ws"
    environ = {
        **{
            k: v
            for k, v in os.environ.items()
            if k not in ("TASK", "RUN_NAME", "SYNC_TO", "ON_END", "ON_BUDGET", "MAX_HOURS")
        },
        **vast_env(tmp_path, ON_BUDGET="stop"),
        "TASK": "debug-tiny", "NUM_GPUS": "0", "WORKSPACE": str(ws), "PYTHON": sys.executable,
        "SMOKE_STEPS": "0", "PREFLIGHT": "0",
        "PRIME_API_KEY": TOKEN,  # set in the environment: must not leak either
        "TRM_LAUNCHER": "scripts/train_prod.sh",
        "PYTHONPATH": str(ROOT),
    }  # fmt: skip
    settings = LaunchSettings.from_env(environ)
    plan = build_plan(settings, [], environ)
    plan.dataset_dir.mkdir(parents=True)
    plan.verify_command = lambda: [sys.executable, "-c", "print('verified')"]  # type: ignore[method-assign]
    out = io.StringIO()
    launch = Launch(plan, environ, Console(settings.launch_dir / "launch.log", out))

    def budget_spent(step: object) -> None:
        launch.exit_code = exit_codes.BUDGET_STOPPED

    launch.actions = dataclasses.replace(launch.actions, train=budget_spent)
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        assert launch.run() == exit_codes.BUDGET_STOPPED, out.getvalue()
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    log = (settings.launch_dir / "launch.log").read_text()
    assert log.index("handoff bundle:") < log.index(
        "release: vastai stop instance 4242 (API key from the environment)"
    ), log
    assert (tmp_path / "vastai.calls").read_text().splitlines() == [f"stop instance 4242 key={VAST_KEY}"]
    bundle = settings.artifacts_run_dir
    (bundle / "handoff.json").unlink()
    monkeypatch.chdir(ROOT)
    # by hand: the bundle again, no second release (`python -m trm launch --handoff`, in this process)
    proc = trm_in_process(monkeypatch, capsys, ["launch", "--handoff"], environ)
    assert proc.returncode == 0, proc.stderr
    assert (bundle / "handoff.json").is_file() and (bundle / "run.info").is_file()
    assert len((tmp_path / "vastai.calls").read_text().splitlines()) == 1
    text = _all_text(settings.run_dir, bundle) + out.getvalue() + proc.stdout + proc.stderr
    assert VAST_KEY not in text and TOKEN not in text


def test_settings_carry_the_policy_and_the_resume_command_no_secret():
    env = {"ON_END": "stop", "ON_BUDGET": "destroy", "CONTAINER_ID": "9", "CONTAINER_API_KEY": VAST_KEY,
           "SYNC_TO": "store:bucket/runs", "PRIME_API_KEY": TOKEN, "TASK": "debug-tiny", "NUM_GPUS": "0"}  # fmt: skip
    s = LaunchSettings.from_env(env)
    assert s.release == ReleasePolicy(on_end="stop", on_budget="destroy", via="auto")
    assert s.sync_remote == "store:bucket/runs/trm-debug-tiny"
    plan = build_plan(s, [], env)
    assert "exit 0 -> stop, exit 79 (MAX_HOURS) -> destroy" in plan.render(env)
    resume = plan.resume_command(env)
    assert "ON_END=stop" in resume and "SYNC_TO=store:bucket/runs" in resume
    assert VAST_KEY not in resume and TOKEN not in resume


def run_stubbed_launch(
    tmp_path: Path, extra: dict[str, str], trained: Callable[[LaunchSettings], object]
) -> tuple[LaunchSettings, int]:
    """A whole debug-tiny CPU launch (no preflight, no smoke) under this environment plus `extra`, with the
    trainer replaced by `trained(settings)`; its settings and exit code."""
    from trm.launch.launcher.runner import Launch
    from trm.launch.supervision.supervisor import Console

    environ = {
        **{k: v for k, v in os.environ.items() if k not in ("TASK", "RUN_NAME", "MAX_HOURS", "ON_END")},
        "TASK": "debug-tiny", "NUM_GPUS": "0", "WORKSPACE": str(tmp_path / "ws"), "PYTHON": sys.executable,
        "SMOKE_STEPS": "0", "PREFLIGHT": "0", **extra,
    }  # fmt: skip
    settings = LaunchSettings.from_env(environ)
    plan = build_plan(settings, [], environ)
    plan.dataset_dir.mkdir(parents=True)
    plan.verify_command = lambda: [sys.executable, "-c", "print('verified')"]  # type: ignore[method-assign]
    launch = Launch(plan, environ, Console(settings.launch_dir / "launch.log", io.StringIO()))
    launch.torchrun = lambda *args, **kwargs: trained(settings)  # type: ignore[method-assign,assignment]
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        return settings, launch.run()
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


@needs_rclone
def test_the_launcher_releases_only_after_handoff_and_final_sync(tmp_path, monkeypatch):
    """A whole launch (trainer stubbed) with SYNC_TO and ON_END=destroy on a Vast.ai instance: the at-exit
    order is handoff -> final sync -> release, the remote holds the run and the bundle, no file holds a secret."""
    from trm.launch.supervision.supervisor import AttemptResult

    monkeypatch.setenv("RCLONE_CONFIG_STORE_TYPE", "local")
    bucket = tmp_path / "bucket"
    environ = {
        **vast_env(tmp_path, ON_END="destroy", SYNC_TO=f"store:{bucket}", SYNC_EVERY_MINUTES="60"),
        "PRIME_API_KEY": TOKEN,
    }

    def trained(settings: LaunchSettings) -> AttemptResult:
        (settings.run_dir / "step_5").mkdir()
        (settings.run_dir / "step_5" / "model.pt").write_bytes(b"weights")
        (settings.run_dir / "step_5" / "COMPLETE").write_text("5\n")
        (settings.run_dir / ".step_6.partial").mkdir()
        return AttemptResult(0)

    settings, code = run_stubbed_launch(tmp_path, environ, trained)
    assert code == 0
    # the session's end names its node: the other nodes of a multi-node run stop waiting on node 0's end
    (end,) = [e for e in read_events(settings.launch_dir / "events.jsonl") if e["event"] == "session_end"]
    assert end["exit_code"] == 0 and end["node_rank"] == 0
    log = (settings.launch_dir / "launch.log").read_text()
    order = [log.index(s) for s in ("handoff bundle:", "final sync to store:", "release: vastai destroy")]
    assert order == sorted(order), log
    assert (tmp_path / "vastai.calls").read_text().splitlines() == [
        f"destroy instance 4242 --yes key={VAST_KEY}"
    ]
    remote = bucket / "trm-debug-tiny"
    assert (remote / "step_5" / "COMPLETE").is_file() and not (remote / ".step_6.partial").exists()
    assert (remote / "handoff" / "handoff.json").is_file() and (remote / "launch" / "launch.log").is_file()
    text = _all_text(settings.run_dir, settings.artifacts_run_dir, bucket)
    assert VAST_KEY not in text and TOKEN not in text
    bundle = json.loads((settings.artifacts_run_dir / "handoff.json").read_text())
    run_dir = settings.run_dir
    assert bundle["restore_command"] == f"python -m trm sync --from store:{bucket}/trm-debug-tiny {run_dir}"
    assert (
        "restore from:   python -m trm sync --from" in (settings.artifacts_run_dir / "run.info").read_text()
    )


@needs_rclone
def test_another_runs_bundle_written_during_the_run_is_neither_replaced_nor_uploaded(tmp_path, monkeypatch):
    """Another run of this RUN_NAME (another CHECKPOINT_DIR, the same ARTIFACTS_DIR) hands off while this one
    trains: the handoff at exit refuses to replace that bundle, and the final sync does not upload it as
    this run's."""
    from trm.launch.supervision.supervisor import AttemptResult

    monkeypatch.setenv("RCLONE_CONFIG_STORE_TYPE", "local")
    bucket = tmp_path / "bucket"
    theirs = json.dumps({"run_dir": str(tmp_path / "other" / "trm-debug-tiny"), "status": "finished"})

    def trained(settings: LaunchSettings) -> AttemptResult:
        (settings.run_dir / "step_5").mkdir()
        (settings.run_dir / "step_5" / "COMPLETE").write_text("5\n")
        settings.artifacts_run_dir.mkdir(parents=True)
        (settings.artifacts_run_dir / "handoff.json").write_text(theirs)
        return AttemptResult(0)

    environ = {"SYNC_TO": f"store:{bucket}", "SYNC_EVERY_MINUTES": "60"}
    settings, code = run_stubbed_launch(tmp_path, environ, trained)
    assert code == 0
    log = (settings.launch_dir / "launch.log").read_text()
    assert "it holds the bundle of another run" in log and f"python -m trm handoff {settings.run_dir}" in log
    assert (settings.artifacts_run_dir / "handoff.json").read_text() == theirs
    remote = bucket / "trm-debug-tiny"
    assert (remote / "step_5" / "COMPLETE").is_file() and not (remote / "handoff").exists()


def test_a_release_that_could_not_work_stops_the_launch_before_training(tmp_path):
    from trm.launch.provider.release import readiness_problem

    env = {"CONTAINER_ID": "4242", "CONTAINER_API_KEY": VAST_KEY, "ON_BUDGET": "stop", "PATH": str(tmp_path)}
    problem = readiness_problem(policy_from_env(env, sync_to=""), env)
    assert problem is not None and f"pip install --quiet {VASTAI_CLI}" in problem
    ready = vast_env(tmp_path, ON_BUDGET="stop")
    assert readiness_problem(policy_from_env(ready, sync_to=""), ready) is None
    host = {"ON_END": "stop", "RELEASE_VIA": "host", "PATH": str(tmp_path)}
    assert "not on PATH" in (readiness_problem(policy_from_env(host, sync_to=""), host) or "")
    from trm.launch.launcher.runner import Launch
    from trm.launch.supervision.supervisor import Console

    launch_env = {**env, "TASK": "debug-tiny", "NUM_GPUS": "0", "WORKSPACE": str(tmp_path / "ws")}
    settings = LaunchSettings.from_env(launch_env)
    launch = Launch(build_plan(settings, [], launch_env), launch_env, Console(None, io.StringIO()))
    launch.actions = dataclasses.replace(
        launch.actions, data=lambda step: pytest.fail("trained although the release could not work")
    )
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        assert launch.run() == exit_codes.CONFIG_ERROR
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def test_the_runbooks_install_the_pinned_vastai_cli_outside_the_training_venv():
    from trm.launch.provider.release import VASTAI_INSTALL

    text = (Path(__file__).resolve().parents[3] / "runbooks" / "v1" / "03-production-run.md").read_text()
    assert f"pip install --quiet {VASTAI_CLI}" in text and "/opt/vastai-cli" in text
    assert "pip install --quiet vastai\n" not in text  # unpinned, into the image's venv: the old way
    assert VASTAI_INSTALL.startswith("python -m venv /opt/vastai-cli ")
    # every runbook that installs the CLI (the workstation in 01, the instance in 03) pins the same version
    for runbook in sorted((Path(__file__).resolve().parents[3] / "runbooks" / "v1").glob("*.md")):
        for line in runbook.read_text().splitlines():
            if "pip install" in line and "vastai" in line:
                assert VASTAI_CLI in line, f"{runbook.name}: {line}"


def test_the_resume_command_never_names_this_pod_and_a_release_without_a_pod_id_stops_the_launch():
    """The resume command may run on a new pod (Prime Intellect pods cannot be stopped): carrying the old
    PRIME_POD_ID would terminate the old pod at the new one's end and leave the new one billing. Without
    it, a launch that would have to release says so at its start, before any training."""
    from trm.launch.provider.release import readiness_problem

    env = {"ON_END": "destroy", "RELEASE_VIA": "primeintellect", "PRIME_POD_ID": "pod-old",
           "PRIME_API_KEY": TOKEN, "SYNC_TO": "store:bucket", "TASK": "debug-tiny", "NUM_GPUS": "0"}  # fmt: skip
    plan = build_plan(LaunchSettings.from_env(env), [], env)
    resume = plan.resume_command(env)
    assert "pod-old" not in resume and "ON_END=destroy" in resume and "RELEASE_VIA=primeintellect" in resume
    assert TOKEN not in resume
    on_new_pod = {k: v for k, v in env.items() if k != "PRIME_POD_ID"}
    problem = readiness_problem(policy_from_env(on_new_pod, sync_to="store:bucket"), on_new_pod)
    assert problem is not None and "PRIME_POD_ID" in problem
    auto = {k: v for k, v in on_new_pod.items() if k != "RELEASE_VIA"}
    with pytest.raises(TRMError, match="PRIME_POD_ID"):
        policy_from_env(auto, sync_to="store:bucket")
    assert readiness_problem(policy_from_env(env, sync_to="store:bucket"), env) is None


def test_a_release_that_may_pass_on_retry_is_tried_again_and_a_refusal_is_not(tmp_path):
    """A Vast.ai CLI that fails once (the API was unreachable) and a Prime Intellect API that answers 503
    once: each is tried again after the first wait and the machine is released; a 401 is final at once."""
    env = vast_env(tmp_path, ON_END="destroy")
    calls, marker = tmp_path / "vastai.calls", tmp_path / "failed-once"
    (tmp_path / "bin" / "vastai").write_text(
        f'#!/bin/sh\necho "$* key=$VAST_API_KEY" >> {calls}\n'
        f'if [ ! -e {marker} ]; then touch {marker}; echo "connection reset" >&2; exit 1; fi\n'
        'echo "destroying instance $3."\n'
    )
    waits: list[float] = []
    lines: list[str] = []
    policy = policy_from_env(env, sync_to="r:b")
    assert release(policy, exit_codes.OK, env, lines.append, sleep=waits.append) == "destroy", lines
    assert calls.read_text().splitlines() == [f"destroy instance 4242 --yes key={VAST_KEY}"] * 2
    assert waits == [15.0] and "trying again in 15 s" in "\n".join(lines)
    assert VAST_KEY not in "\n".join(lines)
    for statuses, result, tries in (((503, 200), "destroy", 2), ((401,), "keep", 1), ((502,), "keep", 3)):
        with prime_api(*statuses) as api:
            prime = {"PRIME_POD_ID": "pod-abc", "PRIME_API_KEY": TOKEN, "PRIME_API_URL": api.url,
                     "ON_END": "destroy"}  # fmt: skip
            waits.clear()
            lines.clear()
            got = release(policy_from_env(prime, sync_to="r:b"), exit_codes.OK, prime, lines.append,
                          sleep=waits.append)  # fmt: skip
        assert (got, len(api.requests)) == (result, tries), lines
        assert waits == [15.0, 60.0][: tries - 1] and TOKEN not in "\n".join(lines)
    assert "release FAILED" in lines[-1] and "HTTP 502" in lines[-1]
