from __future__ import annotations

import json
import os

import pytest

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
    with pytest.raises(RuntimeError), atomic_directory(target) as tmp:
        (tmp / "a").write_text("x")
        raise RuntimeError("boom")
    assert not target.exists()
    assert os.listdir(tmp_path) == []
    with atomic_directory(target) as tmp:
        (tmp / "a").write_text("x")
    assert (target / "a").read_text() == "x"
    with pytest.raises(FileExistsError), atomic_directory(target):
        pass
    with atomic_directory(target, overwrite=True) as tmp:
        (tmp / "b").write_text("y")
    assert sorted(os.listdir(target)) == ["b"]
    assert os.listdir(tmp_path) == ["out"]


def test_sha256_file(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"abc")
    assert sha256_file(p) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
