"""`python -m trm publish-checkpoint`, tested at the huggingface_hub boundary: HfApi's create_repo and
upload_folder are replaced by recorders, so nothing reaches the network; the card is parsed back with
huggingface_hub's own ModelCard."""

from __future__ import annotations

import fnmatch
import json
import logging
from pathlib import Path

import pytest

from tests.hub.conftest import TrainedRun
from trm.commands import main
from trm.io import sha256_file
from trm.safe_remove import MARKER
from trm.training.checkpointing.layout import (
    MANIFEST,
    STATE,
    check_folder,
    find_complete,
    load_torch,
    save_torch,
)

# A token-shaped value built at run time (a literal one would trip the repository's secret scan).
PLANTED = "hf_" + "".join(chr(ord("a") + (7 * i) % 26) for i in range(34))
EXPECTED_FILES = {
    "README.md",
    "config.json",
    "trm_provenance.json",
    "checkpoint/COMPLETE",
    "checkpoint/manifest.json",
    "checkpoint/state.pt",
    "dataset/manifest.json",
    "dataset/identifiers.json",
    "dataset/test/dataset.json",
}


class Recorder:
    """Stands in for the Hub: records create_repo's arguments and the files upload_folder would send."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.created: list[dict] = []
        self.uploaded: dict[str, bytes] = {}
        self.upload_args: dict = {}

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        recorder = self

        def create_repo(self, repo_id, **kwargs):
            recorder.created.append({"repo_id": repo_id, **kwargs})

        def upload_folder(self, *, repo_id, folder_path, **kwargs):
            recorder.upload_args = {"repo_id": repo_id, **kwargs}
            folder = Path(folder_path)
            ignored = kwargs.get("ignore_patterns") or []  # fnmatch on the relative path, as the Hub library
            recorder.uploaded = {
                rel: p.read_bytes()
                for p in folder.rglob("*")
                if p.is_file()
                and not any(fnmatch.fnmatch(rel := p.relative_to(folder).as_posix(), pat) for pat in ignored)
            }
            info = type("CommitInfo", (), {})()
            info.oid = "a" * 40
            info.commit_url = f"https://huggingface.co/{repo_id}/commit/{'a' * 40}"
            return info

        from huggingface_hub import HfApi  # the hub extra: imported here so the suite collects without it

        monkeypatch.setattr(HfApi, "create_repo", create_repo)
        monkeypatch.setattr(HfApi, "upload_folder", upload_folder)


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Recorder:
    monkeypatch.setenv("HF_TOKEN", PLANTED)
    recorder = Recorder(tmp_path)
    recorder.install(monkeypatch)
    return recorder


def test_best_checkpoint_is_uploaded_with_provenance_and_a_card_the_hub_parses(
    trained: TrainedRun, hub: Recorder, capsys: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    argv = ["publish-checkpoint", str(trained.run_dir), "--repo", "me/trm-tiny", "--best", "--private"]
    assert main(argv) == 0
    out = capsys.readouterr()

    assert hub.created == [
        {"repo_id": "me/trm-tiny", "repo_type": "model", "private": True, "exist_ok": True}
    ]
    assert hub.upload_args["repo_id"] == "me/trm-tiny" and "token" not in hub.upload_args
    assert set(hub.uploaded) == EXPECTED_FILES
    # The token (HF_TOKEN) is the library's business: in no file, no output, no log record.
    assert not any(PLANTED.encode() in data for data in hub.uploaded.values())
    assert PLANTED not in out.out + out.err + caplog.text
    assert f"hf://me/trm-tiny@{'a' * 40}" in out.out

    best = find_complete(trained.run_dir)[-1]
    provenance = json.loads(hub.uploaded["trm_provenance.json"])
    assert provenance["step"] == best.step
    assert provenance["selected"] == {
        "by": "best",
        "metric": "ARC/pass@2",
        "value": best.manifest["eval_metrics"]["ARC/pass@2"],
    }
    assert provenance["eval_metrics"] == best.manifest["eval_metrics"]
    assert provenance["dataset_fingerprint"] == best.manifest["dataset_fingerprint"]
    [dataset] = provenance["datasets"]
    identifiers = json.loads((trained.dataset / "identifiers.json").read_text())
    assert dataset["identifiers"]["count"] == len(identifiers)
    assert hub.uploaded["dataset/identifiers.json"] == (trained.dataset / "identifiers.json").read_bytes()
    assert provenance["environment"]["git_sha"] == best.manifest["git_sha"]
    assert provenance["environment"]["torch"] == best.manifest["torch_version"]
    assert provenance["hardware_and_cost"] is None  # not started by the launcher

    from huggingface_hub import ModelCard

    card = ModelCard(hub.uploaded["README.md"].decode())
    assert card.data.license == "mit"
    assert card.data.library_name == "trm-stack"
    assert card.data.datasets == ["arc-agi/evaluation", "arc-agi/training"]
    assert "ARC/pass@2" in card.data.metrics and "trm" in card.data.tags
    assert "python -m trm.eval hf://me/trm-tiny data_paths='[data/ds]'" in card.text
    assert "--subsets training evaluation --test-set-name evaluation --seed 42 --num-aug 3" in card.text
    assert json.loads(hub.uploaded["config.json"])["data_paths"] == [str(trained.dataset)]


def test_uploaded_checkpoint_is_complete_and_holds_no_optimizer_state(
    trained: TrainedRun, hub: Recorder, tmp_path: Path
) -> None:
    out = tmp_path / "staged"
    argv = [
        "publish-checkpoint",
        str(trained.run_dir),
        "--repo",
        "me/trm-tiny",
        "--dry-run",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    assert hub.created == [] and hub.uploaded == {}  # a dry run contacts nothing
    staged = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert staged == EXPECTED_FILES | {MARKER}  # the creation marker stays local (never uploaded)
    manifest = check_folder(out / "checkpoint", verify_hashes=True)
    original = find_complete(trained.run_dir)[-1]
    assert manifest["dataset_fingerprint"] == original.manifest["dataset_fingerprint"]
    state = load_torch(out / "checkpoint" / STATE)
    assert set(state) == {"model", "ema", "config", "progress"}
    full = load_torch(original.path / STATE)
    assert all((state["model"][k] == v).all() for k, v in full["model"].items())


def test_launcher_records_give_hardware_wall_clock_and_cost(
    trained: TrainedRun, hub: Recorder, tmp_path: Path
) -> None:
    handoff = tmp_path / "handoff.json"
    handoff.write_text(
        json.dumps(
            {
                "run_name": "r",
                "gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559}] * 8,
                "world_size": 8,
                "wall_time": {"wall_seconds": 7200.0},
                "cost_estimate_usd": 41.5,
            }
        )
    )
    out = tmp_path / "staged"
    argv = ["publish-checkpoint", str(trained.run_dir), "--repo", "me/t", "--dry-run", "--out", str(out)]
    assert main([*argv, "--handoff", str(handoff)]) == 0
    provenance = json.loads((out / "trm_provenance.json").read_text())
    assert provenance["hardware_and_cost"]["cost_estimate_usd"] == 41.5
    card = (out / "README.md").read_text()
    assert "8 × NVIDIA H100 80GB HBM3" in card and "2.00 h" in card and "$41.50" in card


def test_a_dataset_other_than_the_trained_one_is_refused(
    trained: TrainedRun, hub: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from tests.hub.conftest import TINY_BUILD
    from trm.data.build_arc import build_arc_dataset

    other = tmp_path / "other"
    build_arc_dataset(other, num_aug=1, **TINY_BUILD)
    argv = ["publish-checkpoint", str(trained.run_dir), "--repo", "me/t", "--data-path", str(other)]
    assert main(argv) == 2
    assert "the checkpoint was trained on" in capsys.readouterr().err
    assert hub.created == []


def test_a_missing_step_names_the_complete_ones(
    trained: TrainedRun, hub: Recorder, capsys: pytest.CaptureFixture
) -> None:
    assert main(["publish-checkpoint", str(trained.run_dir), "--repo", "me/t", "--step", "999"]) == 2
    steps = ", ".join(str(i.step) for i in find_complete(trained.run_dir))
    assert f"no complete step_999/ (complete steps: {steps})" in capsys.readouterr().err
    assert main(["publish-checkpoint", str(trained.run_dir), "--repo", "not-a-repo", "--dry-run"]) == 2
    assert "not a Hub reference" in capsys.readouterr().err


def test_the_runtime_lock_is_recorded_only_from_the_commit_that_trained(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from trm import gitinfo
    from trm.hub.publish import runtime_lock
    from trm.io import sha256_file

    manifest = {"git_sha": "c0ffee", "torch_version": "2.13.0+cpu"}
    monkeypatch.setattr(gitinfo, "checkout_sha", lambda root: "c0ffee")
    lock = gitinfo.PACKAGE_ROOT / "docker" / "requirements" / "runtime-cpu.txt"
    assert runtime_lock(manifest) == {
        "file": "docker/requirements/runtime-cpu.txt",
        "sha256": sha256_file(lock),
    }
    monkeypatch.setattr(gitinfo, "checkout_sha", lambda root: "another-commit")
    assert runtime_lock(manifest) is None
    assert runtime_lock({**manifest, "git_sha": "c0ffee-dirty"}) is None


def _copy_run(trained: TrainedRun, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the trained run (so it can be damaged) and its newest step folder."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(trained.run_dir, run)
    return run, find_complete(run)[-1].path


def _rewrite_state(step: Path, change) -> None:
    """Change state.pt through `change(state)` and record its new size and sha256 (a consistent checkpoint)."""
    import torch

    state = torch.load(step / STATE, map_location="cpu", weights_only=False)  # not memory-mapped: rewritten
    change(state)
    save_torch(state, step / STATE)
    manifest = json.loads((step / MANIFEST).read_text())
    manifest["files"][STATE] = {"bytes": (step / STATE).stat().st_size, "sha256": sha256_file(step / STATE)}
    (step / MANIFEST).write_text(json.dumps(manifest))


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_dry_run_into_the_run_directory_or_a_file_is_refused_and_deletes_nothing(
    trained: TrainedRun, hub: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run, _step = _copy_run(trained, tmp_path)
    before = _tree(run)
    argv = ["publish-checkpoint", str(run), "--repo", "me/t", "--dry-run", "--out"]
    assert main([*argv, str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        "refusing to replace it" in err and "which this command reads" in err and len(err.splitlines()) == 1
    )
    assert _tree(run) == before  # every step_N is still there, byte for byte
    assert main([*argv, str(run.parent)]) == 2  # a folder that holds the run
    assert _tree(run) == before
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    assert main([*argv, str(a_file)]) == 2
    assert "it is a file, not a folder" in capsys.readouterr().err
    assert a_file.read_text() == "mine"
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "keep.md").write_text("mine")
    assert main([*argv, str(foreign)]) == 2
    assert "did not write" in capsys.readouterr().err and (foreign / "keep.md").read_text() == "mine"
    staged = tmp_path / "staged"
    assert main([*argv, str(staged)]) == 0 and main([*argv, str(staged)]) == 0  # its own output: replaced
    assert hub.created == []


@pytest.mark.parametrize("damage", ["bit flip", "zeroed header", "missing file"])
def test_a_damaged_checkpoint_is_never_published(
    trained: TrainedRun, hub: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture, damage: str
) -> None:
    run, step = _copy_run(trained, tmp_path)
    state = step / STATE
    data = bytearray(state.read_bytes())
    if damage == "bit flip":
        data[len(data) // 2] ^= 0x01  # inside the tensor data: torch still loads it
        state.write_bytes(bytes(data))
    elif damage == "zeroed header":
        state.write_bytes(bytes(64) + bytes(data[64:]))
    else:
        state.unlink()
    out = tmp_path / "staged"
    argv = ["publish-checkpoint", str(run), "--repo", "me/t", "--step", step.name.split("_")[1]]
    assert main([*argv, "--dry-run", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    if damage == "missing file":  # discovery already skips it as torn (warning: state.pt is missing)
        assert "no complete" in err
    else:
        assert f"checkpoint {step} is damaged or incomplete (state.pt does not match its sha256" in err
    assert not out.exists() and [p.name for p in tmp_path.iterdir() if "staged" in p.name] == []
    assert main(argv) == 2
    assert hub.created == [] and hub.uploaded == {}


def test_a_token_in_the_runs_config_stops_the_publish_and_is_never_printed(
    trained: TrainedRun, hub: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run, step = _copy_run(trained, tmp_path)
    token = "hf_" + "".join(chr(ord("A") + (5 * i) % 26) for i in range(34))
    _rewrite_state(step, lambda state: state["config"].update(project_name=token))
    out = tmp_path / "staged"
    assert main(["publish-checkpoint", str(run), "--repo", "me/t", "--dry-run", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert "config.json: key project_name (Hugging Face Token)" in captured.err
    assert "checkpoint/state.pt: binary content (Hugging Face Token)" in captured.err
    assert token not in captured.err + captured.out and not out.exists()
    assert main(["publish-checkpoint", str(run), "--repo", "me/t"]) == 2
    assert hub.created == [] and hub.uploaded == {}


def test_a_dataset_file_changed_since_its_build_is_never_published(
    trained: TrainedRun, hub: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    import shutil

    dataset = tmp_path / "ds"
    shutil.copytree(trained.dataset, dataset)
    names = json.loads((dataset / "identifiers.json").read_text())
    names[1], names[2] = names[2], names[1]  # rows named in another order: same size, valid JSON
    (dataset / "identifiers.json").write_text(json.dumps(names))
    out = tmp_path / "staged"
    argv = ["publish-checkpoint", str(trained.run_dir), "--repo", "me/t", "--data-path", str(dataset)]
    for extra in ([], ["--dry-run", "--out", str(out)]):
        assert main([*argv, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert f"dataset {dataset}: {dataset / 'identifiers.json'}: sha256 differs from the manifest" in err
        assert len(err.splitlines()) == 1
    assert hub.created == [] and not out.exists()
