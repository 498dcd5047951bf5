"""`make release` logic (tools.release.publish) with a fake engine and registry: what gets pinned and re-stamped,
what is refused before anything is built, and that a second release at the same state changes nothing.
The real round trip (build, push to a registry on 127.0.0.1, read back) is in tests/tools/images/test_docker.py."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tools.images.driver import PushedImage
from tools.images.variants import load_config
from tools.jobs import k8s
from tools.release.cli import main
from tools.release.publish import STAMP_MESSAGE, release
from tools.runbooks.runbook import load_runbook
from trm.errors import TRMError

ROOT = Path(__file__).resolve().parents[3]
REGISTRY = "registry.example.com/team"
REPOSITORY = f"{REGISTRY}/trm"
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]


def _digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


class FakeRegistry:
    """Builds nothing, 'pushes' to a dict; `tampered` makes the registry answer another digest."""

    def __init__(self, build: str = "1") -> None:
        self.calls: list[tuple[str, str]] = []
        self.manifests: dict[str, str] = {}
        self.build_id = build
        self.tampered = False

    def build(self, variant):
        self.calls.append(("build", variant.name))

    def push(self, variant, registry):
        self.calls.append(("push", variant.name))
        repository = f"{registry}/trm"
        digest = _digest(f"{variant.name}-{self.build_id}")
        tags = [f"0.1.0-{variant.name}", f"{variant.name}-0123456789ab"]
        for tag in tags:
            self.manifests[f"{repository}:{tag}"] = digest
        entry = {
            "reference": f"{repository}@{digest}",
            "repository": repository,
            "digest": digest,
            "tags": tags,
        }
        return PushedImage(variant.name, repository, digest, tags, entry)

    def registry_digest(self, reference):
        self.calls.append(("read-back", reference))
        return _digest("someone else's push") if self.tampered else self.manifests[reference]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run([*GIT, *args], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A committed checkout with the real runbooks, jobs and variants file, nothing released yet."""
    for tree in ("runbooks", "jobs"):
        shutil.copytree(ROOT / tree, tmp_path / tree)
    (tmp_path / "docker").mkdir()
    shutil.copy(ROOT / "docker" / "images.toml", tmp_path / "docker" / "images.toml")
    (tmp_path / "docker" / "images.lock.json").unlink(missing_ok=True)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "base")
    return tmp_path


def _variants(*names: str):
    return load_config(ROOT / "docker" / "images.toml").select(list(names))


def _snapshot(repo: Path) -> dict[str, bytes]:
    return {
        p.relative_to(repo).as_posix(): p.read_bytes()
        for p in sorted(repo.rglob("*"))
        if p.is_file() and ".git" not in p.parts
    }


def test_release_pins_the_lock_restamps_runbooks_and_pins_the_overlays(repo):
    fake = FakeRegistry()
    out = io.StringIO()
    outcome = release(repo, REGISTRY, _variants("cpu", "sm90"), fake, out=out)

    cpu, sm90 = _digest("cpu-1"), _digest("sm90-1")
    lock = json.loads((repo / "docker" / "images.lock.json").read_text())
    assert {v: e["reference"] for v, e in lock["images"].items()} == {
        "cpu": f"{REPOSITORY}@{cpu}",
        "sm90": f"{REPOSITORY}@{sm90}",
    }
    # every pushed tag was read back from the registry before anything was written
    assert ("read-back", f"{REPOSITORY}:0.1.0-cpu") in fake.calls
    assert ("read-back", f"{REPOSITORY}:sm90-0123456789ab") in fake.calls
    # runbook headers carry the pinned image of their variant; CHANGELOG says how they got it
    kaggle = load_runbook(repo / "runbooks" / "v1" / "07-kaggle.md").header
    assert (kaggle["image"], kaggle["image_digest"]) == (f"{REPOSITORY}:0.1.0-cpu", cpu)
    smoke = load_runbook(repo / "runbooks" / "v1" / "02-first-smoke.md").header
    assert (smoke["image"], smoke["image_digest"]) == (f"{REPOSITORY}:0.1.0-sm90", sm90)
    changelog = (repo / "runbooks" / "CHANGELOG.md").read_text()
    # every runbook of a released variant (all of them: they run on cpu or sm90), each once
    runbooks = sorted((repo / "runbooks" / "v1").glob("*.md"))
    released = [p for p in runbooks if load_runbook(p).header.get("image_variant") in ("cpu", "sm90")]
    assert len(released) == len(runbooks) >= 9
    assert changelog.count(STAMP_MESSAGE) == len(outcome.bumped) == len(released)
    # every overlay deploying sm90 now renders repository@digest instead of the placeholder
    overlays = [d for d in outcome.pinned if d.is_dir()]
    assert {d.name for d in overlays} == {
        "smoke",
        "prod-4xh100",
        "prod-8xh200",
        "multinode-2x8xh200",
        "urm-8xh100",
    }
    for directory in overlays:
        kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
        assert kustomization["images"] == [{"name": k8s.IMAGE_NAME, "newName": REPOSITORY, "digest": sm90}]
        assert sm90 in (directory / k8s.PIN_PATCH).read_text()
    assert k8s.pin_images(repo, check=True) == []  # what `jobs check` compares: nothing stale
    # the SkyPilot tasks run the CUDA 12.8 images (sm90-cu128, sm100-cu128, ...), not released here: every
    # candidate keeps the placeholder
    for name in ("smoke.yaml", "train.yaml"):
        task = yaml.safe_load((repo / "jobs" / "skypilot" / name).read_text())
        assert {c["image_id"] for c in task["resources"]["any_of"]} == {"docker:trm-stack"}
    assert not {p.name for p in outcome.pinned} & {"smoke.yaml", "train.yaml"}
    _git(repo, "add", "-A")  # a release starts from a clean checkout
    _git(repo, "commit", "-qm", "release cpu sm90")
    cu128 = release(repo, REGISTRY, _variants("sm90-cu128"), fake, out=io.StringIO())
    for name in ("smoke.yaml", "train.yaml"):
        task = yaml.safe_load((repo / "jobs" / "skypilot" / name).read_text())
        ids = {c["accelerators"].split(":")[0]: c["image_id"] for c in task["resources"]["any_of"]}
        # the H100 candidate runs the released sm90-cu128; the others keep the placeholder until theirs is
        assert ids.pop("H100") == f"docker:{REPOSITORY}@{_digest('sm90-cu128-1')}"
        assert set(ids.values()) == {"docker:trm-stack"}
    assert {p.name for p in cu128.pinned} >= {"smoke.yaml", "train.yaml"}
    printed = out.getvalue().splitlines()
    assert printed[:2] == [f"cpu\t{REPOSITORY}@{cpu}", f"sm90\t{REPOSITORY}@{sm90}"]


def test_one_variant_leaves_the_others_as_they_were(repo):
    # sm90 was released before (committed); now only cpu is released
    release(repo, REGISTRY, _variants("sm90"), FakeRegistry())
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "release sm90")
    before = _snapshot(repo)
    outcome = release(repo, REGISTRY, _variants("cpu"), FakeRegistry())

    assert outcome.bumped == ("kaggle v" + str(load_runbook(repo / "runbooks/v1/07-kaggle.md").version),)
    assert outcome.pinned == ()
    lock = json.loads((repo / "docker" / "images.lock.json").read_text())["images"]
    assert set(lock) == {"cpu", "sm90"} and lock["sm90"]["digest"] == _digest("sm90-1")
    changed = {k for k, v in _snapshot(repo).items() if before.get(k) != v}
    assert changed == {"docker/images.lock.json", "runbooks/CHANGELOG.md", "runbooks/v1/07-kaggle.md"}


def test_a_second_release_at_the_same_state_changes_nothing(repo):
    release(repo, REGISTRY, _variants("cpu", "sm90"), FakeRegistry())
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "release")
    before = _snapshot(repo)
    outcome = release(repo, REGISTRY, _variants("cpu", "sm90"), FakeRegistry())
    assert (outcome.bumped, outcome.pinned) == ((), ())
    assert _snapshot(repo) == before
    assert _git(repo, "status", "--porcelain") == ""
    # a new build (new digest) is a new release: pinned and re-stamped again
    outcome = release(repo, REGISTRY, _variants("cpu"), FakeRegistry(build="2"))
    assert outcome.bumped and json.loads((repo / "docker/images.lock.json").read_text())["images"]["cpu"][
        "digest"
    ] == _digest("cpu-2")


def test_uncommitted_changes_and_a_bad_registry_are_refused_before_any_build(repo):
    fake = FakeRegistry()
    with pytest.raises(TRMError, match="REGISTRY is empty"):
        release(repo, "", _variants("cpu"), fake)
    with pytest.raises(TRMError, match="drop the scheme"):
        release(repo, "https://ghcr.io/me", _variants("cpu"), fake)
    (repo / "runbooks" / "v1" / "07-kaggle.md").write_text("edited\n")
    (repo / "notes.txt").write_text("untracked files would enter the build context\n")
    with pytest.raises(TRMError, match=r"2 uncommitted change\(s\):\n.*07-kaggle.md\n.*notes.txt") as err:
        release(repo, REGISTRY, _variants("cpu"), fake)
    assert "commit (or stash) them first" in str(err.value)
    assert fake.calls == []
    assert not (repo / "docker" / "images.lock.json").exists()


def test_outside_git_is_refused(tmp_path):
    with pytest.raises(TRMError, match="not a git checkout"):
        release(tmp_path, REGISTRY, _variants("cpu"), FakeRegistry())


def test_a_digest_the_registry_does_not_confirm_pins_nothing(repo):
    fake = FakeRegistry()
    fake.tampered = True
    with pytest.raises(TRMError, match=r"the registry resolves .* but the push reported"):
        release(repo, REGISTRY, _variants("cpu"), fake)
    assert not (repo / "docker" / "images.lock.json").exists()
    assert _git(repo, "status", "--porcelain") == ""


def test_the_command_refuses_before_contacting_an_engine(repo, capsys, monkeypatch):
    monkeypatch.delenv("REGISTRY", raising=False)
    assert main(["--root", str(repo), "--variants", "cpu"]) == 2
    assert "REGISTRY is empty" in capsys.readouterr().err
    (repo / "x").write_text("x")
    assert main(["--root", str(repo), "--registry", REGISTRY, "--variants", "cpu"]) == 2
    assert "uncommitted change(s)" in capsys.readouterr().err


def test_a_release_split_over_runners_pins_what_one_release_would(repo, tmp_path_factory):
    """The workflow's matrix: each variant pushed on its own runner and recorded, then one pin of all."""
    from tools.release.publish import pin, push_variants, read_pushed, write_pushed

    whole = tmp_path_factory.mktemp("whole")
    shutil.copytree(repo, whole, dirs_exist_ok=True)
    release(whole, REGISTRY, _variants("cpu", "sm90"), FakeRegistry(), out=io.StringIO())

    fake = FakeRegistry()
    records = []
    for name in ("cpu", "sm90"):  # one runner each: the checkout stays clean, the record goes outside it
        record = tmp_path_factory.mktemp("runner") / f"pushed-{name}.json"
        write_pushed(record, push_variants(repo, REGISTRY, _variants(name), fake))
        records.append(record)
    assert _git(repo, "status", "--porcelain") == ""
    fake.calls.clear()
    pin(repo, read_pushed(records, fake), out=io.StringIO())
    # the pinning runner read every tag back from the registry again, and built nothing
    assert {kind for kind, _ in fake.calls} == {"read-back"}
    assert _snapshot(repo) == _snapshot(whole)


def test_pinning_refuses_a_moved_tag_a_repeated_variant_and_a_file_that_is_no_record(repo, tmp_path):
    from tools.release.publish import push_variants, read_pushed, write_pushed

    fake = FakeRegistry()
    record = tmp_path / "pushed-cpu.json"
    write_pushed(record, push_variants(repo, REGISTRY, _variants("cpu"), fake))
    with pytest.raises(TRMError, match="is recorded twice"):
        read_pushed([record, record], fake)
    not_a_record = tmp_path / "release.log"
    not_a_record.write_text("cpu\tregistry.example.com/team/trm@sha256:…\n")
    with pytest.raises(TRMError, match=r"release.log: not a record of pushed images .*--pushed-out FILE"):
        read_pushed([not_a_record], fake)
    fake.tampered = True  # another push moved the tag between the push and the pin
    with pytest.raises(TRMError, match="another push to that tag raced this one"):
        read_pushed([record], fake)
    assert not (repo / "docker" / "images.lock.json").exists()


def test_the_cli_needs_a_record_file_for_push_only_and_refuses_both_modes(repo, capsys):
    assert main(["--root", str(repo), "--registry", REGISTRY, "--variants", "cpu", "--push-only"]) == 2
    assert "add --pushed-out FILE" in capsys.readouterr().err
    args = ["--root", str(repo), "--push-only", "--pushed-out", "x.json", "--pin-from", "y.json"]
    assert main(args) == 2
    assert "give one of them" in capsys.readouterr().err
