from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import trm
import trm.commands
from tests.helpers import trm_in_process


def test_version_command_prints_json(monkeypatch, capsys):
    # in this process: a `python -m trm` of its own imported torch again (2 s); the tests below start it
    proc = trm_in_process(monkeypatch, capsys, ["version", "--json"])
    assert proc.returncode == 0, proc.stderr
    versions = json.loads(proc.stdout)
    assert versions["trm"] == trm.__version__
    assert versions["torch"].startswith("2.13.0")


def test_unknown_command_fails_with_usage():
    proc = subprocess.run([sys.executable, "-m", "trm", "no-such-command"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "invalid choice" in proc.stderr


# Runs `python -m MODULE ARGS` as users run it (runpy, as -m does) and reports sys.modules at exit.
# (-X importtime cannot be used: it does not see imports made through importlib.import_module.)
MODULES_AT_EXIT = """
import json, runpy, sys
module, sys.argv = sys.argv[1], [sys.argv[0], *sys.argv[2:]]
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
except SystemExit:
    pass
sys.stdout.flush()
print("\\nMODULES " + json.dumps(sorted(sys.modules)))
"""


def imported_modules(module: str, *args: str) -> set[str]:
    """The modules imported by `python -m MODULE ARGS`."""
    proc = subprocess.run(
        [sys.executable, "-c", MODULES_AT_EXIT, module, *args], capture_output=True, text=True, check=True
    )
    return set(json.loads(proc.stdout.rsplit("\nMODULES ", 1)[1]))


def test_top_level_help_imports_no_command_and_no_heavy_library():
    modules = imported_modules("trm", "--help")
    assert "trm.commands" in modules  # the measurement sees our modules
    heavy = {"yaml", "docker", "torch", "numpy", "omegaconf", "trm.images", "tools"}
    assert modules & heavy == set()
    assert sorted(m for m in modules if m.startswith("trm.commands.")) == []


def test_a_command_imports_only_its_own_module():
    modules = imported_modules("trm", "version", "--help")
    assert sorted(m for m in modules if m.startswith("trm.commands.")) == ["trm.commands.version"]


def test_trainer_help_imports_no_torch():
    modules = imported_modules("trm.train", "--help")
    assert "trm.training.config" in modules
    assert modules & {"torch", "numpy", "omegaconf", "hydra", "yaml"} == set()


def test_every_command_module_is_listed_and_configures_its_parser():
    from trm.commands import COMMANDS, build_parser

    on_disk = {
        f"trm.commands.{p.stem}"
        for p in Path(trm.commands.__file__).parent.glob("*.py")
        if p.stem != "__init__"
    }
    assert {c.module for c in COMMANDS} == on_disk
    parser = build_parser()  # every command configured, as the runbook checker uses it
    args = parser.parse_args(["select-config", "--cpu", "--json"])
    assert args.func.__module__ == "trm.commands.select_config" and args.json


def test_bad_compile_value_names_its_source():
    proc = subprocess.run(
        [sys.executable, "-m", "trm", "select-config", "--cpu", "--compile", "maybe"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "--compile='maybe': use auto, true or false" in proc.stderr
