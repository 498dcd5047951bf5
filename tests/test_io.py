from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from trm import io as io_module
from trm.errors import TRMError
from trm.io import atomic_directory, atomic_write_json, atomic_write_text, sha256_file


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path):
    target = tmp_path / "sub" / "f.json"
    atomic_write_json(target, {"a": 1})
    atomic_write_json(target, {"a": 2})
    assert json.loads(target.read_text()) == {"a": 2}
    assert os.listdir(target.parent) == ["f.json"]


def test_atomic_write_failure_keeps_old_content(tmp_path):
    target = tmp_path / "f.txt"
    atomic_write_text(target, "old")
    with pytest.raises(TypeError):
        atomic_write_json(target, {"x": object()})
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["f.txt"]


def test_atomic_directory_publishes_on_success_only(tmp_path):
    target = tmp_path / "out"
    with pytest.raises(RuntimeError), atomic_directory(target, flag="--out") as tmp:
        (tmp / "a").write_text("x")
        raise RuntimeError("boom")
    assert not target.exists()
    assert os.listdir(tmp_path) == []
    with atomic_directory(target, flag="--out") as tmp:
        (tmp / "a").write_text("x")
    assert (target / "a").read_text() == "x"
    with (
        pytest.raises(TRMError, match=re.escape(f"--out {target}: already exists")),
        atomic_directory(target, flag="--out"),
    ):
        pass
    with atomic_directory(target, overwrite=True, flag="--out") as tmp:
        (tmp / "b").write_text("y")
    assert sorted(os.listdir(target)) == [".trm-created", "b"]
    assert os.listdir(tmp_path) == ["out"]


def test_a_folder_changed_while_staging_is_refused_by_the_callers_name_for_it(tmp_path):
    target = tmp_path / "out"
    with atomic_directory(target, flag="--out") as tmp:
        (tmp / "a").write_text("x")
    with pytest.raises(TRMError) as err, atomic_directory(target, overwrite=True, flag="--adapt-dir") as tmp:
        (tmp / "b").write_text("y")
        (target / "notes.txt").write_text("mine")  # someone else's file, while this staged
    assert str(err.value).startswith(f"--adapt-dir {target}: refusing to replace it")
    assert (target / "notes.txt").read_text() == "mine" and not (target / "b").exists()


def test_sha256_file(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"abc")
    assert sha256_file(p) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def killed_inside(opening: str, path) -> None:
    """A child process runs `with trm.io.<opening> as tmp:` (sys.argv[1]: `path`), writes `tmp/half` and is
    SIGKILLed there."""
    code = (
        "import os, signal, sys\n"
        "from trm import io\n"
        f"with io.{opening} as tmp:\n"
        "    (tmp / 'half').write_text('x')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(path)], check=False)
    assert proc.returncode == -signal.SIGKILL


def test_killed_writers_leftovers_are_removed_by_the_next_writer(tmp_path):
    target = tmp_path / "data"
    killed_inside("atomic_directory(sys.argv[1], flag='--out')", target)
    (leftover,) = tmp_path.iterdir()
    assert leftover.name.startswith(".data.") and leftover.name.endswith(".partial")
    live = tmp_path / f".data.{io_module._owner_tag()}.keep.partial"  # our own pid: still running
    other_host = tmp_path / ".data.otherhost-1.x.partial"  # another machine on a shared disk
    live.mkdir()
    other_host.mkdir()
    with atomic_directory(target, flag="--out") as tmp:
        (tmp / "a").write_text("x")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["data", live.name, other_host.name])


def test_a_killed_processs_scratch_folder_is_removed_by_the_next_one_of_its_name(tmp_path):
    killed_inside("scratch_directory('trm-x', sys.argv[1])", tmp_path)
    (leftover,) = tmp_path.iterdir()
    assert leftover.name.startswith(".trm-x.") and (leftover / "half").is_file()
    other = tmp_path / ".trm-y.otherhost-1.x.partial"  # another name, another host: not ours to clear
    other.mkdir()
    with io_module.scratch_directory("trm-x", tmp_path) as tmp:
        assert sorted(tmp_path.iterdir()) == sorted([tmp, other])
    assert list(tmp_path.iterdir()) == [other]  # and its own is gone once the block ends
