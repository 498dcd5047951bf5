"""Bad inputs give one clear error naming the file and the fix; the command line end to end."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from trm.errors import TRMError
from trm.report.build import report_batch, report_runs
from trm.report.collect import read_batch, read_run_dirs

from .runs import batch_entry, recipe_config, size_batch, write_batch, write_run


def test_missing_or_foreign_run_directory(tmp_path):
    with pytest.raises(
        TRMError, match=r"run directory .*nope does not exist; pass the trainer's checkpoint_path"
    ):
        read_run_dirs([tmp_path / "nope"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        TRMError, match=r"empty has neither run.json nor metrics.jsonl: it is not a run directory"
    ):
        read_run_dirs([tmp_path / "empty"])


def test_unreadable_run_files_are_named(tmp_path):
    run_dir = write_run(tmp_path / "r", recipe_config("debug-tiny"))
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    (run_dir / "metrics.jsonl").write_text("\n".join([lines[0], "garbage", *lines[1:]]) + "\n")
    with pytest.raises(TRMError, match=r"r/metrics.jsonl line 2 is not JSON; .*remove the line"):
        read_run_dirs([run_dir])
    (run_dir / "metrics.jsonl").write_text('{"wall_time": 1}\n')
    with pytest.raises(TRMError, match=r"metrics.jsonl line 1 has no integer `step`"):
        read_run_dirs([run_dir])
    (run_dir / "run.json").write_text("{not json")
    with pytest.raises(TRMError, match=r"r/run.json is not valid JSON .*written by the trainer"):
        read_run_dirs([run_dir])


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{oops", r"batch_results.json is not valid JSON"),
        ("[]", r"batch_results.json holds a JSON list, not an object"),
        (json.dumps({"schema_version": 2, "runs": []}), r"batch_results.json: schema_version is 2"),
        (json.dumps({"schema_version": 1}), r"`runs` is missing or not a list"),
        (
            json.dumps({"schema_version": 1, "runs": [batch_entry("a", None), {"status": "failed"}]}),
            r"batch_results.json: runs\[1\]: `name` is missing or not a string",
        ),
        (
            json.dumps({"schema_version": 1, "runs": [batch_entry("a", None), batch_entry("a", None)]}),
            r"run names appear twice: a",
        ),
    ],
)
def test_bad_batch_results_name_the_file_the_entry_and_the_fix(tmp_path, content, message):
    path = tmp_path / "batch_results.json"
    path.write_text(content)
    with pytest.raises(TRMError, match=message) as err:
        read_batch(path)
    assert str(path) in str(err.value)


def test_a_missing_batch_file_and_an_out_directory_that_is_not_a_report(tmp_path):
    with pytest.raises(TRMError, match=r"missing.json: no such file; a batch_results.json is written by"):
        read_batch(tmp_path / "missing.json")
    batch = size_batch(tmp_path)
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "precious.txt").write_text("x")
    with pytest.raises(TRMError, match=r"--out .*keep exists and is not a report directory"):
        report_batch(batch, tmp_path / "keep")
    assert (tmp_path / "keep" / "precious.txt").exists()
    with pytest.raises(TRMError, match="no runs to report"):
        report_batch(write_batch(tmp_path / "none.json", []), tmp_path / "out")
    with pytest.raises(TRMError, match="no runs to report"):
        report_runs([], tmp_path / "out")


def trm_report(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trm", "report", *args], capture_output=True, text=True)


def test_command_line(tmp_path, capsys):
    from trm.commands import main

    batch = size_batch(tmp_path)
    proc = trm_report("--batch", str(batch), "--out", str(tmp_path / "out"))  # the real entry point, once
    assert proc.returncode == 0, proc.stderr
    assert f"report: {tmp_path / 'out' / 'report.md'} (3 runs, 4 plots)" in proc.stdout
    # the refusals, in-process (the same code path after the entry point)
    assert main(["report", str(tmp_path / "h16"), "--batch", str(batch), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "error: pass run directories (RUN_DIR …) or --batch batch_results.json, one of the two" in err
    assert main(["report", str(tmp_path / "gone"), "--out", str(tmp_path / "out2")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"error: run directory {tmp_path / 'gone'} does not exist" in err
    assert not (tmp_path / "out2").exists()


def test_report_help_imports_neither_matplotlib_nor_torch():
    from tests.commands.test_cli import imported_modules

    modules = imported_modules("trm", "report", "--help")
    assert "trm.commands.report" in modules
    assert modules & {"matplotlib", "torch", "trm.report", "trm.report.build"} == set()
