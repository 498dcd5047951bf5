"""`hf://` checkpoints for trm.eval, `package kaggle` and `infer`, read from a local Hub cache laid out as
huggingface_hub lays it out, with HF_HUB_OFFLINE=1: our published layout and upstream's step_N layout."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from tests.helpers import TINY_ARCH
from tests.hub.conftest import TINY_BUILD, TrainedRun
from tests.hub.hubcache import add_commit, folder_files, offline_cache
from trm import eval as trm_eval
from trm.commands import main
from trm.data.arc_source import DEFAULT_PREFIX
from trm.errors import TRMError
from trm.hub.publish import stage
from trm.hub.ref import parse, resolve
from trm.kaggle import bundle as B
from trm.kaggle.infer import run_inference
from trm.kaggle.package import package_kaggle
from trm.model.upstream import to_upstream_state_dict
from trm.training.checkpointing.layout import STATE, find_complete, load_torch

REPO = "me/trm-tiny"
UPSTREAM_REPO = "prize-team/trm_verification"


@pytest.fixture(scope="module")
def published(trained: TrainedRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder publish-checkpoint uploads for the trained run."""
    out = tmp_path_factory.mktemp("published") / "repo"
    stage(trained.run_dir, out, repo_id=REPO)
    return out


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    folder = tmp_path / "hf-cache"
    offline_cache(monkeypatch, folder)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return folder


def metrics_of(folder: Path) -> dict:
    [path] = folder.rglob("metrics.json")
    return json.loads(path.read_text())


def test_our_layout_evaluates_like_the_local_checkpoint_with_the_commit_recorded(
    trained: TrainedRun, published: Path, cache: Path, tmp_path: Path
) -> None:
    commit = add_commit(cache, REPO, folder_files(published))
    data = f"data_paths=[{trained.dataset}]"
    local = find_complete(trained.run_dir)[-1].path
    assert trm_eval.main([str(local), data, "--output-dir", str(tmp_path / "local")]) == 0
    assert trm_eval.main([f"hf://{REPO}", data, "--output-dir", str(tmp_path / "hub")]) == 0
    from_hub, from_disk = metrics_of(tmp_path / "hub"), metrics_of(tmp_path / "local")
    assert from_hub["source"] == {
        "hub_repo": REPO,
        "revision": "main",
        "commit": commit,
        "path_in_repo": "checkpoint",
        "layout": "trm",
        "reference": f"hf://{REPO}@{commit}",
    }
    assert "source" not in from_disk
    assert {k: v for k, v in from_hub.items() if k != "source"} == from_disk


def test_package_kaggle_from_the_hub_ships_the_published_identifiers_and_pins_the_commit(
    trained: TrainedRun, published: Path, cache: Path, tmp_path: Path
) -> None:
    commit = add_commit(cache, REPO, folder_files(published))
    out = tmp_path / "bundle"
    hidden = trained.dataset.with_name("ds-hidden")  # the run's own dataset is not at hand on this machine
    trained.dataset.rename(hidden)
    try:
        assert main(["package", "kaggle", f"hf://{REPO}@main", str(out), "--no-wheels", "--quiet"]) == 0
    finally:
        hidden.rename(trained.dataset)
    manifest = json.loads((out / B.MANIFEST).read_text())
    assert manifest["hub_source"]["commit"] == commit and manifest["hub_source"]["revision"] == "main"
    assert B.read_config(out)["source"]["hub"]["commit"] == commit
    # identifiers.json came from the repository's dataset/ folder.
    shipped = json.loads((out / B.IDENTIFIERS).read_text())
    assert shipped == json.loads((trained.dataset / "identifiers.json").read_text())
    local = tmp_path / "local-bundle"
    package_kaggle(find_complete(trained.run_dir)[-1].path, local, wheels=False, progress=False)
    ours = torch.load(out / B.WEIGHTS, weights_only=True)
    reference = torch.load(local / B.WEIGHTS, weights_only=True)
    assert ours.keys() == reference.keys() and all(torch.equal(ours[k], reference[k]) for k in ours)


def test_a_revision_pins_a_commit_and_main_follows_the_branch(
    published: Path, cache: Path, tmp_path: Path
) -> None:
    first = add_commit(cache, REPO, folder_files(published))
    card = tmp_path / "README.md"
    card.write_text((published / "README.md").read_text() + "\nedited\n")
    second = add_commit(cache, REPO, {**folder_files(published), "README.md": card})
    assert first != second
    assert resolve(f"hf://{REPO}").source["commit"] == second
    pinned = resolve(f"hf://{REPO}@{first}")
    assert pinned.source["commit"] == first and f"/snapshots/{first}/" in str(pinned.path)


@pytest.fixture(scope="module")
def upstream_repo(trained: TrainedRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Upstream's layout: DIR/step_N (its loss head's state dict, compiled keys) and DIR/all_config.yaml."""
    folder = tmp_path_factory.mktemp("upstream") / "arc_v1_public"
    folder.mkdir()
    state = load_torch(find_complete(trained.run_dir)[-1].path / STATE)
    torch.save(to_upstream_state_dict(dict(state["model"]), compiled=True), folder / "step_3")
    arch = OmegaConf.to_container(OmegaConf.from_dotlist(TINY_ARCH))["arch"]
    arch["name"] = "recursive_reasoning.trm@TinyRecursiveReasoningModel_ACTV1"
    arch["loss"] = {"name": "losses@ACTLossHead", "loss_type": "stablemax_cross_entropy"}
    OmegaConf.save(OmegaConf.create({"arch": arch, "global_batch_size": 768}), folder / "all_config.yaml")
    (folder / "trm.py").write_text("# upstream's model source, copied next to the weights\n")
    return folder


def test_upstream_layout_takes_its_architecture_from_all_config(
    trained: TrainedRun, upstream_repo: Path, cache: Path, tmp_path: Path
) -> None:
    commit = add_commit(cache, UPSTREAM_REPO, folder_files(upstream_repo, prefix="arc_v1_public/"))
    found = resolve(f"hf://{UPSTREAM_REPO}/arc_v1_public")
    assert found.layout == "upstream" and found.path.name == "step_3"
    assert found.source["path_in_repo"] == "arc_v1_public/step_3" and found.source["commit"] == commit
    assert "arch=trm" in found.overrides and "arch.hidden_size=16" in found.overrides
    # Packaged from the Hub (no overrides given) = packaged from the local file with the run's overrides.
    out, local = tmp_path / "up", tmp_path / "up-local"
    data = f"data_paths=[{trained.dataset}]"
    argv = [
        "package",
        "kaggle",
        f"hf://{UPSTREAM_REPO}/arc_v1_public",
        str(out),
        data,
        "--no-wheels",
        "--quiet",
    ]
    assert main(argv) == 0
    package_kaggle(
        upstream_repo / "step_3", local, overrides=[*TINY_ARCH, data], wheels=False, progress=False
    )
    ours = torch.load(out / B.WEIGHTS, weights_only=True)
    reference = torch.load(local / B.WEIGHTS, weights_only=True)
    assert all(torch.equal(ours[k], reference[k]) for k in reference)
    assert json.loads((out / B.MANIFEST).read_text())["hub_source"]["layout"] == "upstream"
    # trm.eval reads it too, with the commit recorded.
    assert (
        trm_eval.main([f"hf://{UPSTREAM_REPO}/arc_v1_public", data, "--output-dir", str(tmp_path / "e")]) == 0
    )
    assert metrics_of(tmp_path / "e")["source"]["commit"] == commit


def test_the_upstream_dataset_guard_still_applies_to_hub_checkpoints(
    upstream_repo: Path, cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from trm.data.build_arc import build_arc_dataset

    add_commit(cache, UPSTREAM_REPO, folder_files(upstream_repo, prefix="arc_v1_public/"))
    other = tmp_path / "other"
    build_arc_dataset(other, num_aug=1, **TINY_BUILD)  # other identifiers than the checkpoint's table
    argv = [
        f"hf://{UPSTREAM_REPO}/arc_v1_public",
        f"data_paths=[{other}]",
        "--output-dir",
        str(tmp_path / "e"),
    ]
    assert trm_eval.main(argv) == 2
    assert "trained on other data" in capsys.readouterr().err


def test_infer_packages_a_hub_checkpoint_once_and_writes_a_submission(
    published: Path, cache: Path, tmp_path: Path
) -> None:
    commit = add_commit(cache, REPO, folder_files(published))
    challenges = json.loads(
        DEFAULT_PREFIX.with_name(DEFAULT_PREFIX.name + "_evaluation_challenges.json").read_text()
    )
    path = tmp_path / "challenges.json"
    path.write_text(json.dumps({k: challenges[k] for k in list(challenges)[:2]}))
    report = run_inference(f"hf://{REPO}", path, tmp_path / "submission.json", num_aug=2, progress=False)
    assert set(json.loads((tmp_path / "submission.json").read_text())) == set(list(challenges)[:2])
    assert any(f"hf://{REPO}@{commit}" in note for note in report.notes)
    [bundle] = (tmp_path / "xdg" / "trm-stack" / "hub-bundles").iterdir()
    assert bundle.name.endswith(f"@{commit}")
    assert json.loads((bundle / B.MANIFEST).read_text())["hub_source"]["commit"] == commit
    # A cached bundle damaged since is packaged again (the cache is trm-stack's own), not reported as a
    # damaged copy to repackage by hand; one holding a file trm-stack did not write is left as it is.
    weights = (bundle / B.WEIGHTS).read_bytes()
    (bundle / B.WEIGHTS).write_bytes(weights[:-1] + bytes([weights[-1] ^ 1]))
    run_inference(f"hf://{REPO}", path, tmp_path / "again.json", num_aug=2, progress=False)
    assert (bundle / B.WEIGHTS).read_bytes() == weights and B.read_config(bundle)["source"]["hub"]
    assert json.loads((tmp_path / "again.json").read_text()) == json.loads(
        (tmp_path / "submission.json").read_text()
    )
    (bundle / B.WEIGHTS).write_bytes(weights[:-1] + bytes([weights[-1] ^ 1]))
    (bundle / "notes.txt").write_text("mine\n")
    # named as the user of `trm infer` knows it (--weights), not as `package kaggle`'s OUT_DIR
    refusal = f"the packaged copy of --weights hf://{REPO}, cached at {bundle}: refusing to replace it: it holds notes.txt"
    with pytest.raises(TRMError, match="^" + re.escape(refusal)):
        run_inference(f"hf://{REPO}", path, tmp_path / "third.json", num_aug=2, progress=False)
    assert (bundle / "notes.txt").read_text() == "mine\n"


def test_offline_cache_miss_and_bad_references_are_clear_errors(
    cache: Path, capsys: pytest.CaptureFixture
) -> None:
    assert trm_eval.main(["hf://nobody/nothing", "--output-dir", "x"]) == 2
    assert "not in the local Hub cache" in capsys.readouterr().err
    assert main(["package", "kaggle", "hf://nobody/nothing", "out", "--best"]) == 2
    assert "--best picks a checkpoint of a local run directory" in capsys.readouterr().err
    for bad in ("hf://only-org", "hf://org/../x", "hf://org/na me"):
        with pytest.raises(TRMError, match="hf://ORG/NAME"):
            parse(bad)
    with pytest.raises(TRMError, match="empty revision"):
        parse("hf://org/name@")
    assert parse("hf://org/name/sub/dir@v1.0").subdir == "sub/dir"


def test_only_the_files_a_layout_needs_are_downloaded() -> None:
    """The allow-patterns given to snapshot_download, applied by huggingface_hub's own filter to the
    file list of a repository shaped like the ARC Prize team's (two multi-GB weight files)."""
    from huggingface_hub.utils import filter_repo_objects

    from trm.hub.ref import _patterns

    files = [
        "README.md",
        ".gitattributes",
        "arc_v1_public/all_config.yaml",
        "arc_v1_public/losses.py",
        "arc_v1_public/step_518071",
        "arc_v1_public/trm.py",
        "arc_v2_public/all_config.yaml",
        "arc_v2_public/step_723914",
    ]

    def chosen(reference: str) -> set[str]:
        return set(filter_repo_objects(files, allow_patterns=_patterns(parse(reference))))

    root = chosen(f"hf://{UPSTREAM_REPO}")
    assert root == {"README.md", "arc_v1_public/all_config.yaml", "arc_v2_public/all_config.yaml"}
    assert chosen(f"hf://{UPSTREAM_REPO}/arc_v1_public") == {
        "arc_v1_public/all_config.yaml",
        "arc_v1_public/step_518071",
    }
    assert chosen(f"hf://{UPSTREAM_REPO}/arc_v2_public/step_723914@main") == {
        "arc_v2_public/all_config.yaml",
        "arc_v2_public/step_723914",
    }
    ours = ["README.md", "config.json", "trm_provenance.json", "checkpoint/state.pt", "checkpoint/COMPLETE",
            "checkpoint/manifest.json", "dataset/identifiers.json", "dataset/test/dataset.json"]  # fmt: skip
    assert set(filter_repo_objects(ours, allow_patterns=_patterns(parse(f"hf://{REPO}")))) == set(ours)


def test_a_named_upstream_file_and_a_folder_without_a_checkpoint(
    upstream_repo: Path, cache: Path, capsys: pytest.CaptureFixture
) -> None:
    add_commit(cache, UPSTREAM_REPO, folder_files(upstream_repo, prefix="arc_v1_public/"))
    found = resolve(f"hf://{UPSTREAM_REPO}/arc_v1_public/step_3")
    assert found.layout == "upstream" and found.path.name == "step_3" and "arch=trm" in found.overrides
    with pytest.raises(TRMError, match=r"holds no checkpoint.*arc_v1_public/.*hf://ORG/NAME/DIR"):
        resolve(f"hf://{UPSTREAM_REPO}")
    with pytest.raises(TRMError, match="has no 'arc_v9'"):
        resolve(f"hf://{UPSTREAM_REPO}/arc_v9")


def _flip_a_byte(cached: Path) -> bytes:
    """Change one byte in the middle of the blob a snapshot file links to (the bytes still load); the
    original bytes."""
    blob = cached.resolve()
    original = blob.read_bytes()
    data = bytearray(original)
    data[len(data) // 2] ^= 0x01
    blob.write_bytes(bytes(data))
    return original


def test_the_cache_check_leaves_files_our_manifests_hash_to_their_readers(
    published: Path, cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A checkpoint file our manifest lists is hashed by the manifest check that loads it, not a second time
    by the cache's; the manifest itself and files no manifest lists still get the cache's check, and a
    damaged listed file is still refused before it loads."""
    from trm.hub.ref import _read_files

    ours = add_commit(cache, REPO, folder_files(published))
    folder = cache / f"models--{REPO.replace('/', '--')}" / "snapshots" / ours
    checked = {p.relative_to(folder).as_posix() for p in _read_files("trm", folder / "checkpoint", folder)}
    listed = json.loads((folder / "checkpoint" / "manifest.json").read_text())["files"]
    assert listed and not checked & {f"checkpoint/{rel}" for rel in listed}
    assert {"checkpoint/manifest.json", "dataset/identifiers.json"} <= checked
    biggest = max(listed, key=lambda rel: listed[rel]["bytes"])
    _flip_a_byte(folder / "checkpoint" / biggest)
    assert main(["package", "kaggle", f"hf://{REPO}", str(tmp_path / "b"), "--no-wheels", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and biggest in err and "Traceback" not in err
    assert not (tmp_path / "b").exists()


def test_a_changed_blob_in_the_hub_cache_is_refused_before_it_is_read(
    upstream_repo: Path, published: Path, cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Upstream's step_N (sha256-named blob) and all_config.yaml (Git-blob-named), and a file of our
    layout that no manifest of ours covers (the dataset's identifiers, shipped into bundles)."""
    config = "arc_v1_public/all_config.yaml"
    files = folder_files(upstream_repo, prefix="arc_v1_public/")
    commit = add_commit(cache, UPSTREAM_REPO, files, git_files=(config,))
    snapshot = cache / f"models--{UPSTREAM_REPO.replace('/', '--')}" / "snapshots" / commit
    reference = f"hf://{UPSTREAM_REPO}/arc_v1_public"
    assert resolve(reference).layout == "upstream"  # the intact cache loads
    original = _flip_a_byte(snapshot / "arc_v1_public/step_3")
    with pytest.raises(
        TRMError, match=r"step_3 in the Hub cache does not match its sha256 .*nothing was loaded"
    ):
        resolve(reference)
    assert main(["package", "kaggle", reference, str(tmp_path / "b"), "--no-wheels", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "step_3 in the Hub cache does not match its sha256" in err
    assert not (tmp_path / "b").exists()
    (snapshot / "arc_v1_public/step_3").resolve().write_bytes(original)  # intact again
    assert resolve(reference).layout == "upstream"
    _flip_a_byte(snapshot / config)
    with pytest.raises(TRMError, match=r"all_config\.yaml in the Hub cache does not match its Git blob id"):
        resolve(reference)
    ours = add_commit(cache, REPO, folder_files(published))
    _flip_a_byte(
        cache / f"models--{REPO.replace('/', '--')}" / "snapshots" / ours / "dataset/identifiers.json"
    )
    with pytest.raises(TRMError, match=r"identifiers\.json in the Hub cache does not match its sha256"):
        resolve(f"hf://{REPO}")
