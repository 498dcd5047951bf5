"""Build/push driver, lock file and entrypoint against a fake Docker client (no engine needed)."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from tools.images import lockfile
from tools.images.driver import ImageDriver, connect, parse_registry
from tools.images.variants import load_config
from trm.errors import TRMError
from trm.images import entrypoint

ROOT = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "d" * 64


def docker_errors():
    """The docker SDK's error classes, imported by the tests that raise them (the SDK is a dev extra)."""
    return pytest.importorskip("docker").errors


class FakeImage:
    def __init__(self, api: FakeAPI, image_id: str) -> None:
        self.api = api
        self.id = image_id
        self.attrs = {"Size": sum(api.layer_sizes)}

    def history(self) -> list[dict]:
        return [{"Size": size} for size in self.api.layer_sizes]

    def tag(self, repository: str, tag: str) -> None:
        self.api.tags[f"{repository}:{tag}"] = self.id


class FakeAPI:
    """The low-level calls the driver makes, recording what it was asked."""

    def __init__(self, build_events=None, push_events=None, push_error=None, layer_sizes=(10, 2000)) -> None:
        self.layer_sizes = list(layer_sizes)
        self.build_events = build_events if build_events is not None else []
        self.push_events = push_events if push_events is not None else []
        self.push_error = push_error
        self.tags: dict[str, str] = {}
        self.build_kwargs: dict = {}
        self.context_names: list[str] = []
        self.pushed: list[tuple[str, str]] = []

    def build(self, **kwargs):
        self.build_kwargs = kwargs
        with tarfile.open(fileobj=kwargs["fileobj"]) as tar:
            self.context_names = tar.getnames()
        self.tags[kwargs["tag"]] = "sha256:" + "1" * 64
        return iter(self.build_events)

    def tag(self, image_id: str, repository: str, tag: str) -> None:
        self.tags[f"{repository}:{tag}"] = image_id

    def push(self, repository: str, tag: str, stream: bool, decode: bool):
        if self.push_error:
            raise self.push_error
        self.pushed.append((repository, tag))
        return iter(self.push_events)


class FakeImages:
    def __init__(self, api: FakeAPI) -> None:
        self.api = api
        self.registry: dict[str, object] = {}  # reference -> digest (or an exception to raise)

    def get_registry_data(self, reference: str):
        answer = self.registry[reference]
        if isinstance(answer, Exception):
            raise answer
        return type("RegistryData", (), {"id": answer})()

    def get(self, name: str) -> FakeImage:
        if name in self.api.tags.values():
            return FakeImage(self.api, name)
        if name not in self.api.tags:
            raise docker_errors().ImageNotFound(f"no such image: {name}")
        return FakeImage(self.api, self.api.tags[name])


class FakeClient:
    def __init__(self, **kwargs) -> None:
        self.api = FakeAPI(**kwargs)
        self.images = FakeImages(self.api)

    def ping(self) -> bool:
        return True


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A minimal checkout with the real Dockerfile and config and a one-file wheelhouse per lock."""
    root = tmp_path / "repo"
    for rel in ("docker/Dockerfile", "docker/images.toml", "pyproject.toml", "README.md", "trm/__init__.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes((ROOT / rel).read_bytes())
    for path in (ROOT / "docker/requirements").glob("*.txt"):
        (root / "docker/requirements").mkdir(parents=True, exist_ok=True)
        (root / "docker/requirements" / path.name).write_bytes(path.read_bytes())
    for lock in ("cpu", "cu130"):
        (root / f"docker/wheelhouse/{lock}").mkdir(parents=True)
        (root / f"docker/wheelhouse/{lock}/x-{lock}.whl").write_bytes(b"w")
    return root


def make_driver(checkout: Path, **client_kwargs) -> tuple[ImageDriver, FakeClient, io.StringIO]:
    client = FakeClient(**client_kwargs)
    out = io.StringIO()
    return ImageDriver(client, load_config(checkout / "docker/images.toml"), checkout, out=out), client, out


def test_build_streams_progress_and_tags_both_ways(checkout):
    events = [
        {"stream": "Step 1/3 : FROM base\n"},
        {"stream": " ---> abc\n"},
        {"stream": "Step 3/3 : RUN check\n"},
        {"aux": {"ID": "sha256:" + "2" * 64}},
    ]
    driver, client, out = make_driver(checkout, build_events=events)
    variant = driver.config.variants["sm90"]
    built = driver.build(variant, runtime_base="trm-base:bookworm")
    kwargs = client.api.build_kwargs
    assert kwargs["network_mode"] == "none" and kwargs["target"] == "runtime"
    assert kwargs["dockerfile"] == "docker/Dockerfile" and kwargs["custom_context"] is True
    assert (
        kwargs["buildargs"]["CUDA_ARCHS"] == "9.0"
        and kwargs["buildargs"]["RUNTIME_BASE"] == "trm-base:bookworm"
    )
    assert kwargs["buildargs"]["CONTENT_HASH"] == built.content_hash
    assert "docker/wheelhouse/cu130/x-cu130.whl" in client.api.context_names
    assert not any("wheelhouse/cpu" in n for n in client.api.context_names)
    assert built.image_id == "sha256:" + "2" * 64
    assert client.api.tags["trm:0.1.0-cu130-sm90"] == built.image_id
    assert built.tags[1] == f"trm:sm90-{built.content_hash}"
    assert "Step 3/3 : RUN check" in out.getvalue()


def test_build_reports_size_and_rejects_oversized_layers(checkout):
    driver, _, out = make_driver(checkout, layer_sizes=(10, 1_500_000_000, 300))
    driver.build(driver.config.variants["cpu"])
    assert "cpu: image 1500 MB, largest layer 1500 MB" in out.getvalue()
    driver, client, _ = make_driver(checkout, layer_sizes=(10, 5_200_000_000))
    with pytest.raises(TRMError, match=r"5\.2 GB layer, above the 5 GB"):
        driver.build(driver.config.variants["cpu"])
    # Build stages keep the venv in one layer; they are never pushed, so only runtime images are checked.
    built = driver.build(driver.config.variants["sm90"], target="adam-atan2")
    assert built.tags == [f"trm:sm90-{built.content_hash}-adam-atan2"]
    assert client.api.build_kwargs["target"] == "adam-atan2"


def test_build_error_event_becomes_a_trm_error(checkout):
    events = [
        {"stream": "Step 1/2 : RUN x\n"},
        {"error": "x failed", "errorDetail": {"message": "build check failed: SASS"}},
    ]
    driver, _, _ = make_driver(checkout, build_events=events)
    with pytest.raises(TRMError, match="building cpu failed: build check failed: SASS"):
        driver.build(driver.config.variants["cpu"])


def test_push_records_the_digest_atomically(checkout, tmp_path):
    driver, client, _ = make_driver(
        checkout, push_events=[{"status": "Pushed"}, {"aux": {"Digest": DIGEST, "Tag": "t"}}]
    )
    variant = driver.config.variants["cpu"]
    lock_path = tmp_path / "images.lock.json"
    lockfile.record_push(lock_path, "sm90", {"reference": "r/trm@" + DIGEST, "digest": DIGEST})
    driver.build(variant)
    pushed = driver.push(variant, "127.0.0.1:5000", lock_path=lock_path)
    assert pushed.reference == f"127.0.0.1:5000/trm@{DIGEST}"
    assert [t for _, t in client.api.pushed] == ["0.1.0-cpu", pushed.tags[1]]
    data = json.loads(lock_path.read_text())
    assert set(data["images"]) == {"cpu", "sm90"}  # other variants are kept
    assert data["images"]["cpu"]["digest"] == DIGEST and data["images"]["cpu"]["sm_list"] == []
    assert data["images"]["cpu"] == pushed.entry  # what a release pins is what a push records
    assert lockfile.image_reference("cpu", lock_path) == f"127.0.0.1:5000/trm@{DIGEST}"
    assert not list(tmp_path.glob(".images.lock.json.*"))  # no temp file left behind


def test_registry_digest_is_the_registrys_answer(checkout):
    driver, client, _ = make_driver(checkout)
    client.images.registry["127.0.0.1:5000/trm:0.1.0-cpu"] = DIGEST
    assert driver.registry_digest("127.0.0.1:5000/trm:0.1.0-cpu") == DIGEST
    client.images.registry["r.example.com/trm:x"] = "not-a-digest"
    with pytest.raises(TRMError, match="not a sha256 digest"):
        driver.registry_digest("r.example.com/trm:x")
    client.images.registry["r.example.com/trm:y"] = docker_errors().APIError("401 Client Error: unauthorized")
    with pytest.raises(TRMError, match=r"docker login r\.example\.com"):
        driver.registry_digest("r.example.com/trm:y")


def test_push_without_a_build_says_to_build_first(checkout, tmp_path):
    driver, _, _ = make_driver(checkout)
    with pytest.raises(TRMError, match=r"run `make image VARIANTS=sm80`"):
        driver.push(driver.config.variants["sm80"], "127.0.0.1:5000", lock_path=tmp_path / "l.json")


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            "Get http://127.0.0.1:5999/v2/: dial tcp 127.0.0.1:5999: connect: connection refused",
            "unreachable",
        ),
        ("unauthorized: authentication required", r"docker login 127.0.0.1:5000"),
    ],
)
def test_push_errors_name_the_fix(checkout, tmp_path, message, expected):
    driver, _, _ = make_driver(
        checkout, push_events=[{"error": message, "errorDetail": {"message": message}}]
    )
    variant = driver.config.variants["cpu"]
    driver.build(variant)
    with pytest.raises(TRMError, match=expected):
        driver.push(variant, "127.0.0.1:5000", lock_path=tmp_path / "l.json")
    assert not (tmp_path / "l.json").exists()


def test_push_api_error_is_mapped(checkout, tmp_path):
    error = docker_errors().APIError("500 Server Error: dial tcp: lookup nohost: no such host")
    driver, _, _ = make_driver(checkout, push_error=error)
    variant = driver.config.variants["cpu"]
    driver.build(variant)
    with pytest.raises(TRMError, match="unreachable"):
        driver.push(variant, "nohost:5000", lock_path=None)


@pytest.mark.parametrize(
    ("registry", "host", "path"),
    [
        ("127.0.0.1:5000", "127.0.0.1:5000", ""),
        ("127.0.0.1:5000/team/trm/", "127.0.0.1:5000", "team/trm"),
        ("registry.example.com/team", "registry.example.com", "team"),
        ("ghcr.io/my-org", "ghcr.io", "my-org"),
        ("docker.io/myuser", "docker.io", "myuser"),
        ("europe-docker.pkg.dev/my-project/images", "europe-docker.pkg.dev", "my-project/images"),
        ("localhost/a__b.c-d", "localhost", "a__b.c-d"),
        ("[::1]:5000/x", "[::1]:5000", "x"),
    ],
)
def test_namespaced_registries_are_accepted(registry, host, path):
    assert parse_registry(registry) == (host, path)


@pytest.mark.parametrize(
    ("registry", "expected"),
    [
        ("", "REGISTRY is empty"),
        ("https://registry.example/x", "drop the scheme"),
        ("myuser", r"Docker Hub user.*REGISTRY=docker.io/myuser"),
        ("host.example:99999", "port '99999' is not a number"),
        ("host.example:abc/team", "port 'abc'"),
        ("registry.example.com/Team", "path component 'Team' must be lower-case"),
        ("registry.example.com/team:latest", "a tag such as :latest"),
        ("registry.example.com/team//x", "path component ''"),
        ("bad_host.example", "is not a host name"),
        ("r.example/trm@sha256:" + "a" * 64, "may not hold a digest"),
    ],
)
def test_bad_registry_values_name_the_fix(registry, expected):
    with pytest.raises(TRMError, match=expected):
        parse_registry(registry)


def test_push_to_a_namespaced_registry(checkout, tmp_path):
    driver, client, _ = make_driver(checkout, push_events=[{"aux": {"Digest": DIGEST, "Tag": "t"}}])
    variant = driver.config.variants["cpu"]
    driver.build(variant)
    lock_path = tmp_path / "images.lock.json"
    pushed = driver.push(variant, "127.0.0.1:5000/team/", lock_path=lock_path)
    assert pushed.reference == f"127.0.0.1:5000/team/trm@{DIGEST}"
    assert {repo for repo, _ in client.api.pushed} == {"127.0.0.1:5000/team/trm"}
    assert lockfile.image_reference("cpu", lock_path) == f"127.0.0.1:5000/team/trm@{DIGEST}"
    with pytest.raises(TRMError, match="drop the scheme"):
        driver.push(variant, "https://registry.example/x", lock_path=None)


def test_no_engine_is_a_clear_error():
    def factory():
        raise docker_errors().DockerException("Error while fetching server API version: connection refused")

    with pytest.raises(TRMError, match=r"no Docker engine reachable.*start one"):
        connect(factory)


def test_lock_file_errors(tmp_path):
    path = tmp_path / "images.lock.json"
    with pytest.raises(TRMError, match=r"no pushed image for variant 'sm90'.*make image push"):
        lockfile.image_reference("sm90", path)
    with pytest.raises(TRMError, match="without a sha256 digest"):
        lockfile.record_push(path, "cpu", {"digest": "latest"})
    path.write_text("{broken")
    with pytest.raises(TRMError, match="not valid JSON"):
        lockfile.read_lock(path)


def test_entrypoint_runs_preflight_then_execs(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(entrypoint, "preflight_available", lambda: True)
    monkeypatch.setattr(
        entrypoint.subprocess, "run", lambda cmd: calls.append(cmd) or subprocess.CompletedProcess(cmd, 0)
    )
    execs = []
    env = {
        "TRM_IMAGE_VARIANT": "sm90",
        "TRM_IMAGE_SM_LIST": "sm_90",
        "TRM_IMAGE_GIT_SHA": "0123456789abcdef",
        "TRM_IMAGE_OPTIMIZER_BACKEND": "ext",
        "TRM_PREFLIGHT_ARGS": "--json --x 'a b'",
    }
    assert entrypoint.main(["python", "-m", "trm", "launch"], env, lambda f, a: execs.append((f, a))) == 0
    assert calls[0][-4:] == ["preflight", "--json", "--x", "a b"]
    assert execs == [("python", ["python", "-m", "trm", "launch"])]
    out = capsys.readouterr().out
    assert out.startswith("trm image sm90 | git 0123456789ab | sm [sm_90] | optimizer backend ext | trm ")


def test_entrypoint_stops_on_preflight_failure(monkeypatch, capsys):
    monkeypatch.setattr(entrypoint, "preflight_available", lambda: True)
    monkeypatch.setattr(entrypoint.subprocess, "run", lambda cmd: subprocess.CompletedProcess(cmd, 3))
    execs = []
    command = ["torchrun", "--nproc-per-node", "4", "-m", "trm.train"]
    assert entrypoint.main(command, {"TRM_IMAGE_GIT_SHA": "abc"}, lambda f, a: execs.append(f)) == 3
    assert execs == [] and "TRM_PREFLIGHT=skip" in capsys.readouterr().err


@pytest.mark.parametrize(
    "command",
    [
        ["python", "-m", "trm", "launch", "--dry-run"],  # runbook 03's plan check
        ["python", "-m", "trm", "launch", "--onstart-script"],
        ["python", "-m", "trm", "launch", "--handoff"],
        ["python", "-m", "trm", "handoff", "/workspace/checkpoints/r", "--out", "/workspace/artifacts/r"],
        ["python", "-m", "trm", "version", "--json"],
        ["bash", "scripts/train_prod.sh", "--help"],
        ["python", "-m", "trm.train", "--cfg"],
        ["sleep", "infinity"],
        ["bash"],
    ],
)
def test_entrypoint_runs_one_off_commands_without_preflight(monkeypatch, capsys, command):
    # Docker's default 64 MiB /dev/shm fails the preflight; a command that does not train must run anyway.
    monkeypatch.setattr(entrypoint, "preflight_available", lambda: True)
    monkeypatch.setattr(entrypoint.subprocess, "run", lambda cmd: subprocess.CompletedProcess(cmd, 1))
    execs = []
    assert entrypoint.main(command, {"TRM_IMAGE_GIT_SHA": "abc"}, lambda f, a: execs.append(a)) == 0
    assert execs == [command]
    assert "no preflight for a command that does not train" in capsys.readouterr().out


@pytest.mark.parametrize(
    "command",
    [
        ["python", "-m", "trm", "launch"],
        ["python3", "-u", "-m", "trm.train", "arch=trm"],
        ["/opt/venv/bin/python", "-m", "trm.training.smoke", "--workdir", "/tmp/s"],
        ["python", "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "trm.train"],
        ["torchrun", "--standalone", "-m", "trm.train"],
        ["bash", "scripts/train_prod.sh"],
    ],
)
def test_entrypoint_training_commands_get_the_preflight(command):
    assert entrypoint.is_training_command(command)


def test_entrypoint_preflight_modes(monkeypatch, capsys):
    monkeypatch.setattr(entrypoint, "preflight_available", lambda: False)
    assert entrypoint.run_preflight({}) == 0
    assert "no `preflight` command" in capsys.readouterr().out
    assert entrypoint.run_preflight({"TRM_PREFLIGHT": "require"}) == 2
    assert entrypoint.run_preflight({"TRM_PREFLIGHT": "skip"}) == 0
    assert entrypoint.run_preflight({"TRM_PREFLIGHT": "maybe"}) == 2


def test_entrypoint_unknown_command_exits_127(monkeypatch):
    def execvp(file, args):
        raise FileNotFoundError(file)

    assert entrypoint.main(["no-such-binary"], {"TRM_PREFLIGHT": "skip"}, execvp) == 127
