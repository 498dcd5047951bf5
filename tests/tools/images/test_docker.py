"""The real image round trip on a Docker engine (run by `nox -s docker` / scripts/image_test.sh).

Checks the runtime stage's interpreter check on two local bases whose interpreters differ only in compile
date. Builds the `cpu` variant on a debootstrapped local base (no registry can be pulled from here; like the
pinned python image it has gcc, libc headers and Python.h), runs the CPU smoke inside it, pushes to a
namespace of the local registry in $TRM_TEST_REGISTRY (`<registry>/team/trm`) with `make push`, removes
the local image, pulls it back by the digest recorded in the lock file and runs the smoke again.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tools.images import lockfile
from tools.images.base import DEVEL, ensure_local_base
from tools.images.context import git_sha, project_version
from tools.images.driver import connect
from tools.images.variants import load_config

pytestmark = pytest.mark.docker
GIT = [
    "git",
    "-c",
    "user.name=trm-test",
    "-c",
    "user.email=trm-test@example.com",
    "-c",
    "commit.gpgsign=false",
]

ROOT = Path(__file__).resolve().parents[3]
VENV = Path(sys.executable).parent.parent
FIVE_GB = 5 * 1000**3


def smoke_command() -> list[str]:
    """The in-container smoke: `[smoke].command` of docker/images.toml, or $TRM_IMAGE_SMOKE."""
    override = os.environ.get("TRM_IMAGE_SMOKE")
    return shlex.split(override) if override else list(load_config(ROOT / "docker/images.toml").smoke_command)


def make(*args: str, check: bool = True, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    # `-o`: the venv is the one running these tests; a checkout with a newer pyproject.toml (a fresh clone)
    # must not make `venv` reinstall it from there
    cmd = ["make", "--no-print-directory", f"VENV={VENV}", "-o", f"{VENV}/.installed", *args]
    print("+", " ".join(cmd), flush=True)
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    print(
        proc.stdout[-4000:], proc.stderr[-4000:], f"({time.monotonic() - start:.0f} s)", sep="\n", flush=True
    )
    if check and proc.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {proc.returncode}")
    return proc


def run_smoke(client, image: str, command: list[str] | None = None) -> str:
    """Run the smoke (or `command`) in `image` without network; return its output (fails on non-zero exit)."""
    command = command or smoke_command()
    container = client.containers.run(
        image,
        command,
        network_mode="none",
        environment={"TRM_PREFLIGHT_ARGS": load_config(ROOT / "docker/images.toml").smoke_preflight_args},
        shm_size="1g",
        detach=True,
    )
    try:
        status = container.wait(timeout=1500)
        logs = container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)
    print(logs[-3000:])
    assert status["StatusCode"] == 0, f"{command} exited {status['StatusCode']}:\n{logs[-3000:]}"
    return logs


@pytest.fixture(scope="module")
def registry() -> str:
    value = os.environ.get("TRM_TEST_REGISTRY")
    if not value:
        pytest.skip("TRM_TEST_REGISTRY not set: run through `nox -s docker` (scripts/image_test.sh)")
    return value


@pytest.fixture(scope="module")
def client():
    return connect(timeout=1800)


@pytest.fixture(scope="module")
def built(client) -> dict:
    """Local base, wheelhouse and the `cpu` image, built through `make image` like a user would."""
    ensure_local_base(client, DEVEL)
    make("wheelhouse", "VARIANTS=cpu")
    revision = git_sha(ROOT)
    start = time.monotonic()
    make("image", "VARIANTS=cpu", f"BUILD_BASE={DEVEL.tag}", f"RUNTIME_BASE={DEVEL.tag}")
    seconds = time.monotonic() - start
    config = load_config(ROOT / "docker/images.toml")
    version = config.variants["cpu"].version_tag(project_version(ROOT))
    image = client.images.get(f"{config.repository}:{version}")
    return {"image": image, "seconds": seconds, "tags": list(image.tags), "revision": revision}


def test_cpu_image_metadata_and_layers(client, built):
    image = built["image"]
    labels = image.labels
    assert labels["org.trm-stack.variant"] == "cpu"
    assert labels["org.trm-stack.torch"] == "2.13.0"
    assert labels["org.opencontainers.image.revision"] == built["revision"]
    assert len(built["tags"]) == 2 and any(":cpu-" in t for t in built["tags"])
    config = image.attrs["Config"]
    assert config["User"] == "trm"
    assert config["Entrypoint"][-1] == "trm.images.entrypoint"
    layers = [h["Size"] for h in image.history()]
    print(
        f"\nIMAGE cpu: size {image.attrs['Size'] / 1e6:.0f} MB, largest layer {max(layers) / 1e6:.0f} MB, "
        f"{len(layers)} history entries, make image took {built['seconds']:.0f} s"
    )
    assert max(layers) < FIVE_GB
    whoami = client.containers.run(
        image.id, ["id", "-u"], entrypoint=[], network_mode="none", remove=True
    ).decode()
    assert whoami.strip() == "1000"
    env = dict(item.split("=", 1) for item in config["Env"])
    # The git commit is baked in once and read back by the one lookup every caller uses.
    assert env["TRM_IMAGE_GIT_SHA"] == built["revision"]
    sha = client.containers.run(
        image.id,
        ["python", "-c", "from trm.gitinfo import code_git_sha; print(code_git_sha())"],
        entrypoint=[],
        network_mode="none",
        remove=True,
    ).decode()
    assert sha.strip() == built["revision"]
    # CPU image: no NVIDIA container variables (plain runc behaviour), no CUDA compiler.
    assert (
        env["NVIDIA_VISIBLE_DEVICES"] == env["NVIDIA_DRIVER_CAPABILITIES"] == env["NVIDIA_REQUIRE_CUDA"] == ""
    )
    compilers = client.containers.run(
        image.id,
        ["sh", "-c", "command -v gcc; command -v nvcc || true"],
        entrypoint=[],
        network_mode="none",
        remove=True,
    ).decode()
    assert compilers.split() == ["/usr/bin/gcc"]


def test_cpu_image_can_do_the_c_build_triton_does(client, built):
    """torch.compile's Triton compiles C helpers at run time: as the image's user, through Triton's
    compiler lookup ($CC, gcc, clang), Python.h and a shared-object build that is then imported."""
    out = client.containers.run(
        built["image"].id,
        ["python", "-m", "trm.images.buildtools", "check-cc"],
        entrypoint=[],
        network_mode="none",
        remove=True,
    ).decode()
    print(out)
    assert "C build for Triton works: /usr/bin/gcc" in out


# Inside a copy of the toolchain base: rewrite the interpreter's compile date (the `__DATE__` bytes in the
# python binary or libpython) to another date of the same length. The result is the situation of the full
# and slim python images: one CPython release, compiled on different days.
REDATE = r"""
import glob, os, platform, shutil, sys
old = platform.python_build()[1].split()
old = " ".join(old[:-1]).encode()  # e.g. b"Apr 28 2025" (the time stays)
new = b"Jan  1 2001"[: len(old)].ljust(len(old))
assert new != old
files = {os.path.realpath(sys.executable)} | {
    os.path.realpath(p) for p in glob.glob("/usr/lib/**/libpython3*.so*", recursive=True)
}
patched = 0
for path in files:
    data = open(path, "rb").read()
    if data.count(old) == 1:  # the running interpreter's file is busy: write a copy, rename it over
        open(path + ".new", "wb").write(data.replace(old, new))
        shutil.copymode(path, path + ".new")
        os.replace(path + ".new", path)
        patched += 1
assert patched, f"no file holds {old!r} exactly once"
"""


def _build(client, dockerfile: str, files: dict[str, bytes], tag: str) -> None:
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in {"Dockerfile": dockerfile.encode(), **files}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    events = client.api.build(
        fileobj=buf, custom_context=True, tag=tag, rm=True, forcerm=True, network_mode="none", decode=True
    )
    for event in events:
        if "error" in event:
            raise AssertionError(f"building {tag}: {event['error']}")
        print(event.get("stream", ""), end="")


def test_venv_moves_between_bases_that_differ_only_in_build_date(client):
    """The runtime stage's interpreter check on two local bases: same release, different compile dates."""
    ensure_local_base(client, DEVEL)
    venvtools = (ROOT / "trm/images/venvtools.py").read_bytes()
    redated = "trm-test-redated:bookworm"
    _build(
        client,
        f"FROM {DEVEL.tag}\nCOPY redate.py /redate.py\nRUN python3 /redate.py && rm /redate.py\n",
        {"redate.py": REDATE.encode()},
        redated,
    )
    try:
        _build(
            client,
            f"FROM {DEVEL.tag} AS build\n"
            "COPY venvtools.py /venvtools.py\n"
            "RUN python3 /venvtools.py python-facts /facts.json"
            " && python3 -c 'import sys; print(sys.version)' > /sys-version\n"
            f"FROM {redated}\n"
            "COPY venvtools.py /venvtools.py\n"
            "COPY --from=build /facts.json /sys-version /\n"
            # The premise: the byte-for-byte comparison the Dockerfile used to make refuses these bases.
            "RUN ! python3 -c 'import sys; print(sys.version)' | cmp -s - /sys-version\n"
            "RUN python3 /venvtools.py check-python /facts.json\n",
            {"venvtools.py": venvtools},
            "trm-test-venv-move:latest",
        )
    finally:
        for tag in ("trm-test-venv-move:latest", redated):
            try:
                client.images.remove(tag, force=True)
            except Exception as err:  # cleanup only; the assertion above is what matters
                print(f"cleanup of {tag}: {err}")


def test_cpu_smoke_runs_in_the_image(client, built):
    logs = run_smoke(client, built["image"].id)
    assert "trm image cpu" in logs.splitlines()[0]


def test_push_to_unreachable_registry_is_a_clear_error(built):
    proc = make(
        "push",
        "VARIANTS=cpu",
        "REGISTRY=127.0.0.1:1",
        f"RUNTIME_BASE={DEVEL.tag}",
        f"BUILD_BASE={DEVEL.tag}",
        "IMAGES_LOCK=/dev/null/none.json",
        check=False,
    )
    assert proc.returncode != 0
    assert "registry 127.0.0.1:1 is unreachable" in proc.stderr


def test_push_pull_by_digest_and_run_again(client, built, registry, tmp_path_factory):
    lock_path = tmp_path_factory.mktemp("lock") / "images.lock.json"
    start = time.monotonic()
    make(
        "push",
        "VARIANTS=cpu",
        f"REGISTRY={registry}/team",
        f"IMAGES_LOCK={lock_path}",
        f"BUILD_BASE={DEVEL.tag}",
        f"RUNTIME_BASE={DEVEL.tag}",
    )
    push_seconds = time.monotonic() - start
    entry = json.loads(lock_path.read_text())["images"]["cpu"]
    reference = lockfile.image_reference("cpu", lock_path)
    assert reference == f"{registry}/team/trm@{entry['digest']}"
    print(f"\nPUSHED {reference} in {push_seconds:.0f} s")

    image_id = built["image"].id
    # Every reference (tags and the registry digest) goes; the parent layers stay as build cache.
    client.images.remove(image_id, force=True, noprune=True)
    assert not any(img.id == image_id for img in client.images.list())

    start = time.monotonic()
    pulled = client.images.pull(reference)
    print(f"PULLED {reference} in {time.monotonic() - start:.0f} s")
    assert reference in pulled.attrs["RepoDigests"]
    assert pulled.id == image_id  # the very image that ran the smoke came back
    # Entrypoint + a one-off command (no preflight: it does not train) on the pulled reference (the full smoke already ran on these
    # bytes; running it twice would double the CI time).
    logs = run_smoke(client, reference, ["python", "-m", "trm", "version", "--json"])
    assert "trm image cpu" in logs.splitlines()[0]
    assert '"torch": "2.13.0+cpu"' in logs


def _clone_at_head(dest: Path) -> Path:
    """A clean clone of this checkout's HEAD, with the wheelhouse `built` filled linked (or copied) in."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, check=True, capture_output=True, text=True)
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(ROOT), str(dest)], check=True)
    subprocess.run(["git", "checkout", "-q", "--detach", head.stdout.strip()], cwd=dest, check=True)
    wheelhouse = dest / "docker" / "wheelhouse" / "cpu"
    wheelhouse.mkdir(parents=True)
    for path in (ROOT / "docker" / "wheelhouse" / "cpu").iterdir():
        try:
            os.link(path, wheelhouse / path.name)
        except OSError:  # another filesystem
            shutil.copy2(path, wheelhouse / path.name)
    return dest


def _release_outputs(repo: Path) -> str:
    """What a release changed in `repo`: the diff of tracked files and the content of new ones."""
    diff = subprocess.run(["git", "diff"], cwd=repo, check=True, capture_output=True, text=True).stdout
    new = subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard"],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return diff + "".join(f"\n+++ {name}\n{(repo / name).read_text()}" for name in sorted(new))


def test_make_release_pins_the_registry_digest_runbooks_and_jobs(client, built, registry, tmp_path):
    """`make release` in a clean clone: build (layer cache of `built`), push, read back, one lock write,
    the cpu runbook re-stamped and an overlay deploying cpu pinned; refused when dirty; idempotent."""
    from tools.jobs import k8s
    from tools.release.publish import STAMP_MESSAGE
    from tools.runbooks.runbook import load_runbook

    repo = _clone_at_head(tmp_path / "repo")
    # the shipped overlays deploy sm90, which this machine cannot build: let the smoke overlay deploy cpu
    kustomization = repo / "jobs" / "overlays" / "smoke" / "kustomization.yaml"
    kustomization.write_text(kustomization.read_text().replace("image-variant: sm90", "image-variant: cpu"))
    subprocess.run([*GIT, "commit", "-q", "-am", "test: the smoke overlay deploys cpu"], cwd=repo, check=True)
    bases = (f"BUILD_BASE={DEVEL.tag}", f"RUNTIME_BASE={DEVEL.tag}")
    target = f"{registry}/team"  # where test_push_pull_by_digest_and_run_again pushed: its layers are there

    start = time.monotonic()
    proc = make("release", f"REGISTRY={target}", "VARIANTS=cpu", *bases, cwd=repo)
    print(f"\nRELEASED in {time.monotonic() - start:.0f} s")
    entry = json.loads((repo / "docker" / "images.lock.json").read_text())["images"]["cpu"]
    reference = f"{target}/trm@{entry['digest']}"
    assert entry["reference"] == reference
    assert f"cpu\t{reference}" in proc.stdout.splitlines()
    # the pinned digest is the registry's, for every pushed tag
    for tag in entry["tags"]:
        assert client.images.get_registry_data(f"{target}/trm:{tag}").id == entry["digest"]
    header = load_runbook(repo / "runbooks" / "v1" / "07-kaggle.md").header
    assert (header["image"], header["image_digest"]) == (f"{target}/trm:{entry['tags'][0]}", entry["digest"])
    assert STAMP_MESSAGE in (repo / "runbooks" / "CHANGELOG.md").read_text()
    pinned = yaml.safe_load(kustomization.read_text())["images"]
    assert pinned == [{"name": k8s.IMAGE_NAME, "newName": f"{target}/trm", "digest": entry["digest"]}]
    # (tests/tools/jobs/test_jobs.py renders pinned overlays with kustomize: the container image is newName@digest)
    outputs = _release_outputs(repo)

    # what it wrote is uncommitted: a second release refuses until it is committed
    again = make("release", f"REGISTRY={target}", "VARIANTS=cpu", *bases, cwd=repo, check=False)
    assert again.returncode == 2 and "uncommitted change(s)" in again.stderr

    # the same commit released again: same digest, byte-identical outputs
    subprocess.run(["git", "stash", "-q", "-u"], cwd=repo, check=True)
    start = time.monotonic()
    make("release", f"REGISTRY={target}", "VARIANTS=cpu", *bases, cwd=repo)
    print(f"RELEASED again in {time.monotonic() - start:.0f} s")
    assert _release_outputs(repo) == outputs
