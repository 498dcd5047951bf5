"""`python -m trm kaggle publish` with the real kaggle client, in a subprocess, never off this machine.

The client is pointed at a fake Kaggle API on 127.0.0.1 (tests/kaggle/fake_kaggle_api.py) with its own
KAGGLE_API_ENVIRONMENT=LOCALHOST switch and HTTP_PROXY; its credentials come from its own configuration
(a kaggle.json in KAGGLE_CONFIG_DIR, or KAGGLE_USERNAME/KAGGLE_KEY), planted here, and must appear in no
output and no file the command writes."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import json_api
from tests.kaggle.bundles import fake_bundle
from tests.kaggle.fake_kaggle_api import FakeKaggle

needs_client = pytest.mark.skipif(
    importlib.util.find_spec("kaggle") is None, reason="the kaggle extra: pip install -e '.[kaggle]'"
)

ROOT = Path(__file__).resolve().parents[2]
PLANTED = "planted0kaggle0key0f00dfeedbeef1234"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A clean environment: no KAGGLE_* or proxy of the caller, HOME and the temp dir under tmp_path."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.upper().startswith(("KAGGLE_", "HTTP", "NO_PROXY", "ALL_PROXY"))
    }
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env.update(HOME=str(home), TMPDIR=str(tmp_path / "tmp"), PYTHONPATH=str(ROOT), NO_PROXY="", no_proxy="")
    env.pop("VERBOSE", None)
    env.update(extra)
    return env


def _publish(bundle: Path, out: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    argv = [
        sys.executable,
        "-m",
        "trm",
        "kaggle",
        "publish",
        str(bundle),
        "--owner",
        "alice",
        "--out",
        str(out),
    ]
    return subprocess.run([*argv, "--quiet", *extra], env=env, capture_output=True, text=True, timeout=120)


@needs_client
def test_missing_credentials_are_one_line_exit_2_and_nothing_is_written(tmp_path: Path) -> None:
    bundle = fake_bundle(tmp_path / "bundle")
    out = tmp_path / "pub"
    proc = _publish(bundle, out, _env(tmp_path, KAGGLE_CONFIG_DIR=str(tmp_path / "empty-config")))
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and proc.stderr.startswith(
        "error: no Kaggle credentials: the kaggle client found none"
    )
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not out.exists()


def _leaks(root: Path, secrets: list[str], skip: Path) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and path != skip:
            data = path.read_bytes()
            found += [f"{path}: {s[:6]}…" for s in secrets if s.encode() in data]
    return found


@needs_client
@pytest.mark.e2e
@pytest.mark.parametrize("credentials", ["kaggle.json", "environment and VERBOSE=1"])
def test_the_real_client_creates_versions_and_pushes_without_leaking_the_key(
    tmp_path: Path, credentials: str
) -> None:
    bundle = fake_bundle(tmp_path / "bundle")
    out = tmp_path / "pub"
    state = FakeKaggle(existing={"alice/trm-arc-wheels"})
    config_dir = tmp_path / "kaggle-config"
    config_dir.mkdir()
    kaggle_json = config_dir / "kaggle.json"
    if credentials == "kaggle.json":
        kaggle_json.write_text(json.dumps({"username": "alice", "key": PLANTED}))
        creds = {"KAGGLE_CONFIG_DIR": str(config_dir)}
    else:  # the client's verbose mode prints request headers: the publisher turns it off
        creds = {
            "KAGGLE_CONFIG_DIR": str(config_dir),
            "KAGGLE_USERNAME": "alice",
            "KAGGLE_KEY": PLANTED,
            "VERBOSE": "1",
        }
    with json_api(state.answer) as server:
        env = _env(
            tmp_path,
            KAGGLE_API_ENVIRONMENT="LOCALHOST",
            HTTP_PROXY=server.url,
            http_proxy=server.url,
            **creds,
        )
        proc = _publish(bundle, out, env, "--wait-minutes", "1")
    assert proc.returncode == 0, proc.stderr + proc.stdout

    # The calls, in order: weights created (the client checks the slug is free first), wheels versioned,
    # both ready, the kernel pushed. Every request carried the planted credentials, from the client's config.
    names = [n for n in state.names() if n not in ("StartBlobUpload", "PUT")]
    assert names == [
        "GetDatasetStatus", "GetDatasetStatus", "CreateDataset",
        "GetDatasetStatus", "CreateDatasetVersion",
        "GetDatasetStatus", "GetDatasetStatus",
        "SaveKernel",
    ]  # fmt: skip
    basic = "Basic " + base64.b64encode(f"alice:{PLANTED}".encode()).decode()
    assert {c.authorization for c in state.calls if c.method != "PUT"} == {basic}
    create = next(c.body for c in state.calls if c.method == "CreateDataset")
    assert (create["ownerSlug"], create["slug"], create["title"], create["licenseName"]) == (
        "alice", "trm-arc-weights", "trm-arc weights", "other"
    )  # fmt: skip
    assert create["isPrivate"] is True
    version = next(c.body for c in state.calls if c.method == "CreateDatasetVersion")
    assert (
        version["datasetSlug"] == "trm-arc-wheels"
        and version["body"]["versionNotes"] == "trm-stack 0.1.0: step_42 step 42"
    )

    # What was uploaded is the bundle, byte for byte: weights without the wheelhouse, the wheelhouse flat.
    uploaded = {b["name"]: b["sha256"] for b in state.blobs.values()}
    manifest = json.loads((bundle / "manifest.json").read_text())["files"]
    expected = {name.split("/")[-1]: entry["sha256"] for name, entry in manifest.items()}
    expected["manifest.json"] = hashlib.sha256((bundle / "manifest.json").read_bytes()).hexdigest()
    assert uploaded == expected
    assert state.created["alice/trm-arc-weights"] == sorted(
        ["README.md", "config.json", "identifiers.json", "manifest.json", "model.pt"]
    )
    assert state.created["alice/trm-arc-wheels"] == sorted(
        n.split("/")[1] for n in manifest if n.startswith("wheels/")
    )

    [kernel] = state.kernels
    assert (kernel["slug"], kernel["language"], kernel["kernelType"]) == (
        "alice/trm-arc-submission",
        "python",
        "notebook",
    )
    assert kernel["enableGpu"] is True and kernel["enableInternet"] is False and kernel["isPrivate"] is True
    assert kernel["datasetDataSources"] == ["alice/trm-arc-weights", "alice/trm-arc-wheels"]
    assert kernel["competitionDataSources"] == ["arc-prize-2025"]
    assert json.loads(kernel["text"])["nbformat"] == 4
    assert "pushed kernel alice/trm-arc-submission (version 1)" in proc.stdout

    # The key (and its Basic form) is in no output and no file but the client's own kaggle.json.
    secrets = [PLANTED, basic.split()[1]]
    assert not [s for s in secrets if s in proc.stdout + proc.stderr]
    assert _leaks(tmp_path, secrets, skip=kaggle_json) == []
