from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys

import pytest

from tests.helpers import ended_pid
from trm import io as io_module
from trm import safe_remove
from trm.errors import TRMError
from trm.io import atomic_directory, atomic_write_bytes, atomic_write_json, atomic_write_text, sha256_file


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
    live = tmp_path / f".data.{safe_remove.owner_tag()}.keep.partial"  # our own pid: still running
    other_host = tmp_path / ".data.otherhost-1.x.partial"  # another machine on a shared disk
    live.mkdir()
    other_host.mkdir()
    with atomic_directory(target, flag="--out") as tmp:
        (tmp / "a").write_text("x")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["data", live.name, other_host.name])


def test_a_target_whose_name_holds_old_gets_no_dead_writers_temp_put_back(tmp_path):
    """Only `.<name>.old-<owner>` is a moved-aside target: a dead writer's staging folder or temp file of a
    target named `ckpt.old-best` is removed, never renamed into its place."""
    pid = ended_pid()
    host = safe_remove.host_tag()
    staging = tmp_path / f".ckpt.old-best.{host}-{pid}.x.partial"
    staging.mkdir()
    (staging / "half-written.bin").write_bytes(b"\0")
    torn = tmp_path / f".x.old-y.json.{host}-{pid}.x.tmp"
    torn.write_bytes(b'{"trunc')
    assert io_module.remove_dead_leftovers(tmp_path / "ckpt.old-best") == [staging]
    assert io_module.remove_dead_leftovers(tmp_path / "x.old-y.json") == [torn]
    assert list(tmp_path.iterdir()) == []


def test_a_folder_a_killed_writer_moved_aside_is_back_before_the_overwrite_check(tmp_path):
    """Killed between its two renames (a filesystem without the exchange), a writer left the old folder at
    `.out.old-<owner>`; the next writer without --overwrite puts it back and then refuses to replace it."""
    target = tmp_path / "out"
    with atomic_directory(target, flag="--out") as tmp:
        (tmp / "report.md").write_text("old")
    target.rename(tmp_path / f".out.old-{safe_remove.host_tag()}-{ended_pid()}")
    with pytest.raises(TRMError, match="already exists"), atomic_directory(target, flag="--out") as tmp:
        (tmp / "report.md").write_text("new")
    assert (target / "report.md").read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == [
        "out"
    ]


def test_temp_names_stay_under_the_name_limit_with_a_long_pod_name(tmp_path, monkeypatch):
    monkeypatch.setattr(socket, "gethostname", lambda: "trm-arc2-4xh100-" + "x" * 47)  # 63 characters
    tag = safe_remove.host_tag()
    assert len(tag) == safe_remove.HOST_TAG_MAX and tag.startswith("trm-arc2-4xh100-x")
    name = "m" * 185  # with the full host name and a pid the temp name would pass 255 bytes
    atomic_write_bytes(tmp_path / name, b"x")
    assert (tmp_path / name).read_bytes() == b"x"
    monkeypatch.setattr(socket, "gethostname", lambda: "trm-arc2-4xh100-" + "y" * 47)
    assert safe_remove.host_tag() != tag  # two long names that share their start stay apart


def test_a_killed_processs_scratch_folder_is_removed_by_the_next_one_of_its_name(tmp_path):
    killed_inside("scratch_directory('trm-x', sys.argv[1])", tmp_path)
    (leftover,) = tmp_path.iterdir()
    assert leftover.name.startswith(".trm-x.") and (leftover / "half").is_file()
    other = tmp_path / ".trm-y.otherhost-1.x.partial"  # another name, another host: not ours to clear
    other.mkdir()
    with io_module.scratch_directory("trm-x", tmp_path) as tmp:
        assert sorted(tmp_path.iterdir()) == sorted([tmp, other])
    assert list(tmp_path.iterdir()) == [other]  # and its own is gone once the block ends


def test_another_users_leftover_in_a_shared_temp_folder_is_left_alone(tmp_path, monkeypatch):
    """In a sticky /tmp another user's dead leftover cannot be deleted (and is not ours): the next scratch folder
    neither touches it nor fails on it."""
    dead = f"{safe_remove.host_tag()}-{ended_pid()}"
    theirs = [
        tmp_path / f".trm-x.{dead}.a.partial",
        tmp_path / f".trm-x.{dead}.b.tmp",
        tmp_path / f".trm-x.old-{dead}",
    ]
    theirs[0].mkdir()
    theirs[1].write_text("x")
    theirs[2].mkdir()
    monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 1)  # they were made by a user other than "us"
    with io_module.scratch_directory("trm-x", tmp_path) as tmp:
        assert tmp.is_dir()
    assert sorted(tmp_path.iterdir()) == sorted(theirs)
