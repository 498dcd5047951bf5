from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

import pytest

from tools.cli import task_parsers
from tools.shell.refs import RefChecker, check_argv, env_assignments, simple_commands, strip_prefix
from trm.commands import build_parser


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tool")
    parser.add_argument("--verbose", action="store_true")
    sub = parser.add_subparsers(dest="cmd")
    data = sub.add_parser("data")
    data_sub = data.add_subparsers(dest="data_cmd")
    build = data_sub.add_parser("build")
    build.add_argument("--output-dir")
    build.add_argument("--subsets", nargs="+")
    build.add_argument("--dry-run", action="store_true")
    verify = data_sub.add_parser("verify")
    verify.add_argument("directory")
    return parser


def test_simple_commands_split_operators_continuations_and_heredocs():
    code = textwrap.dedent(
        """\
        FOO=1 make smoke && echo ok | tee log  # comment
        python -m trm data build \\
          --output-dir "$DIR" --subsets a b
        cat > f <<'EOF'
        make not-a-command
        EOF
        (cd x; bash scripts/run.sh --help) 2>&1 > out
        """
    )
    commands = list(simple_commands(code))
    assert ["FOO=1", "make", "smoke"] in commands
    assert ["echo", "ok"] in commands and ["tee", "log"] in commands
    assert ["python", "-m", "trm", "data", "build", "--output-dir", "$DIR", "--subsets", "a", "b"] in commands
    assert ["make", "not-a-command"] not in commands  # here-document body is data, not a command
    assert ["bash", "scripts/run.sh", "--help"] in commands
    assert ["cat"] in commands  # the redirect target `f` is dropped
    assert list(simple_commands("python -m trm version 2>/dev/null")) == [["python", "-m", "trm", "version"]]


def test_strip_prefix_and_assignments():
    words = ["sudo", "A=1", "timeout", "-s", "TERM", "30", "python", "-m", "trm"]
    assert strip_prefix(words) == ["python", "-m", "trm"]
    assert env_assignments(["NGPU=4", "RUN_NAME=x", "bash", "s.sh"]) == ["NGPU", "RUN_NAME"]


def test_check_argv_accepts_existing_and_reports_unknown():
    parser = _parser()
    assert (
        check_argv(parser, ["data", "build", "--output-dir", "x", "--subsets", "a", "b", "--dry-run"]) == []
    )
    assert check_argv(parser, ["--verbose", "data", "verify", "some/dir"]) == []
    assert check_argv(parser, ["data", "build", "--output-dir=x"]) == []
    problems = check_argv(parser, ["data", "build", "--out-dir", "x"])
    assert len(problems) == 1 and "--out-dir" in problems[0]
    problems = check_argv(parser, ["data", "rebuild"])
    assert "no subcommand 'rebuild'" in problems[0] and "build" in problems[0]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "Makefile").write_text("smoke-local: ## x\n\t@true\nimage push: ## y\n\t@true\n")
    (tmp_path / "noxfile.py").write_text("import nox\n\n@nox.session\ndef runbooks(session):\n    pass\n")
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "run.sh").write_text(
        '#!/usr/bin/env bash\nif [[ "${1:-}" == --help ]]; then\n'
        '  echo "usage: run.sh [--dry-run]"; echo "  NGPU  number of GPUs"; exit 0\nfi\n'
    )
    (tmp_path / "trm").mkdir()
    (tmp_path / "trm" / "train.py").write_text("")
    (tmp_path / "jobs" / "overlays" / "smoke").mkdir(parents=True)
    (tmp_path / "jobs" / "overlays" / "smoke" / "kustomization.yaml").write_text("resources: []\n")
    return tmp_path


def test_ref_checker_on_project_references(project: Path):
    refs = RefChecker(project, parser=_parser())
    ok = """
    make smoke-local
    make image push REGISTRY=localhost:5000
    nox -s runbooks
    NGPU=4 bash scripts/run.sh --dry-run
    torchrun --nproc-per-node 4 -m trm.train data_paths=[x]
    python -m trm data verify d
    kubectl apply -k jobs/overlays/smoke
    git status
    """
    assert refs.check_code(ok) == []
    bad = {
        "make smoke-gpu": "make target 'smoke-gpu'",
        "nox -s docs": "nox session 'docs'",
        "bash scripts/missing.sh": "scripts/missing.sh does not exist",
        "bash scripts/run.sh --probe": "no flag --probe",
        "MAX_HOURS=3 bash scripts/run.sh": "does not document the variable MAX_HOURS",
        "torchrun --nproc-per-node 4 pretrain.py arch=trm": "pretrain.py does not exist",
        "python -m trm.pretrain": "module trm.pretrain does not exist",
        "python3 -m trm data verfy d": "no subcommand 'verfy'",
        "kubectl apply -k jobs/overlays/prod": "jobs/overlays/prod does not exist",
    }
    for code, expected in bad.items():
        problems = refs.check_code(code)
        assert len(problems) == 1 and expected in problems[0], (code, problems)


def test_ref_checker_uses_the_real_cli():
    refs = RefChecker(Path(__file__).resolve().parents[3], build_parser())
    assert refs.check_code("python -m trm version --json") == []
    assert "no option --jsn" in refs.check_code("python -m trm version --jsn")[0]


def test_repository_tasks_are_checked_against_their_own_parsers():
    refs = RefChecker(Path(__file__).resolve().parents[3], build_parser(), task_parsers())
    assert refs.check_code("python -m tools.jobs render --experiments exp03 jobs/overlays/prod-4xh100") == []
    assert refs.check_code("python -m tools.images ref sm90 --driver 550.127.05") == []
    assert "no option --experimentz" in refs.check_code("python -m tools.jobs render --experimentz exp03")[0]
    assert "runbooks stampp" in refs.check_code("python -m tools.runbooks stampp -m x")[0]
    assert "does not exist" in refs.check_code("python -m tools.nope check")[0]
    # a moved command is not a `python -m trm` command any more
    assert refs.check_code("python -m trm jobs check") != []


def test_trainer_overrides_are_composed_with_the_real_config():
    refs = RefChecker(Path(__file__).resolve().parents[3], build_parser())
    ok = "torchrun --nproc-per-node 4 -m trm.train arch=trm +run_name=x ema=True arch.L_cycles=4 data_paths=[$D]"
    assert refs.check_code(ok) == []
    problems = refs.check_code("python -m trm.train arch=trm arch.L_cycle=4")
    assert len(problems) == 1 and "unknown config key 'arch.L_cycle'" in problems[0]
    problems = refs.check_code("python -m trm.train epochs=10 eval_interval=3")
    assert len(problems) == 1 and "must divide epochs" in problems[0]


def test_a_deliberate_error_can_be_marked():
    refs = RefChecker(Path(__file__).resolve().parents[3], build_parser())
    assert refs.check_code("python -m trm.train arch.L_cycle=4 --cfg  # refcheck: deliberate error") == []
    assert refs.check_code("python -m trm.train arch.L_cycle=4 --cfg  # a comment") != []


def test_commands_run_inside_containers_are_checked():
    refs = RefChecker(Path(__file__).resolve().parents[3], build_parser())
    ok = 'docker run -d --name r --gpus all -e RUN_NAME=x -v /a:/workspace/data "$IMAGE" python -m trm launch'
    assert refs.check_code(ok) == []
    assert refs.check_code("docker exec -it trm python -m trm preflight --gpu") == []
    assert "no option --gpus" in refs.check_code("docker exec -it trm python -m trm preflight --gpus")[0]
    assert "no subcommand 'lunch'" in refs.check_code('docker run --rm "$IMAGE" python -m trm lunch')[0]
    assert "no option --jsn" in refs.check_code("kubectl exec job/x -- python -m trm version --jsn")[0]
