"""`python -m trm kaggle publish`: the staged folder, Kaggle's metadata, the dry run and the client calls.

The calls are checked here against a recording stand-in of KaggleApi (fast); the real client against a
local endpoint is tests/kaggle/test_publish_client.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.kaggle.bundles import OWN_WHEEL, fake_bundle
from trm.commands import main
from trm.errors import TRMError
from trm.exit_codes import CONFIG_ERROR, PUBLISH_FAILED
from trm.io import sha256_file
from trm.kaggle import bundle as B
from trm.kaggle import metadata as M
from trm.kaggle.notebook import KernelSettings, code_cells
from trm.kaggle.publish import (
    Publisher,
    PublishOptions,
    create_call,
    dry_run_lines,
    push_call,
    stage,
    version_call,
)
from trm.safe_remove import MARKER

OPTS = PublishOptions(owner="alice")


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    return fake_bundle(tmp_path / "bundle")


def test_the_staged_folder_holds_the_bundle_and_metadata_kaggle_documents(bundle: Path) -> None:
    plan = stage(bundle, None, OPTS)
    out = bundle.with_name("bundle-publish")
    assert plan.folder == out and json.loads((out / MARKER).read_text())["kind"] == "kaggle-publish"
    assert (plan.weights, plan.wheels, plan.kernel) == (
        "alice/trm-arc-weights",
        "alice/trm-arc-wheels",
        "alice/trm-arc-submission",
    )
    weights = sorted(p.name for p in (out / "weights").iterdir())
    assert weights == sorted(
        ["README.md", "config.json", "dataset-metadata.json", "identifiers.json", "manifest.json", "model.pt"]
    )
    assert sorted(p.name for p in (out / "wheels").iterdir()) == sorted(
        [
            "dataset-metadata.json",
            "requirements.txt",
            OWN_WHEEL,
            "numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl",
        ]
    )
    for name in ("model.pt", "config.json", "manifest.json"):  # the bundle's bytes (hard links here)
        assert sha256_file(out / "weights" / name) == sha256_file(bundle / name)
    assert (out / "weights" / "model.pt").stat().st_ino == (bundle / "model.pt").stat().st_ino

    for sub in ("weights", "wheels"):
        meta = json.loads((out / sub / M.DATASET_METADATA).read_text())
        assert M.dataset_problems(meta, creating=True) == []
        assert meta["id"] == f"alice/trm-arc-{sub}" and meta["licenses"] == [{"name": "other"}]
    kernel = json.loads((out / "kernel" / M.KERNEL_METADATA).read_text())
    assert M.kernel_problems(kernel, out / "kernel") == []
    assert (
        kernel["enable_internet"] == "false"
        and kernel["enable_gpu"] == "true"
        and kernel["is_private"] == "true"
    )
    assert kernel["dataset_sources"] == ["alice/trm-arc-weights", "alice/trm-arc-wheels"]
    assert kernel["competition_sources"] == ["arc-prize-2025"]
    assert (kernel["language"], kernel["kernel_type"], kernel["title"]) == (
        "python",
        "notebook",
        "trm-arc-submission",
    )
    notebook = json.loads((out / "kernel" / kernel["code_file"]).read_text())
    assert notebook["nbformat"] == 4
    sources = ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]
    for source in sources:
        compile(source, "cell", "exec")
    assert "WEIGHTS_DATASET = 'alice/trm-arc-weights'" in sources[0] and "ADAPT_MINUTES = 300" in sources[0]
    assert '"--no-index"' in sources[2] and '"infer"' in sources[3]
    assert "RANKS = 'auto'" in sources[0] and '"--ranks", RANKS' in sources[3]  # every GPU the kernel has


def test_the_notebook_finds_what_is_attached_by_content_wherever_it_is_mounted(
    tmp_path: Path, bundle: Path
) -> None:
    root = tmp_path / "input"
    (root / "datasets" / "alice" / "trm-arc-wheels").mkdir(parents=True)
    (root / "datasets" / "alice" / "trm-arc-wheels" / OWN_WHEEL).write_bytes(b"")
    weights = root / "some" / "mount" / "trm-arc-weights"
    weights.mkdir(parents=True)
    for name in ("config.json", "manifest.json"):
        (weights / name).write_bytes((bundle / name).read_bytes())
    decoy = root / "other-dataset"  # a manifest.json that is not a bundle
    decoy.mkdir()
    (decoy / "manifest.json").write_text("{}")
    (decoy / "config.json").write_text('{"format": "something else"}')
    (root / "arc-prize-2025").mkdir()
    (root / "arc-prize-2025" / "arc-agi_test_challenges.json").write_text("{}")
    settings, locate, _, _ = code_cells(KernelSettings("alice/trm-arc-weights", "alice/trm-arc-wheels"))
    scope: dict[str, Any] = {}
    exec(settings, scope)
    scope["INPUT"] = str(root)
    exec(locate, scope)
    assert scope["WHEELS"] == str(root / "datasets" / "alice" / "trm-arc-wheels")
    assert scope["WEIGHTS"] == str(weights)
    assert scope["CHALLENGES"] == str(root / "arc-prize-2025" / "arc-agi_test_challenges.json")
    (root / "arc-prize-2025" / "arc-agi_test_challenges.json").unlink()
    with pytest.raises(SystemExit, match=r"nothing of arc-agi_test_challenges\.json"):
        exec(locate, scope)


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda m: m.update(title="short"), "`title` 'short' must be a string of 6-50 characters"),
        (lambda m: m.update(id="alice/abc"), "`id's slug` 'abc' must be a string of 6-50 characters"),
        (lambda m: m.update(id="no-owner"), "`id` 'no-owner' is not `owner/slug`"),
        (lambda m: m.update(subtitle="too short"), "`subtitle` 'too short' must be a string of 20-80"),
        (lambda m: m.update(licenses=[{"name": "MIT"}]), "licence 'MIT' is not one of Kaggle's"),
        (lambda m: m.update(licenses=[{"name": "other"}, {"name": "CC0-1.0"}]), "exactly one entry"),
        (lambda m: m.update(isPrivate=True), "unknown key `isPrivate`"),
        (lambda m: m.update(expectedUpdateFrequency="sometimes"), "`expectedUpdateFrequency` must be one of"),
    ],
)
def test_dataset_metadata_outside_kaggles_documented_format_is_named(edit, said: str) -> None:
    meta = M.dataset_metadata("alice/trm-arc-weights", "trm-arc weights", "x" * 30, "text", "other")
    assert M.dataset_problems(meta, creating=True) == []
    edit(meta)
    problems = M.dataset_problems(meta, creating=True)
    assert len(problems) == 1 and said in problems[0]


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda m: m.update(language="julia"), "`language` must be one of python, r, rmarkdown"),
        (lambda m: m.update(kernel_type="app"), "`kernel_type` must be one of script, notebook"),
        (lambda m: m.update(enable_internet="no"), "`enable_internet` must be true or false"),
        (lambda m: m.update(code_file="missing.ipynb"), "`code_file` 'missing.ipynb': no such file"),
        (
            lambda m: m.update(title="My Notebook"),
            "gives the slug 'my-notebook', not the id's 'trm-arc-submission'",
        ),
        (
            lambda m: m.update(dataset_sources=["just-a-slug"]),
            "`dataset_sources` 'just-a-slug' is not `owner/slug`",
        ),
        (lambda m: m.update(enable_gpus=True), "unknown key `enable_gpus`"),
    ],
)
def test_kernel_metadata_outside_kaggles_documented_format_is_named(tmp_path: Path, edit, said: str) -> None:
    (tmp_path / "trm-arc-submission.ipynb").write_text("{}")
    meta = M.kernel_metadata(
        "alice/trm-arc-submission", "trm-arc-submission.ipynb", ["alice/d-weights"], "arc-prize-2025",
        private=True, machine_shape=None,
    )  # fmt: skip
    assert M.kernel_problems(meta, tmp_path) == []
    edit(meta)
    problems = M.kernel_problems(meta, tmp_path)
    assert len(problems) == 1 and said in problems[0]


def test_dry_run_stages_and_prints_the_calls_without_the_client_or_credentials(
    bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "kaggle", None)  # importing the client would fail
    out = tmp_path / "pub"
    argv = ["kaggle", "publish", str(bundle), "--owner", "alice", "--out", str(out), "--dry-run", "--quiet"]
    assert main(argv) == 0
    said = capsys.readouterr().out
    assert "KaggleApi.dataset_status('alice/trm-arc-weights'): when alice/trm-arc-weights exists, " in said
    assert (
        f"KaggleApi.dataset_create_new(folder='{out}/weights', public=False, quiet=True, dir_mode='skip')"
        in said
    )
    notes = "trm-stack 0.1.0: step_42 step 42"
    assert (
        f"KaggleApi.dataset_create_version(folder='{out}/wheels', version_notes={notes!r}, quiet=True, "
        "dir_mode='skip')" in said
    )
    assert f"KaggleApi.kernels_push(folder='{out}/kernel')" in said
    assert f"kaggle kernels push -p {out}/kernel" in said
    assert (out / "kernel" / M.KERNEL_METADATA).is_file()


class RecordingApi:
    """Stands in for KaggleApi: records each call, answers like the client (404 for a missing dataset)."""

    def __init__(
        self, existing: set[str], statuses: list[str] | None = None, push: dict | None = None
    ) -> None:
        self.existing, self.calls = set(existing), []
        self.statuses = list(statuses or [])
        self.push = push or {}

    def dataset_status(self, ref: str) -> str:
        self.calls.append(("dataset_status", {"ref": ref}))
        if ref not in self.existing:
            raise _http_error(404)
        return self.statuses.pop(0) if self.statuses else "ready"

    def dataset_create_new(self, **kwargs: Any) -> Any:
        self.calls.append(("dataset_create_new", kwargs))
        return SimpleNamespace(status="ok", error=None, url="https://kaggle/new")

    def dataset_create_version(self, **kwargs: Any) -> Any:
        self.calls.append(("dataset_create_version", kwargs))
        return SimpleNamespace(status="ok", error=None, url="https://kaggle/version")

    def kernels_push(self, **kwargs: Any) -> Any:
        self.calls.append(("kernels_push", kwargs))
        return SimpleNamespace(
            **{"error": None, "url": "https://kaggle/code", "version_number": 3, **self.push}
        )


def _http_error(status: int) -> Exception:
    err = RuntimeError(f"HTTP {status}")
    err.response = SimpleNamespace(status_code=status)  # type: ignore[attr-defined]
    return err


def test_missing_datasets_are_created_existing_ones_versioned_then_the_kernel_pushed(bundle: Path) -> None:
    plan = stage(bundle, None, OPTS)
    api = RecordingApi(existing={plan.wheels})
    api.dataset_create_new = _creating(api, plan.weights)  # type: ignore[method-assign]
    said: list[str] = []
    Publisher(api, plan, quiet=True, say=said.append, sleep=lambda s: None).run(wait_minutes=1)
    weights, wheels = (f for _, f in plan.dataset_folders())
    assert api.calls == [
        ("dataset_status", {"ref": plan.weights}),
        create_call(plan, weights, True),
        ("dataset_status", {"ref": plan.wheels}),
        version_call(plan, wheels, True),
        ("dataset_status", {"ref": plan.weights}),
        ("dataset_status", {"ref": plan.wheels}),
        push_call(plan),
    ]
    assert said[-1] == "pushed kernel alice/trm-arc-submission (version 3): https://kaggle/code"
    shown = "\n".join(dry_run_lines(plan, 1, True))  # the dry run shows these very calls
    assert "dataset_create_new(folder=" + repr(str(weights)) in shown and "kernels_push(folder=" in shown


def _creating(api: RecordingApi, ref: str):
    def create(**kwargs: Any) -> Any:
        api.calls.append(("dataset_create_new", kwargs))
        api.existing.add(ref)
        return SimpleNamespace(status="ok", error=None, url="https://kaggle/new")

    return create


def test_a_dataset_still_processing_at_the_deadline_stops_before_the_kernel_with_its_command(
    bundle: Path,
) -> None:
    plan = stage(bundle, None, OPTS)
    api = RecordingApi(existing={plan.weights, plan.wheels}, statuses=["pending"] * 100)
    clock = iter(range(0, 10_000, 30))
    said: list[str] = []
    publisher = Publisher(api, plan, say=said.append, sleep=lambda s: None, clock=lambda: next(clock))
    with pytest.raises(TRMError) as err:
        publisher.run(wait_minutes=2)
    assert err.value.exit_code == PUBLISH_FAILED
    # the wait says what it waits for and how long, once
    waiting = [line for line in said if line.startswith("waiting for Kaggle")]
    assert waiting == [
        f"waiting for Kaggle to process dataset {plan.weights}, {plan.wheels}: checked every 10 s, at most "
        "2 min (--wait-minutes)"
    ]
    assert f"kaggle kernels push -p {plan.kernel_folder}" in str(err.value)
    assert "kernels_push" not in [name for name, _ in api.calls]


@pytest.mark.parametrize(
    ("status", "code"), [(401, CONFIG_ERROR), (403, CONFIG_ERROR), (500, PUBLISH_FAILED)]
)
def test_an_http_error_is_one_line_with_its_exit_code(bundle: Path, status: int, code: int) -> None:
    plan = stage(bundle, None, OPTS)
    api = RecordingApi(existing=set())

    def refuse(**kwargs: Any) -> Any:
        raise _http_error(status)

    api.dataset_create_new = refuse  # type: ignore[method-assign]
    with pytest.raises(TRMError) as err:
        Publisher(api, plan, say=lambda s: None).run(wait_minutes=1)
    assert err.value.exit_code == code and f"HTTP {status}" in str(err.value)
    assert "create dataset alice/trm-arc-weights" in str(err.value)


def test_a_kernel_kaggle_cannot_attach_its_datasets_to_is_a_failure(bundle: Path) -> None:
    plan = stage(bundle, None, OPTS)
    api = RecordingApi(existing={plan.weights, plan.wheels}, push={"invalid_dataset_sources": [plan.wheels]})
    with pytest.raises(TRMError, match="could not attach alice/trm-arc-wheels") as err:
        Publisher(api, plan, say=lambda s: None).run(wait_minutes=1)
    assert err.value.exit_code == PUBLISH_FAILED


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--slug", "Bad Slug"], "--slug 'Bad Slug': use 3-39 lowercase letters"),
        (["--owner", "a/b"], "--owner 'a/b': pass your Kaggle user name"),
        (["--adapt-minutes", "600"], "--adapt-minutes 600.0: must be positive and below --max-minutes 600"),
        (["--license", "MIT"], "--license 'MIT': use one of Kaggle's"),
        (["--max-minutes", "nan"], "--max-minutes nan: must be a positive number"),
    ],
)
def test_bad_flags_are_one_line_exit_2_and_nothing_is_written(
    bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture, flags: list[str], said: str
) -> None:
    out = tmp_path / "pub"
    argv = ["kaggle", "publish", str(bundle), "--owner", "alice", "--out", str(out), *flags]
    assert main(argv) == 2  # not --dry-run: the flags are refused before the client is even loaded
    err = capsys.readouterr().err.strip()
    assert said in err and len(err.splitlines()) == 1 and not out.exists()


def test_a_bundle_without_wheels_a_damaged_one_and_a_foreign_out_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TRMError, match="no wheelhouse"):
        stage(fake_bundle(tmp_path / "no-wheels", wheels=False), tmp_path / "a", OPTS)
    damaged = fake_bundle(tmp_path / "damaged")
    (damaged / "wheels" / OWN_WHEEL).write_bytes(b"changed")
    with pytest.raises(TRMError, match="sha256 differs"):
        stage(damaged, tmp_path / "b", OPTS)
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(TRMError, match="did not write"):
        stage(fake_bundle(tmp_path / "ok"), foreign, OPTS, overwrite=True)
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_token_in_the_wheelhouse_requirements_is_refused_naming_the_file(tmp_path: Path) -> None:
    """The scan skips the .whl files only: a private index's token pasted into the wheelhouse's
    requirements.txt (listed in the manifest, so the bundle verifies) stops the publish."""
    token = "hf_" + "Q7x" * 12
    bundle = fake_bundle(tmp_path / "bundle")
    (bundle / B.WHEELS / "requirements.txt").write_text(
        f"--extra-index-url https://__token__:{token}@pypi.example.org/simple\nnumpy==2.4.6\n"
    )
    manifest = {"format": B.FORMAT, "format_version": B.FORMAT_VERSION, "files": B.file_entries(bundle)}
    (bundle / B.MANIFEST).write_text(json.dumps(manifest))
    out = tmp_path / "out"
    with pytest.raises(TRMError, match=r"wheels/requirements\.txt: line 1") as err:
        stage(bundle, out, OPTS)
    assert token not in str(err.value) and not out.exists()


def test_package_scans_the_wheelhouse_files_it_writes_but_not_the_wheels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`package kaggle`: a token in the wheelhouse's requirements.txt stops the bundle (nothing is
    published); a wheel's bytes are not read."""
    import torch

    from trm.kaggle import package, wheelhouse

    token = "hf_" + "Z9k" * 12
    requirements = {"text": "numpy==2.4.6\n"}

    def fake_wheelhouse(dest: Path, **_: object) -> dict[str, str]:
        dest.mkdir(parents=True, exist_ok=True)
        (dest / OWN_WHEEL).write_bytes(b"PK" + f"ghp_{'a' * 36}".encode())  # third-party code: not read
        (dest / "requirements.txt").write_text(requirements["text"])
        return {"numpy": "2.4.6"}

    monkeypatch.setattr(wheelhouse, "build_wheelhouse", fake_wheelhouse)
    config = json.loads((fake_bundle(tmp_path / "src") / B.CONFIG).read_text())
    weights = {"w": torch.zeros(2)}
    opts = package.WheelOptions(progress=False)
    package._write_bundle(tmp_path / "clean", weights, config, None, opts, overwrite=False)
    assert (tmp_path / "clean" / B.WHEELS / OWN_WHEEL).is_file()
    requirements["text"] = f"--extra-index-url https://__token__:{token}@pypi.example.org/simple\n"
    with pytest.raises(TRMError, match=r"wheels/requirements\.txt: line 1") as err:
        package._write_bundle(tmp_path / "leaky", weights, config, None, opts, overwrite=False)
    assert token not in str(err.value) and not (tmp_path / "leaky").exists()
