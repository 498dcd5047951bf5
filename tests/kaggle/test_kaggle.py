"""Kaggle packaging and offline inference on a tiny real checkpoint (CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.adapt.generated import write_tasks
from tests.helpers import SEEN_TASKS, TINY_ARCH, HostSyncCounter, SmokeCheckpoint
from trm.commands import main
from trm.data.encoding import dihedral, encode_grid, parse_identifier
from trm.errors import TRMError
from trm.evaluation.arc import ARCEvaluator
from trm.evaluation.voting import FALLBACK_GRID, build_submission, grid_key, validate_submission
from trm.io import sha256_file
from trm.kaggle import bundle as B
from trm.kaggle import infer as infer_mod
from trm.kaggle.infer import run_inference
from trm.kaggle.package import package_kaggle
from trm.kaggle.testset import build_test_set
from trm.model.upstream import PUZZLE_EMB_KEY, to_upstream_state_dict
from trm.training.checkpointing.layout import STATE, load_torch


def task_ids(smoke: SmokeCheckpoint) -> list[str]:
    return list(smoke.challenges)


def test_bundle_holds_ema_weights_mean_row_and_verified_files(
    smoke: SmokeCheckpoint, bundle_dir: Path
) -> None:
    state = load_torch(smoke.checkpoint / STATE)
    weights = torch.load(bundle_dir / B.WEIGHTS, weights_only=True)
    name = next(iter(state["ema"]["shadow"]))
    assert torch.equal(weights[name], state["ema"]["shadow"][name])
    assert not torch.equal(weights[name], state["model"][name])
    trained = state["model"][PUZZLE_EMB_KEY]
    table = weights[PUZZLE_EMB_KEY]
    assert table.shape == (len(trained) + 1, trained.shape[1])
    assert torch.equal(table[:-1], trained)
    assert torch.allclose(table[-1], trained[1:].mean(dim=0))

    config = json.loads((bundle_dir / B.CONFIG).read_text())
    assert config["identifiers"] == {
        "shipped": True,
        "trained_rows": len(trained),
        "unseen_id": len(trained),
        "unseen_rule": config["identifiers"]["unseen_rule"],
    }
    assert config["arch"]["hidden_size"] == 16 and config["arch"]["num_puzzle_identifiers"] == len(table)
    assert config["loss_type"] == "stablemax_cross_entropy"
    assert config["source"]["kind"] == "trm checkpoint (EMA weights)"
    assert config["dataset"]["seq_len"] == 900 and config["dataset"]["blank_identifier_id"] == 0
    ids = json.loads((smoke.dataset / "identifiers.json").read_text())
    assert json.loads((bundle_dir / B.IDENTIFIERS).read_text()) == ids

    manifest = json.loads((bundle_dir / B.MANIFEST).read_text())
    assert set(manifest["files"]) == {B.WEIGHTS, B.CONFIG, B.IDENTIFIERS, B.README}
    for rel, meta in manifest["files"].items():
        assert sha256_file(bundle_dir / rel) == meta["sha256"]
    assert "python -m trm infer" in (bundle_dir / B.README).read_text()


def test_without_identifiers_only_blank_and_mean_rows_ship(smoke: SmokeCheckpoint) -> None:
    out = smoke.root / "bundle-small"
    package_kaggle(smoke.checkpoint, out, wheels=False, identifiers=False, progress=False)
    trained = load_torch(smoke.checkpoint / STATE)["model"][PUZZLE_EMB_KEY]
    table = torch.load(out / B.WEIGHTS, weights_only=True)[PUZZLE_EMB_KEY]
    assert table.shape == (2, trained.shape[1]) and torch.equal(table[0], trained[0])
    assert torch.allclose(table[1], trained[1:].mean(dim=0))
    config = B.read_config(out)
    assert config["identifiers"]["shipped"] is False and config["identifiers"]["unseen_id"] == 1
    assert not (out / B.IDENTIFIERS).exists()


def test_upstream_weight_file_needs_and_takes_arch_overrides(
    smoke: SmokeCheckpoint, bundle_dir: Path
) -> None:
    ours = torch.load(bundle_dir / B.WEIGHTS, weights_only=True)
    ours[PUZZLE_EMB_KEY] = ours[PUZZLE_EMB_KEY][:-1]  # the trained table, as upstream would save it
    upstream = smoke.root / "step_123"
    torch.save(to_upstream_state_dict(ours, compiled=True), upstream)
    with pytest.raises(TRMError, match="arch overrides"):
        package_kaggle(upstream, smoke.root / "up-bad", wheels=False, identifiers=False, progress=False)
    assert not (smoke.root / "up-bad").exists()

    out = smoke.root / "up"
    # Through the CLI, with the overrides after the flags.
    argv = ["package", "kaggle", str(upstream), str(out), "--no-wheels", "--quiet"]
    assert main([*argv, *TINY_ARCH, f"data_paths=[{smoke.dataset}]"]) == 0
    packaged = torch.load(out / B.WEIGHTS, weights_only=True)
    reference = torch.load(bundle_dir / B.WEIGHTS, weights_only=True)
    assert packaged.keys() == reference.keys()
    assert all(torch.equal(packaged[k], reference[k]) for k in packaged)
    config = B.read_config(out)
    assert config["source"]["kind"] == "upstream weights" and config["source"]["step"] == 123


def test_existing_out_dir_is_refused(smoke: SmokeCheckpoint, bundle_dir: Path) -> None:
    before = sha256_file(bundle_dir / B.WEIGHTS)
    with pytest.raises(TRMError, match="--overwrite"):
        package_kaggle(smoke.checkpoint, bundle_dir, wheels=False, progress=False)
    assert sha256_file(bundle_dir / B.WEIGHTS) == before


def test_seen_tasks_reuse_trained_rows_and_unseen_tasks_use_the_mean_row(smoke: SmokeCheckpoint) -> None:
    ids = json.loads((smoke.dataset / "identifiers.json").read_text())
    seen, unseen = task_ids(smoke)[0], task_ids(smoke)[SEEN_TASKS]
    test_set = build_test_set(
        {t: smoke.challenges[t] for t in (seen, unseen)}, num_aug=3, identifiers=ids, unseen_id=len(ids)
    )
    by_task = {t.task_id: t for t in test_set.tasks}
    trained = [(name, row) for row, name in enumerate(ids) if parse_identifier(name)[0] == seen]
    assert list(zip(by_task[seen].names, by_task[seen].embedding_ids, strict=True)) == trained[:3]
    assert by_task[unseen].embedding_ids == [len(ids)] * len(by_task[unseen].names)
    assert by_task[unseen].names[0] == unseen  # the original first
    rows = by_task[unseen].inputs.reshape(len(by_task[unseen].names), -1)
    assert len({r.tobytes() for r in rows}) == len(rows)  # distinct variants
    # Each row is the test input colour-mapped, then transformed, encoded at (0, 0), as the builder does.
    for task in test_set.tasks:
        grid = np.array(smoke.challenges[task.task_id]["test"][0]["input"], dtype=np.uint8)
        for k, name in enumerate(task.names):
            _, tid, cmap = parse_identifier(name)
            mapped = grid if cmap is None else cmap[grid]
            assert np.array_equal(task.inputs[k, 0], encode_grid(dihedral(mapped, tid)))
    # Round-major order: every task's variant k before any variant k+1.
    order = [k for _, k, _ in test_set.rows(test_set.max_variants)]
    assert order == sorted(order)


def test_submission_matches_the_evaluators_voting_on_the_same_predictions(
    smoke: SmokeCheckpoint, bundle_dir: Path
) -> None:
    tasks = task_ids(smoke)[: SEEN_TASKS + 2]
    challenges = smoke.write_challenges("four.json", tasks)
    out, preds = smoke.root / "submission.json", smoke.root / "preds.npz"
    report = run_inference(
        bundle_dir,
        challenges,
        out,
        num_aug=3,
        batch_size=5,
        device="cpu",
        save_predictions=preds,
        progress=False,
    )
    submission = json.loads(out.read_text())
    test_puzzles = {t: {"test": smoke.challenges[t]["test"]} for t in tasks}
    validate_submission(submission, test_puzzles)
    assert report.rows_run == report.rows_planned > len(tasks)

    saved = np.load(preds)
    names = json.loads(str(saved["identifiers"]))
    assert len(names) == report.rows_run
    evaluator = ARCEvaluator(names, test_puzzles, blank_identifier_id=-1)
    evaluator.update_batch(
        {
            "inputs": torch.from_numpy(saved["inputs"].astype(np.int32)),
            "preds": torch.from_numpy(saved["preds"].astype(np.int32)),
            "puzzle_identifiers": torch.arange(len(names)),
            "q_halt_logits": torch.from_numpy(saved["q_halt_logits"]),
        }
    )
    assert build_submission(test_puzzles, evaluator.table) == submission
    # Every test input was matched back (inputs un-augment to the original grid), with one vote per row.
    votes = [
        len(evaluator.table.votes[t][grid_key(p["input"])]) for t in tasks for p in test_puzzles[t]["test"]
    ]
    assert all(votes) and sum(votes) == report.rows_run


def test_inference_is_repeatable_and_batch_size_independent(smoke: SmokeCheckpoint, bundle_dir: Path) -> None:
    challenges = smoke.write_challenges("two.json", task_ids(smoke)[SEEN_TASKS - 1 : SEEN_TASKS + 1])
    subs, saved = {}, {}
    for run, batch in (("a", 7), ("b", 7), ("c", 1)):
        out, preds = smoke.root / f"sub-{run}.json", smoke.root / f"preds-{run}.npz"
        run_inference(
            bundle_dir,
            challenges,
            out,
            num_aug=3,
            batch_size=batch,
            device="cpu",
            save_predictions=preds,
            progress=False,
        )
        subs[run], saved[run] = out.read_bytes(), np.load(preds)
    # The same batch size twice: the same submission, byte for byte.
    assert subs["a"] == subs["b"]
    # Another batch size: the same rows, the same predicted grids, and halt logits equal to float32 rounding.
    # (The matrix kernels block by shape, so the logits' last bits follow the batch; the vote ranking keeps
    # upstream's exact float comparison, so candidates whose confidences tie to those bits may swap.)
    assert str(saved["a"]["identifiers"]) == str(saved["c"]["identifiers"])
    np.testing.assert_array_equal(saved["a"]["inputs"], saved["c"]["inputs"])
    np.testing.assert_array_equal(saved["a"]["preds"], saved["c"]["preds"])
    np.testing.assert_allclose(saved["a"]["q_halt_logits"], saved["c"]["q_halt_logits"], rtol=1e-5, atol=1e-6)


def test_tasks_the_model_cannot_handle_still_get_two_attempts(
    smoke: SmokeCheckpoint, bundle_dir: Path
) -> None:
    good = task_ids(smoke)[0]
    challenges = {
        good: smoke.challenges[good],
        "too_big": {"train": [], "test": [{"input": [[1] * 31] * 31}, {"input": [[2]]}]},
        "bad_colour": {"train": [], "test": [{"input": [[3, 12]]}]},
        "ragged": {"train": [], "test": [{"input": [[1, 2], [3]]}]},
        "no_tests": {"train": [], "test": []},
    }
    path = smoke.root / "odd.json"
    path.write_text(json.dumps(challenges))
    out = smoke.root / "odd-submission.json"
    report = run_inference(bundle_dir, path, out, num_aug=2, device="cpu", progress=False)
    submission = json.loads(out.read_text())
    assert set(report.skipped) == {"too_big", "bad_colour", "ragged"}
    assert len(submission["too_big"]) == 2 and submission["no_tests"] == []
    for task in ("too_big", "bad_colour", "ragged"):
        for entry in submission[task]:
            assert entry == {"attempt_1": FALLBACK_GRID, "attempt_2": FALLBACK_GRID}
    assert len(submission[good]) == len(challenges[good]["test"])


def test_time_budget_runs_fewer_augmentations_instead_of_failing(
    smoke: SmokeCheckpoint, bundle_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = iter(np.arange(0.0, 1e6, 20.0))  # every clock read advances 20 s
    monkeypatch.setattr(infer_mod.time, "perf_counter", lambda: float(next(clock)))
    tasks = task_ids(smoke)[:6]
    challenges = smoke.write_challenges("six.json", tasks)
    out = smoke.root / "budget.json"
    report = run_inference(
        bundle_dir, challenges, out, num_aug=4, batch_size=2, device="cpu", max_minutes=2.0, progress=False
    )
    assert report.stopped_by_budget
    assert 0 < report.rows_run < report.rows_planned
    assert report.rounds_complete < 4 and any("--max-minutes" in n for n in report.notes)
    validate_submission(json.loads(out.read_text()), {t: smoke.challenges[t] for t in tasks})


def test_damaged_bundle_is_refused(smoke: SmokeCheckpoint, bundle_dir: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(bundle_dir, copy)
    with open(copy / B.WEIGHTS, "ab") as f:
        f.write(b"x")
    with pytest.raises(TRMError, match=r"model\.pt.*sha256"):
        B.load_bundle(copy, torch.device("cpu"))


def test_cli_infer_and_package_errors_exit_2(
    smoke: SmokeCheckpoint, bundle_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    challenges = smoke.write_challenges("one.json", task_ids(smoke)[:1])
    out = smoke.root / "cli.json"
    argv = ["infer", "--weights", str(bundle_dir), "--challenges", str(challenges), "--out", str(out)]
    assert main([*argv, "--num-aug", "2", "--device", "cpu", "--quiet"]) == 0
    assert "1 tasks, 1 test inputs" in capsys.readouterr().out
    assert main([*argv[:-4], "--challenges", str(smoke.root / "missing.json"), "--out", str(out)]) == 2
    assert "file not found" in capsys.readouterr().err
    assert (
        main(["infer", "--weights", str(smoke.root), "--challenges", str(challenges), "--out", str(out)]) == 2
    )
    assert "manifest.json" in capsys.readouterr().err
    assert main(["package", "kaggle", str(smoke.root / "nope"), str(smoke.root / "x"), "--no-wheels"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main([*argv, "--num-aug", "0", "--device", "cpu"]) == 2
    assert "--num-aug 0" in capsys.readouterr().err
    before = challenges.read_text()
    assert main([*argv[:-2], "--out", str(challenges)]) == 2
    assert "is the --challenges file" in capsys.readouterr().err and challenges.read_text() == before


def _offline(argv: list[str]) -> list[str]:
    """Prefix with `unshare -n` (no network namespace) where this machine allows it."""
    import shutil
    import subprocess

    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-n", "true"], capture_output=True, check=False).returncode == 0:
        return [unshare, "-n", *argv]
    return argv


@pytest.fixture(scope="module")
def wheels_bundle(smoke: SmokeCheckpoint) -> Path:
    """The smoke checkpoint packaged with its wheelhouse (downloads the pinned wheels from the index)."""
    out = smoke.root / "bundle-wheels"
    package_kaggle(smoke.checkpoint, out, python_version="3.11", progress=False)
    return out


def _fresh_venv(env_dir: Path, root: Path) -> tuple[Path, Path, dict[str, str]]:
    """(python, site-packages, environment) of a new venv that sees this machine's torch and torch's own
    dependencies, and nothing else (a .pth file), with no pip configuration."""
    import os
    import subprocess
    import venv

    from tests.helpers import torch_only_path

    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(
        subprocess.check_output([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
        .decode()
        .strip()
    )
    (site / "host_torch.pth").write_text(str(torch_only_path(root / "host-torch")) + "\n")
    return python, site, {"PATH": os.environ["PATH"], "HOME": str(root), "PIP_CONFIG_FILE": os.devnull}


@pytest.mark.slow
@pytest.mark.kaggle
def test_wheelhouse_installs_offline_in_a_fresh_venv_and_infers(
    smoke: SmokeCheckpoint, wheels_bundle: Path
) -> None:
    """Package with wheels (downloads from the index), then in a fresh venv with no network and no pip
    config: install from the wheelhouse only, run `python -m trm infer`, compare with this process.

    torch is not in the wheelhouse (Kaggle has it), so the venv sees this machine's torch and torch's own
    dependencies, and nothing else, through a .pth file.
    """
    import subprocess

    from trm.kaggle.wheelhouse import REQUIREMENTS

    out = wheels_bundle
    wheels = out / B.WHEELS
    pins = (wheels / REQUIREMENTS).read_text().split()
    assert "hydra-core==1.3.8" in pins and "antlr4-python3-runtime==4.9.3" in pins
    assert not any(p.startswith("torch==") for p in pins)
    assert len(list(wheels.glob("trm_stack-*.whl"))) == 1
    assert len(list(wheels.glob("*.whl"))) == len(pins) + 1

    env_dir = smoke.root / "fresh"
    python, site, env = _fresh_venv(env_dir, smoke.root)
    pip = [str(python), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheels)]
    for extra in (
        ["-r", str(wheels / REQUIREMENTS)],
        ["--no-deps", str(next(wheels.glob("trm_stack-*.whl")))],
    ):
        subprocess.run(_offline([*pip, *extra]), env=env, cwd=smoke.root, check=True)
    where = subprocess.check_output(
        [python, "-c", "import trm, hydra, numpy; print(trm.__file__, hydra.__file__, numpy.__file__)"],
        env=env,
        cwd=smoke.root,
    ).decode()
    assert all(str(site) in path for path in where.split()), where

    tasks = task_ids(smoke)[: SEEN_TASKS + 1]
    challenges = smoke.write_challenges("offline.json", tasks)
    args = ["--weights", str(out), "--challenges", str(challenges), "--num-aug", "3", "--device", "cpu"]
    proc = subprocess.run(
        _offline([str(python), "-m", "trm", "infer", *args, "--out", "offline.json", "--quiet"]),
        env=env,
        cwd=smoke.root / "fresh",
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    offline = json.loads((env_dir / "offline.json").read_text())
    here = smoke.root / "here.json"
    run_inference(out, challenges, here, num_aug=3, device="cpu", progress=False)
    assert offline == json.loads(here.read_text())
    validate_submission(offline, {t: smoke.challenges[t] for t in tasks})


@pytest.mark.slow
@pytest.mark.kaggle
def test_published_notebook_runs_offline_end_to_end_on_cpu(
    smoke: SmokeCheckpoint, wheels_bundle: Path, tmp_path: Path
) -> None:
    """The notebook `trm kaggle publish` pushes, as a script, in a fresh venv with no network: it finds the
    staged weights and wheelhouse datasets and the competition's challenges under a stand-in for
    /kaggle/input (TRM_KAGGLE_INPUT), installs trm-stack from the wheelhouse with pip --no-index, adapts to
    the tasks without trained rows and writes a valid submission.json into TRM_KAGGLE_WORKING."""
    import shutil
    import subprocess

    from trm.kaggle.notebook import INPUT_ENV, WORKING_ENV, script
    from trm.kaggle.publish import PublishOptions, stage

    plan = stage(wheels_bundle, tmp_path / "publish", PublishOptions(owner="alice", adapt_minutes=5))
    kernel = plan.folder / "kernel"
    notebook = next(kernel.glob("*.ipynb")).read_text()
    # CPU-sized: few augmentations, a few adaptation steps (the flags the notebook passes stay as published).
    code = script(notebook).replace(
        '"--max-minutes", str(MAX_MINUTES),',
        '"--max-minutes", str(MAX_MINUTES), "--num-aug", "2", "--device", "cpu", "--quiet",'
        ' "--adapt-steps", "2", "--adapt-num-aug", "2",',
    )
    assert code != script(notebook), "the notebook's infer command changed: update this test's CPU sizing"
    inputs, working = tmp_path / "input", tmp_path / "working"
    shutil.copytree(plan.folder / "weights", inputs / "datasets" / "alice" / "trm-arc-weights")
    shutil.copytree(plan.folder / "wheels", inputs / "datasets" / "alice" / "trm-arc-wheels")
    tasks = task_ids(smoke)[SEEN_TASKS - 1 : SEEN_TASKS + 1]  # one trained task, one without a row
    competition = inputs / "competitions" / "arc-prize-2025"
    competition.mkdir(parents=True)
    shutil.copy(smoke.write_challenges("notebook.json", tasks), competition / "arc-agi_test_challenges.json")
    working.mkdir()
    (working / "notebook.py").write_text(code)

    python, site, env = _fresh_venv(tmp_path / "kernel-venv", tmp_path)
    env.update({INPUT_ENV: str(inputs), WORKING_ENV: str(working)})
    proc = subprocess.run(
        _offline([str(python), "notebook.py"]),
        env=env,
        cwd=working,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert out.index("wheelhouse: ") < out.index("time plan for arc-prize-2025: 4 x NVIDIA L4, 12 h, offline")
    assert "tasks          2 (1 without a trained row: adapted)" in out
    assert "adapted to 2 task(s)" in out  # every task of the file gets rows
    assert (site / "trm").is_dir()  # installed from the wheelhouse into the kernel's venv
    submission = json.loads((working / "submission.json").read_text())
    validate_submission(submission, {t: smoke.challenges[t] for t in tasks})
    assert (working / "adapt" / "bundle" / B.MANIFEST).is_file()


def test_model_without_puzzle_table_packages_and_infers(smoke: SmokeCheckpoint, tmp_path: Path) -> None:
    from trm.model import TinyRecursiveModel, TRMConfig

    arch = {"hidden_size": 16, "num_heads": 2, "L_layers": 1, "H_cycles": 1, "L_cycles": 1}
    cfg = TRMConfig(
        batch_size=1,
        seq_len=900,
        vocab_size=12,
        num_puzzle_identifiers=1,
        puzzle_emb_ndim=0,
        puzzle_emb_len=0,
        halt_max_steps=2,
        **arch,
    )
    upstream = tmp_path / "step_7"
    torch.save(to_upstream_state_dict(TinyRecursiveModel(cfg).state_dict(), compiled=False), upstream)
    overrides = [f"arch.{k}={v}" for k, v in arch.items()]
    overrides += ["arch.puzzle_emb_ndim=0", "arch.puzzle_emb_len=0", "arch.halt_max_steps=2"]
    out = tmp_path / "bundle"
    # data_paths points at a dataset with identifiers: they are not shipped, there is no table to index.
    package_kaggle(upstream, out, overrides=[*overrides, f"data_paths=[{smoke.dataset}]"], wheels=False)
    assert not (out / B.IDENTIFIERS).exists()
    challenges = smoke.write_challenges("notable.json", task_ids(smoke)[:2])
    run_inference(out, challenges, tmp_path / "s.json", num_aug=2, device="cpu", progress=False)
    validate_submission(
        json.loads((tmp_path / "s.json").read_text()), {t: smoke.challenges[t] for t in task_ids(smoke)[:2]}
    )


@pytest.mark.gpu
def test_gpu_inference_writes_a_valid_submission(
    smoke: SmokeCheckpoint, bundle_dir: Path, tmp_path: Path
) -> None:
    challenges = smoke.write_challenges("gpu.json", task_ids(smoke)[:3])
    out = tmp_path / "gpu.json"
    report = run_inference(bundle_dir, challenges, out, num_aug=3, device="cuda", progress=False)
    assert report.device.startswith("cuda") and report.rows_run == report.rows_planned
    validate_submission(json.loads(out.read_text()), {t: smoke.challenges[t] for t in task_ids(smoke)[:3]})


def test_runtime_pins_are_the_installed_closure_without_torch_by_default() -> None:
    import importlib.metadata as md

    from trm.kaggle.wheelhouse import runtime_pins

    pins = runtime_pins("3.11")
    for name in ("hydra-core", "omegaconf", "antlr4-python3-runtime", "pyyaml", "numpy", "tqdm"):
        assert pins[name] == md.version(name)
    assert "torch" not in pins and "trm-stack" not in pins
    assert "colorama" not in pins  # tqdm needs it on Windows only: markers are evaluated for Linux
    with_torch = runtime_pins("3.11", include_torch=True)
    assert with_torch["torch"] == md.version("torch")
    assert set(pins) < set(with_torch)


@pytest.mark.parametrize("early_halt", [False, True])
def test_rows_run_every_act_step_unless_early_halt(bundle_dir: Path, early_halt: bool) -> None:
    bundle = B.load_bundle(bundle_dir, torch.device("cpu"), early_halt=early_halt)
    model = bundle.model
    with torch.no_grad():
        model.inner.q_head.bias.fill_(10.0)  # q_halt > 0 from the first step on
    calls = []
    original = model.forward

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    model.forward = counting  # type: ignore[method-assign]
    inputs = np.full((3, 900), 2, dtype=np.uint8)
    with HostSyncCounter() as syncs:
        preds, q_halt = infer_mod.predict_batch(
            model, inputs, np.ones(3, dtype=np.int64), torch.device("cpu")
        )
    assert (
        len(calls) == (1 if early_halt else model.config.halt_max_steps) and model.config.halt_max_steps > 1
    )
    # Every step runs without reading the halting flag unless a slot may halt early (then once per step).
    assert sum(syncs.counts.values()) == (1 if early_halt else 0)
    assert preds.shape == (3, 900) and preds.dtype == np.uint8 and (q_halt > 0).all()


def test_out_of_memory_halves_the_batch_and_keeps_going(
    smoke: SmokeCheckpoint, bundle_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    challenges = smoke.write_challenges("oom.json", task_ids(smoke)[:3])
    reference = smoke.root / "oom-ref.json"
    run_inference(bundle_dir, challenges, reference, num_aug=3, batch_size=2, device="cpu", progress=False)

    real = infer_mod.predict_batch

    def small_batches_only(model, inputs, ids, device):
        if len(inputs) > 2:
            raise RuntimeError("CUDA out of memory. Tried to allocate 9.00 GiB")
        return real(model, inputs, ids, device)

    monkeypatch.setattr(infer_mod, "predict_batch", small_batches_only)
    out = smoke.root / "oom-submission.json"
    report = run_inference(bundle_dir, challenges, out, num_aug=3, batch_size=8, device="cpu", progress=False)
    assert report.batch_size == 2 and report.rows_run == report.rows_planned
    assert sum("out of memory" in n for n in report.notes) == 2  # 8 -> 4 -> 2
    assert json.loads(out.read_text()) == json.loads(reference.read_text())

    def always_fails(model, inputs, ids, device):
        raise RuntimeError("shape mismatch")  # not memory: no retry

    monkeypatch.setattr(infer_mod, "predict_batch", always_fails)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        run_inference(bundle_dir, challenges, out, num_aug=3, device="cpu", progress=False)


def test_a_run_directory_means_its_newest_complete_checkpoint(smoke: SmokeCheckpoint, tmp_path: Path) -> None:
    import shutil

    from trm.kaggle.package import newest_in_run_dir

    run = tmp_path / "run"
    for step in (0, 7, 12):
        shutil.copytree(smoke.checkpoint, run / f"step_{step}")
    (run / "step_12" / "COMPLETE").unlink()  # torn: skipped
    assert newest_in_run_dir(run) == run / "step_7"
    assert newest_in_run_dir(run / "step_0") == run / "step_0"
    assert newest_in_run_dir(tmp_path) == tmp_path  # nothing there: left for the loader's error


def _installed_dist(site: Path):
    """A wheel-style install of a two-file trm-stack (as in the images: no pyproject.toml anywhere)."""
    import base64
    import hashlib
    import importlib.metadata as md

    files = {
        "trm/__init__.py": b'__version__ = "0.1.0"\n',
        "trm/infer_stub.py": b"ANSWER = 42\n",
        "trm_stack-0.1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: trm-stack\nVersion: 0.1.0\n",
        "trm_stack-0.1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        "trm_stack-0.1.0.dist-info/INSTALLER": b"pip\n",
        "trm_stack-0.1.0.dist-info/direct_url.json": b'{"url": "file:///tmp/x.whl"}',
        "trm/__pycache__/infer_stub.cpython-311.pyc": b"\x00compiled",
    }
    record = []
    for name, data in files.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_bytes(data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("trm_stack-0.1.0.dist-info/RECORD,,")
    (site / "trm_stack-0.1.0.dist-info/RECORD").write_text("\n".join(record) + "\n")
    return md.PathDistribution(site / "trm_stack-0.1.0.dist-info")


def test_own_wheel_without_a_checkout_repacks_the_installed_package(tmp_path: Path) -> None:
    """Inside the trm images trm-stack is an installed wheel (no pyproject.toml next to it): runbook 07's
    `package kaggle` must still put a working trm-stack wheel into the bundle."""
    import subprocess
    import sys
    import zipfile

    from trm.kaggle.wheelhouse import wheel_from_installed

    site = tmp_path / "site"
    dist = _installed_dist(site)
    out = tmp_path / "wheels"
    out.mkdir()
    wheel = wheel_from_installed(out, dist)
    assert wheel.name == "trm_stack-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as zf:
        names = sorted(zf.namelist())
        assert zf.read("trm/infer_stub.py") == b"ANSWER = 42\n"
    assert names == sorted([
        "trm/__init__.py", "trm/infer_stub.py", "trm_stack-0.1.0.dist-info/METADATA",
        "trm_stack-0.1.0.dist-info/WHEEL", "trm_stack-0.1.0.dist-info/RECORD",
    ])  # fmt: skip
    first = wheel.read_bytes()
    assert wheel_from_installed(out, dist).read_bytes() == first  # reproducible
    # pip accepts it (RECORD hashes checked at install), offline
    target = tmp_path / "target"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "-q", "--target", str(target), str(wheel)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (target / "trm" / "infer_stub.py").read_bytes() == b"ANSWER = 42\n"


def test_own_wheel_refuses_a_modified_install(tmp_path: Path) -> None:
    from trm.errors import TRMError
    from trm.kaggle.wheelhouse import wheel_from_installed

    site = tmp_path / "site"
    dist = _installed_dist(site)
    (site / "trm" / "infer_stub.py").write_text("ANSWER = 43\n")
    with pytest.raises(TRMError, match=r"infer_stub.py differs from the installed trm-stack RECORD"):
        wheel_from_installed(tmp_path, dist)


# --- Tasks the bundle has no rows for: a loud count without adaptation, adaptation within a budget ---


def test_without_adaptation_inference_counts_the_tasks_without_rows_loudly(
    smoke: SmokeCheckpoint, bundle_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hidden = write_tasks(smoke.root / "hidden", "hidden", 2, seed=3, colours=4)
    seen = next(iter(smoke.challenges))
    mixed = smoke.root / "mixed.json"
    mixed.write_text(json.dumps({seen: smoke.challenges[seen], **json.loads(hidden.read_text())}))
    report = run_inference(
        bundle_dir, mixed, smoke.root / "plain.json", num_aug=2, device="cpu", progress=False
    )
    assert report.unseen_tasks == 2 and report.adapted is None
    assert "--adapt-minutes" in (bundle_dir / B.README).read_text()  # the bundle's own README says so too
    assert any("2 of 3 task(s) have no trained puzzle-embedding row" in n for n in report.notes)
    argv = [
        "infer",
        "--weights",
        str(bundle_dir),
        "--challenges",
        str(mixed),
        "--out",
        str(smoke.root / "p.json"),
    ]
    assert main([*argv, "--num-aug", "2", "--device", "cpu", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "WARNING: 2 of 3 task(s) have no trained puzzle-embedding row" in err and "--adapt-minutes" in err


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--adapt-steps", "-1"], "--adapt-steps -1: must be >= 0"),
        (["--adapt-minutes", "0"], "--adapt-minutes 0.0: must be positive"),
        (["--adapt-steps", "2", "--adapt-num-aug", "-2"], "--adapt-num-aug -2: must be >= 0"),
        (["--adapt-train", "embeddings", "--adapt-dir", "a"], "--adapt-train, --adapt-dir without a budget"),
    ],
)
def test_bad_adapt_flags_are_refused_up_front_with_infers_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], said: str
) -> None:
    # No bundle and no task file: the flags are checked before either is read.
    argv = ["infer", "--weights", str(tmp_path / "none"), "--challenges", str(tmp_path / "none.json")]
    assert main([*argv, "--out", str(tmp_path / "s.json"), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert said in err and len(err.splitlines()) == 1
    assert " --steps" not in err and " --minutes" not in err  # adapt's own flag names
    assert not (tmp_path / "a").exists()


def test_adapt_flags_for_tasks_that_all_have_rows_are_reported_and_so_are_trained_tasks(
    smoke: SmokeCheckpoint, bundle_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = smoke.write_challenges("seen_challenges.json", task_ids(smoke)[:1])  # a task the bundle trained on
    work = smoke.root / "seen-adapt"
    argv = [
        "infer",
        "--weights",
        str(bundle_dir),
        "--challenges",
        str(seen),
        "--out",
        str(smoke.root / "s.json"),
    ]
    assert (
        main(
            [
                *argv,
                "--num-aug",
                "2",
                "--device",
                "cpu",
                "--quiet",
                "--adapt-steps",
                "3",
                "--adapt-dir",
                str(work),
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert f"WARNING: --adapt-steps, --adapt-dir ignored: every task of {seen} has a trained" in err
    assert "WARNING: 1 of 1 task(s) have trained puzzle-embedding rows" in err
    assert not work.exists()  # nothing was adapted


@pytest.mark.kaggle
def test_bundle_adapts_to_a_hidden_task_file_then_votes(
    smoke: SmokeCheckpoint, bundle_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hidden = write_tasks(smoke.root / "hidden2", "hidden", 3, seed=4, colours=4)
    tasks = json.loads(hidden.read_text())
    config = B.read_config(bundle_dir)
    assert config["train"]["arch"]["hidden_size"] == 16  # what adaptation trains with
    work, out = smoke.root / "adapt-work", smoke.root / "adapted-submission.json"
    argv = ["infer", "--weights", str(bundle_dir), "--challenges", str(hidden), "--out", str(out)]
    budget = ["--adapt-steps", "3", "--adapt-minutes", "10", "--adapt-num-aug", "2", "--adapt-dir", str(work)]
    assert main([*argv, "--num-aug", "3", "--device", "cpu", "--quiet", *budget]) == 0
    printed = capsys.readouterr()
    assert "adapted to 3 task(s)" in printed.out and "WARNING" not in printed.err
    # The time plan comes first: 3 steps of the tiny model on an L4, far within the 12 h.
    plan = printed.out.index("time plan for arc-prize-2025: 4 x NVIDIA L4, 12 h, offline")
    assert plan < printed.out.index("adapted to") and "  adaptation     3 steps" in printed.out
    # On CPU the bundle's training micro-batch is kept (a GPU's comes from the tier table: tests/adapt/test_batch.py).
    assert (
        "note: adaptation: adapted with micro-batch 8 x 1 accumulation (global batch 8): CPU" in printed.out
    )
    validate_submission(json.loads(out.read_text()), {t: {"test": tasks[t]["test"]} for t in tasks})

    # The adapted bundle has a trained row for every variant of every hidden task, moved off the mean.
    adapted = work / "bundle"
    names = json.loads((adapted / B.IDENTIFIERS).read_text())
    assert {n.split("|||")[0] for n in names[1:]} == set(tasks) and len(names) == 1 + 3 * 3
    table = torch.load(adapted / B.WEIGHTS, weights_only=True)[PUZZLE_EMB_KEY]
    start = torch.load(bundle_dir / B.WEIGHTS, weights_only=True)[PUZZLE_EMB_KEY][-1]  # the unseen row
    assert len(table) == len(names) + 1 and not torch.allclose(table[1:-1], start.expand(9, -1))
    assert json.loads((work / "adapt.json").read_text())["step"] == 3

    # Same command again: the finished adaptation is reused and the submission is the same.
    first = out.read_text()
    assert main([*argv, "--num-aug", "3", "--device", "cpu", "--quiet", *budget]) == 0
    assert out.read_text() == first


def test_plan_only_prints_the_time_plan_and_loads_no_model(
    smoke: SmokeCheckpoint,
    bundle_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_load(*_: object, **__: object) -> None:
        raise AssertionError("--plan-only loaded the model")

    monkeypatch.setattr(B, "load_bundle", no_load)
    challenges = smoke.write_challenges("plan.json", task_ids(smoke)[SEEN_TASKS - 1 : SEEN_TASKS + 2])
    argv = ["infer", "--weights", str(bundle_dir), "--challenges", str(challenges), "--plan-only"]
    assert main([*argv, "--adapt-minutes", "30", "--gpus", "2", "--hours", "1", "--num-aug", "8"]) == 0
    out = capsys.readouterr().out
    assert "time plan for arc-prize-2025: 2 x NVIDIA L4, 1 h, offline" in out
    assert "tasks          3 (2 without a trained row: adapted)" in out
    assert "budget         40.0 min (the competition's 1 h less 20 min reserve)" in out
    assert "estimate, derived from the NVIDIA H100 80GB HBM3 measurement of 2026-11-26" in out
    assert "adaptation     " in out and "30.0 min (50.0 % of 1 h)" in out
    assert "1 of the 2 GPUs idle" in out and "submission" not in out
    assert main([*argv[:-1]]) == 2  # without --plan-only, --out is needed
    assert "--out is required" in capsys.readouterr().err


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_overwrite_never_replaces_the_run_being_packaged_or_a_file(
    smoke: SmokeCheckpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    run = tmp_path / "run"
    shutil.copytree(smoke.checkpoint, run / "step_4")
    before = _tree(run)
    for out in (run, run / "step_4"):
        assert main(["package", "kaggle", str(run), str(out), "--overwrite", "--no-wheels"]) == 2
        err = capsys.readouterr().err.strip()
        assert f"OUT_DIR {out}: refusing to replace it" in err and len(err.splitlines()) == 1
        assert _tree(run) == before
    with pytest.raises(SystemExit):  # the refusal's OUT_DIR is the argument the usage line names so
        main(["package", "kaggle", "--help"])
    assert "CHECKPOINT OUT_DIR [overrides ...]" in capsys.readouterr().out
    a_file = tmp_path / "bundle.zip"
    a_file.write_bytes(b"mine")
    assert main(["package", "kaggle", str(run), str(a_file), "--overwrite", "--no-wheels"]) == 2
    assert "it is a file, not a folder" in capsys.readouterr().err and a_file.read_bytes() == b"mine"
    out = tmp_path / "bundle"
    assert main(["package", "kaggle", str(run), str(out), "--no-wheels"]) == 0
    assert main(["package", "kaggle", str(run), str(out), "--overwrite", "--no-wheels"]) == 0  # its own
    (out / "notes.md").write_text("mine")
    assert main(["package", "kaggle", str(run), str(out), "--overwrite", "--no-wheels"]) == 2
    assert "notes.md, which trm-stack did not write" in capsys.readouterr().err
    assert (out / "notes.md").read_text() == "mine"


@pytest.mark.parametrize("damage", ["bit flip", "zeroed header"])
def test_a_damaged_checkpoint_is_refused_by_package_and_eval(
    smoke: SmokeCheckpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    import shutil

    from trm.eval import main as eval_main

    step = tmp_path / "step_4"
    shutil.copytree(smoke.checkpoint, step)
    data = bytearray((step / STATE).read_bytes())
    if damage == "bit flip":
        data[len(data) // 2] ^= 0x01
    else:
        data[:64] = bytes(64)
    (step / STATE).write_bytes(bytes(data))
    out = tmp_path / "bundle"
    assert main(["package", "kaggle", str(step), str(out), "--no-wheels"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"checkpoint {step} is damaged or incomplete (state.pt does not match its sha256" in err
    assert len(err.splitlines()) == 1 and not out.exists()
    assert eval_main([str(step), "device=cpu", f"data_paths=[{smoke.dataset}]"]) == 2
    assert "state.pt does not match its sha256" in capsys.readouterr().err
    a_file = tmp_path / "results"
    a_file.write_text("mine")
    assert eval_main([str(smoke.checkpoint), "device=cpu", "--output-dir", str(a_file)]) == 2
    assert "it is a file, not a folder" in capsys.readouterr().err and a_file.read_text() == "mine"
    assert not list(tmp_path.glob("evaluator_*"))


# A W&B-key-shaped setting, built at run time (a literal one would trip the repository's own scan).
WANDB_LIKE = "WANDB_API_KEY=" + "".join("0123456789abcdef"[(7 * i) % 16] for i in range(40))


def _copy_with_token_in_config(checkpoint: Path, step: Path) -> None:
    """`checkpoint` copied to `step` with WANDB_LIKE in its config's project_name (manifest updated)."""
    import shutil

    from trm.training.checkpointing.layout import MANIFEST, save_torch

    shutil.copytree(checkpoint, step)
    state = torch.load(step / STATE, map_location="cpu", weights_only=False)
    state["config"]["project_name"] = WANDB_LIKE
    save_torch(state, step / STATE)
    manifest = json.loads((step / MANIFEST).read_text())
    manifest["files"][STATE] = {"bytes": (step / STATE).stat().st_size, "sha256": sha256_file(step / STATE)}
    (step / MANIFEST).write_text(json.dumps(manifest))


def test_a_token_in_the_runs_config_stops_the_package(
    smoke: SmokeCheckpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    step = tmp_path / "step_4"
    _copy_with_token_in_config(smoke.checkpoint, step)
    out = tmp_path / "bundle"
    assert main(["package", "kaggle", str(step), str(out), "--no-wheels"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"error: OUT_DIR {out}: stopped, a secret-like value would be published")
    assert "config.json: key train.project_name (W&B API Key)" in captured.err
    assert WANDB_LIKE[-40:] not in captured.err + captured.out
    assert not out.exists() and not list(tmp_path.glob(".bundle.*"))


@pytest.mark.parametrize("case", ["replace", "secret", "damaged"])
def test_infers_adaptation_names_the_adapted_bundle_as_its_user_knows_it(
    smoke: SmokeCheckpoint, bundle_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """`infer --adapt-dir` packages the adapted checkpoint: a refusal names --adapt-dir and `infer`, not
    `package kaggle`'s OUT_DIR (adaptation itself stands in: it returns the checkpoint it would write)."""
    import shutil

    from trm.adapt.run import AdaptResult
    from trm.kaggle import adapt as kaggle_adapt

    work = tmp_path / "adapt"
    step = work / "step_3"
    if case == "secret":
        _copy_with_token_in_config(smoke.checkpoint, step)
    else:
        shutil.copytree(smoke.checkpoint, step)
    if case == "damaged":
        data = bytearray((step / STATE).read_bytes())
        data[len(data) // 2] ^= 0x01
        (step / STATE).write_bytes(bytes(data))
    if case == "replace":
        (work / kaggle_adapt.ADAPTED_BUNDLE).mkdir()
        (work / kaggle_adapt.ADAPTED_BUNDLE / "notes.txt").write_text("mine\n")
    result = AdaptResult(work, step, work / "dataset", 3, None, 1, {}, 0, 1, 0.0)
    monkeypatch.setattr(kaggle_adapt, "adapt", lambda *_, **__: result)
    bundle = B.load_bundle(bundle_dir, torch.device("cpu"))
    with pytest.raises(TRMError) as err:
        kaggle_adapt.adapt_bundle(
            bundle, "c.json", work, None, torch.device("cpu"), batch_size=1, early_halt=False
        )  # type: ignore[arg-type]
    adapted = work / kaggle_adapt.ADAPTED_BUNDLE
    expected = {
        "replace": f"the adapted bundle in --adapt-dir, {adapted}: refusing to replace it: it holds files trm-stack did not write",
        "secret": f"the adapted bundle in --adapt-dir, {adapted}: stopped, a secret-like value would be published",
        "damaged": f"infer: checkpoint {step} is damaged or incomplete (state.pt does not match its sha256",
    }[case]
    message = str(err.value)
    assert message.startswith(expected) and "OUT_DIR" not in message and "package kaggle" not in message
    assert WANDB_LIKE[-40:] not in message


@pytest.mark.parametrize(
    ("config_text", "message"),
    [
        ("{not json", "config.json: not readable JSON"),
        ("[1, 2]", "config.json: not a JSON object"),
        ("drop:arch", "key `arch` is missing"),
        ("drop:identifiers", "key `identifiers` is missing"),
        ("unseen:text", "key `identifiers.unseen_id` is a str, not a int"),
    ],
)
def test_a_bundle_config_that_is_not_json_or_misses_a_key_is_one_line(
    bundle_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], config_text: str, message: str
) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(bundle_dir, copy)
    config = json.loads((copy / B.CONFIG).read_text())
    if config_text.startswith("drop:"):
        config.pop(config_text[5:])
        config_text = json.dumps(config)
    elif config_text == "unseen:text":
        config["identifiers"]["unseen_id"] = "7"
        config_text = json.dumps(config)
    (copy / B.CONFIG).write_text(config_text)
    manifest = json.loads((copy / B.MANIFEST).read_text())  # consistent: only the content is wrong
    manifest["files"][B.CONFIG]["sha256"] = sha256_file(copy / B.CONFIG)
    (copy / B.MANIFEST).write_text(json.dumps(manifest))
    challenges = tmp_path / "c.json"
    challenges.write_text(json.dumps({}))
    out = tmp_path / "submission.json"
    argv = [
        "infer",
        "--weights",
        str(copy),
        "--challenges",
        str(challenges),
        "--out",
        str(out),
        "--device",
        "cpu",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_identifiers_of_a_changed_or_another_dataset_are_refused(
    smoke: SmokeCheckpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    from trm.data.build_arc import build_arc_dataset

    changed = tmp_path / "changed"
    shutil.copytree(smoke.dataset, changed)
    names = json.loads((changed / "identifiers.json").read_text())
    names[1], names[2] = names[2], names[1]  # as many rows, named in another order
    (changed / "identifiers.json").write_text(json.dumps(names))
    # Another build with as many identifiers (other augmentations): only its fingerprint tells it apart.
    other = tmp_path / "other"
    subsets = {"subsets": ["training", "evaluation"], "test_set_name": "evaluation"}
    build_arc_dataset(other, **subsets, num_aug=3, max_puzzles=SEEN_TASKS, seed=7)
    assert len(json.loads((other / "identifiers.json").read_text())) == len(names)
    argv = [
        "package",
        "kaggle",
        str(smoke.checkpoint),
        str(tmp_path / "bundle"),
        "--no-wheels",
        "--data-path",
    ]
    assert main([*argv, str(changed)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"--data-path {changed}: {changed / 'identifiers.json'}: sha256 differs from the manifest" in err
    assert len(err.splitlines()) == 1
    assert main([*argv, str(other)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"--data-path {other}: dataset fingerprint" in err and "the checkpoint was trained on" in err
    assert not (tmp_path / "bundle").exists()
    assert main([*argv, str(smoke.dataset)]) == 0  # the dataset it trained on
