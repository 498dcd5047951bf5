"""Journey checks of the runbooks (tools/runbooks/journey.py) and the measured-figures table (tools/runbooks/measured.py):
each test is one of the mistakes issue 21 found in the runbooks, which the old checks let through."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tools.runbooks import journey, measured
from tools.runbooks.runbook import Runbook, parse_blocks
from trm.errors import TRMError

ROOT = Path(__file__).resolve().parents[3]


def book(body: str) -> Runbook:
    body = textwrap.dedent(body)
    return Runbook(Path("rb.md"), {"runbook": "rb", "version": 1}, body, 1, parse_blocks(body, Path("rb.md")))


def test_a_variable_set_only_inline_is_undefined_in_the_next_block():
    # runbook 02 v4: `RUN_NAME=smoke-… python -m trm launch`, then `RUN_DIR=/data/trm/checkpoints/$RUN_NAME`
    problems = journey.variable_problems(
        book("""
        ```bash gpu env=image
        RUN_NAME=smoke-1 TASK=arc2-smoke python -m trm launch
        ```

        ```bash gpu env=image
        ls "/workspace/checkpoints/$RUN_NAME"
        ```
    """)
    )
    assert len(problems) == 1 and "$RUN_NAME is used but not set" in problems[0] and "rb.md:6" in problems[0]


def test_variables_set_by_assignment_export_read_and_for_are_defined():
    problems = journey.variable_problems(
        book("""
        ```bash cpu
        export WORKSPACE="${WORKSPACE:-$HOME/x}"
        A=1 B=2
        read -rsp "key: " KEY && echo
        for shape in a b; do echo "$shape $A $B $KEY $WORKSPACE"; done
        while IFS= read -r line; do echo "$line"; done < /dev/null
        echo "${UNSET_WITH_DEFAULT:-fine}" '$NOT_EXPANDED' "$?" "$!"
        ```
    """)
    )
    assert problems == []


def test_definitions_do_not_cross_environments():
    # an IMAGE set on the operator's laptop is not set on the GPU host
    problems = journey.variable_problems(
        book("""
        ```bash cloud
        IMAGE=$(python -m tools.images ref sm90)
        ```

        ```bash gpu env=docker-host
        docker pull "$IMAGE"
        ```
    """)
    )
    assert len(problems) == 1 and "$IMAGE" in problems[0] and "env=docker-host" in problems[0]


def test_declared_host_variables_are_allowed():
    assert (
        journey.variable_problems(
            book("""
        <!-- env-provides image: RUN_NAME -->

        ```bash gpu env=image
        echo "$RUN_NAME $TRM_IMAGE_VARIANT"
        ```
    """)
        )
        == []
    )


@pytest.mark.parametrize(
    ("env", "code", "expected"),
    [
        ("image", 'docker logs -f "x"', "`docker` is not available in env=image"),
        ("image", "bash scripts/train_prod.sh", "scripts/train_prod.sh does not exist in env=image"),
        (
            "image",
            "tail -f /data/trm/checkpoints/x/launch/train.log",
            "/data/trm does not exist in env=image",
        ),
        ("vast-venv", "docker exec trm df -h /dev/shm", "`docker` is not available in env=vast-venv"),
        ("docker-host", "bash scripts/train_prod.sh --dry-run", "does not exist in env=docker-host"),
        ("image", "python -m tools.images ref sm90", "is repository tooling (tools/, not in the image"),
        ("docker-host", "python3 -m tools.jobs check", "env=docker-host has no checkout"),
    ],
)
def test_commands_missing_from_the_blocks_environment(env, code, expected):
    (block,) = parse_blocks(f"```bash gpu env={env}\n{code}\n```\n", Path("rb.md"))
    problems = journey.environment_problems(block)
    assert len(problems) == 1 and expected in problems[0]


def test_repository_tooling_runs_where_there_is_a_checkout():
    for env in ("laptop", "vast-venv"):
        (block,) = parse_blocks(
            f"```bash gpu env={env}\npython -m tools.images ref sm90\n```\n", Path("rb.md")
        )
        assert journey.environment_problems(block) == []
    (block,) = parse_blocks("```bash gpu env=image\npython -m trm version\n```\n", Path("rb.md"))
    assert journey.environment_problems(block) == []


def test_gpu_blocks_must_say_where_they_run():
    (block,) = parse_blocks("```bash gpu\nnvidia-smi\n```\n", Path("rb.md"))
    assert "without an environment" in journey.environment_problems(block)[0]
    (block,) = parse_blocks("```bash gpu env=moon\nnvidia-smi\n```\n", Path("rb.md"))
    assert "unknown environment env=moon" in journey.environment_problems(block)[0]
    (block,) = parse_blocks("```bash gpu env=docker-host\ndocker ps\n```\n", Path("rb.md"))
    assert journey.environment_problems(block) == []


def test_prose_durations_must_come_from_the_table():
    problems = journey.prose_figure_problems(
        book("""
        Builds the dataset (allow 15 minutes on the first run), the rehearsal takes ~2 minutes.
        Measured: <!-- measured:dataset_build_full -->3 s<!-- /measured -->.

        ```bash cpu
        sleep 1   # takes 1 s, code is not prose
        ```
    """)
    )
    assert len(problems) == 2
    assert "'allow 15 minutes'" in problems[0] and "rb.md:2" in problems[0]
    assert "'~2 minutes'" in problems[1]


def _measured_repo(tmp_path: Path, doc: str) -> Path:
    (tmp_path / "runbooks" / "v1").mkdir(parents=True)
    (tmp_path / "runbooks" / "measured.toml").write_text(
        '[build]\nvalue = "3 s"\nhow = "python -m trm data build-arc, wall"\ndate = 2026-11-23\n'
    )
    (tmp_path / "runbooks" / "v1" / "01-x.md").write_text(doc)
    return tmp_path


def test_measured_markers_are_rendered_and_stale_ones_reported(tmp_path):
    repo = _measured_repo(tmp_path, "Build: <!-- measured:build -->15 minutes<!-- /measured -->.\n")
    problems = measured.stale(repo)
    assert len(problems) == 1 and "says '15 minutes'" in problems[0] and "'3 s'" in problems[0]
    assert measured.write(repo) == [repo / "runbooks" / "v1" / "01-x.md"]
    assert (
        repo / "runbooks" / "v1" / "01-x.md"
    ).read_text() == "Build: <!-- measured:build -->3 s<!-- /measured -->.\n"
    assert measured.stale(repo) == [] and measured.write(repo) == []


def test_measured_unknown_key_and_incomplete_entry(tmp_path):
    repo = _measured_repo(tmp_path, "<!-- measured:nope --><!-- /measured -->\n")
    assert "measured:nope is not in runbooks/measured.toml" in measured.stale(repo)[0]
    (repo / "runbooks" / "measured.toml").write_text('[build]\nvalue = "3 s"\n')
    with pytest.raises(TRMError, match=r"\[build\] needs string `value`, `how`"):
        measured.stale(repo)


def test_repository_figures_are_current():
    assert measured.stale(ROOT) == []


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        # runbook 03 v5: the production container stopped with Docker's 10 s, mid-save (or mid-evaluation)
        ('docker run -d --name r --gpus all "$IMAGE" python -m trm launch', "needs `--stop-timeout 360`"),
        ('docker run -d --stop-timeout 300 "$IMAGE" python -m trm launch', "it has 300"),
        ('docker run -d -e SHUTDOWN_TIMEOUT=600 --stop-timeout 360 "$IMAGE" python -m trm launch', "660"),
        ('docker run --rm "$IMAGE" python -m trm.train data_paths=[d]', "--stop-timeout"),
        ("docker run --rm img bash scripts/train_prod.sh", "--stop-timeout"),
        # runbook 05 v3
        ('docker stop -t 300 "$RUN_NAME"', "`docker stop -t 300` is shorter"),
        # fine: long enough, not training, or no -t (the container's --stop-timeout applies)
        ('docker run -d --stop-timeout 360 "$IMAGE" python -m trm launch', None),
        ('docker run -d --stop-timeout=400 -e SHUTDOWN_TIMEOUT=300 "$IMAGE" python -m trm launch', None),
        ('docker run --rm "$IMAGE" python -m trm launch --dry-run', None),
        ('docker run --rm "$IMAGE" python -m trm handoff /c/run --out /a/run', None),
        ('docker stop "$RUN_NAME"', None),
        ('docker stop -t 360 "$RUN_NAME"', None),
    ],
)
def test_a_trainers_docker_run_needs_a_stop_timeout_covering_the_save(code, expected):
    problems = journey.stop_timeout_problems(code, "rb.md:1")
    if expected is None:
        assert problems == []
    else:
        assert len(problems) == 1 and expected in problems[0], problems


def test_the_stop_timeout_check_runs_on_every_gpu_block():
    problems = journey.journey_problems(
        book("""
        ```bash gpu env=docker-host
        docker run -d --name r --gpus all img python -m trm launch
        ```
        """)
    )
    assert any("--stop-timeout" in p for p in problems)


@pytest.mark.parametrize(
    ("code", "flagged"),
    [
        # runbook 03 v5: "edit the overlay's job-patch.yaml and re-apply": the Job's template is immutable
        ("kubectl apply -k jobs/overlays/prod-4xh100", True),
        (
            "kubectl delete job trm-train-smoke\nkubectl apply -k jobs/overlays/smoke",
            True,
        ),  # pods still saving
        (
            "kubectl apply -k jobs/overlays/smoke\nkubectl delete job a --cascade=foreground --ignore-not-found",
            True,
        ),
        (
            "kubectl delete job a --cascade=foreground --ignore-not-found\nkubectl apply -k jobs/overlays/smoke",
            False,
        ),
        (
            "kubectl delete job a --cascade foreground --ignore-not-found && kubectl apply -k jobs/overlays/x",
            False,
        ),
        ("kubectl apply -k jobs/storage/rwo", False),  # a PVC, not a Job
        ("kubectl apply --dry-run=client -k jobs/overlays/smoke", False),
    ],
)
def test_applying_a_job_overlay_needs_the_job_deleted_first(code, flagged):
    problems = journey.job_apply_problems(code, "rb.md:1")
    assert bool(problems) is flagged, problems
    if flagged:
        assert "immutable" in problems[0]


_LAUNCH = "img python -m trm launch"
_BUDGET = "-e MAX_HOURS=80 -e GPU_HOURLY_USD=2.5"
_TB = "-p 127.0.0.1:6006:6006"


@pytest.mark.parametrize(
    ("code", "flagged"),
    [
        # runbook 03 v8's W&B variant: detached, no restart policy, no MAX_HOURS / GPU_HOURLY_USD
        (f"docker run -d --name r --stop-timeout 360 -e WANDB=online {_TB} {_LAUNCH}", "missing: MAX_HOURS"),
        (f"docker run -d --name r --stop-timeout 360 {_BUDGET} {_TB} {_LAUNCH}", "--restart on-failure"),
        (f"docker run -d --restart on-failure -e MAX_HOURS=80 {_TB} {_LAUNCH}", "GPU_HOURLY_USD"),
        # runbook 03 v-old's Prime §3 and runbook 05's restart: detached launches without the TensorBoard port
        (f"docker run -d --restart on-failure {_BUDGET} {_LAUNCH}", "TensorBoard"),
        (f"docker run -d --restart on-failure {_BUDGET} -p 127.0.0.1:8888:8888 {_LAUNCH}", "TensorBoard"),
        (f"docker run -d --restart on-failure {_BUDGET} -e TENSORBOARD=0 {_LAUNCH}", None),
        (f"docker run -d --restart on-failure {_BUDGET} -p 6006:6006 {_LAUNCH}", "every interface"),
        (f"docker run -d --restart on-failure {_BUDGET} -p 127.0.0.1:6006:6006 {_LAUNCH}", None),
        (f"docker run --rm {_LAUNCH} --dry-run", None),  # not detached, not training
    ],
)
def test_docker_runs_stay_on_loopback_and_detached_launches_keep_the_budget(code, flagged):
    problems = journey.docker_run_problems(code, "rb.md:1")
    if flagged is None:
        assert problems == []
    else:
        assert len(problems) == 1 and flagged in problems[0], problems


def test_two_sections_with_one_number_are_flagged(tmp_path):
    path = tmp_path / "rb.md"
    path.write_text("## 2a. Docker\n\n## 2b. Vast\n\n## 2b. 8xH200\n\n## 3. Release\n")
    problems = journey.section_number_problems(Runbook(path, {}, path.read_text(), 1, []))
    assert problems == [f"{path}: section number 2b is used by more than one `##` heading"]


@pytest.mark.parametrize(
    ("code", "flagged"),
    [
        # runbook 06 v-old's handoff by hand on Kubernetes
        (
            'kubectl cp "$(kubectl get pods -l job-name=trm-train-prod-4xh100 -o name | head -n 1 | cut -d/ -f2)"'
            ":/workspace/artifacts ./artifacts",
            True,
        ),
        ("kubectl cp ./notes.txt debug-pod:/tmp/notes.txt", False),
        ("python -m tools.jobs copy-out jobs/overlays/prod-4xh100", False),
    ],
)
def test_kubectl_cp_from_a_jobs_pod_is_flagged(code, flagged):
    problems = journey.job_copy_problems(code, "rb.md:1")
    assert bool(problems) is flagged, problems
    if flagged:
        assert "copy-out" in problems[0]


@pytest.mark.parametrize(
    ("code", "flagged"),
    [
        # runbook 07 v5: evaluation2's tasks all have trained rows in an arc2 model
        (
            "python -m trm.eval ck/step_N --adapt-challenges /w/arc-agi_evaluation2_challenges.json --adapt-steps 9",
            True,
        ),
        ("python3 -m trm.eval ck/step_N --adapt-challenges=t.json --adapt-steps 9", True),
        ("python -m trm.eval ck/step_N --adapt-challenges t.json --adapt-unseen-only --adapt-steps 9", False),
        ("python -m trm.eval ck/step_N", False),  # the run's own test set: no adaptation
    ],
)
def test_a_measurement_after_adaptation_keeps_only_unseen_tasks(code: str, flagged: bool) -> None:
    problems = journey.journey_problems(book(f"```bash gpu env=image\n{code}\n```\n"))
    assert any("--adapt-unseen-only" in p for p in problems) == flagged, problems
