"""Test-time training on a tiny real checkpoint (CPU): rows, budget, resume, and what accepts the result."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
from pathlib import Path

import pytest
import torch

from tests.adapt.generated import write_tasks
from tests.e2e.test_train import assert_states_equal
from tests.helpers import SmokeCheckpoint, make_smoke
from trm import exit_codes
from trm.adapt.rows import initial_rows, mean_trained_row
from trm.adapt.run import ADAPT_KIND, AdaptationStopped, AdaptSettings, AdaptSource, adapt
from trm.adapt.source import source_from_checkpoint
from trm.adapt.tasks import stage_tasks
from trm.commands import main
from trm.data.encoding import BLANK_IDENTIFIER
from trm.errors import TRMError
from trm.model.registry import ARCHS
from trm.model.upstream import PUZZLE_EMB_KEY
from trm.runlock import LOCK_FILE
from trm.safe_remove import write_marker
from trm.training.checkpointing import layout as ckpt
from trm.training.loop import Trainer

# Held-out tasks: 3x3 grids of colours 0..3 (two augmentations each, as the builder draws them).
FAST = {"num_aug": 2, "seed": 42, "progress": False}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> SmokeCheckpoint:
    return make_smoke(tmp_path_factory.mktemp("adapt"))


@pytest.fixture(scope="module")
def hidden(smoke: SmokeCheckpoint) -> Path:
    return write_tasks(smoke.root / "hidden", "hidden", 3, seed=5, colours=4)


def state(folder: Path) -> dict:
    return ckpt.load_torch(folder / ckpt.STATE)


def test_rows_keep_trained_rows_and_start_the_rest_from_the_mean() -> None:
    trained = torch.arange(12.0).reshape(4, 3)
    mean = mean_trained_row(trained)
    assert torch.equal(mean, trained[1:].mean(dim=0, keepdim=True))  # blank row 0 left out
    names = [BLANK_IDENTIFIER, "b|||t1|||0123456789", "new", "a"]
    rows = initial_rows(names, trained, [BLANK_IDENTIFIER, "a", "b|||t1|||0123456789", "c"], mean)
    assert torch.equal(rows.table, torch.stack([trained[0], trained[2], mean[0], trained[1]]))
    assert (rows.copied, rows.from_mean) == (2, 1)
    unnamed = initial_rows(names, trained, None, mean)
    assert (unnamed.copied, unnamed.from_mean) == (0, 3) and torch.equal(unnamed.table[1], mean[0])


def test_tasks_the_builder_cannot_take_are_left_out_with_a_reason(tmp_path: Path) -> None:
    good = {"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[1]]}]}
    challenges = {
        "good": good,
        "no_demos": {"train": [], "test": [{"input": [[1]]}]},
        "too_big": {"train": [{"input": [[1] * 31], "output": [[1]]}], "test": [{"input": [[1]]}]},
    }
    path = tmp_path / "x_challenges.json"
    path.write_text(json.dumps(challenges))
    staged = stage_tasks(path, None, tmp_path / "in")
    assert staged.kept == ["good"] and set(staged.skipped) == {"no_demos", "too_big"}
    assert "no demonstration" in staged.skipped["no_demos"] and "30x30" in staged.skipped["too_big"]
    solutions = tmp_path / "x_solutions.json"
    solutions.write_text(json.dumps({"other": [[[1]]]}))
    with pytest.raises(TRMError, match=r"--solutions .*'good'"):
        stage_tasks(path, solutions, tmp_path / "in")
    path.write_text(json.dumps({"no_demos": challenges["no_demos"]}))
    with pytest.raises(
        TRMError, match=r"no usable task \(1 left out; task 'no_demos': no demonstration pairs\)"
    ):
        stage_tasks(path, None, tmp_path / "in")


def test_zero_steps_is_the_unseen_mean_row_and_steps_move_the_new_rows(
    smoke: SmokeCheckpoint, hidden: Path, tmp_path: Path
) -> None:
    source = source_from_checkpoint(smoke.checkpoint)
    trained = source.weights[PUZZLE_EMB_KEY]
    start = adapt(source, hidden, tmp_path / "zero", AdaptSettings(steps=0, **FAST))
    table = state(start.checkpoint)["model"][PUZZLE_EMB_KEY]
    names = json.loads((start.dataset / "identifiers.json").read_text())
    assert len(table) == len(names) == 1 + 3 * 3  # blank + 3 tasks x (original + 2 augmentations)
    assert start.step == 0 and start.rows_copied == 0 and start.rows_from_mean == 9
    assert torch.equal(table[0], trained[0])
    assert torch.allclose(table[1:], mean_trained_row(trained).expand(9, -1))
    summary = json.loads((tmp_path / "zero" / "adapt.json").read_text())
    assert summary["rows"] == {"copied_from_trained": 0, "from_mean": 9} and summary["tasks"] == 3

    moved = adapt(source, hidden, tmp_path / "two", AdaptSettings(steps=2, **FAST))
    after = state(moved.checkpoint)
    assert moved.step == 2 and after["progress"]["finished"]
    assert not torch.equal(after["model"][PUZZLE_EMB_KEY][1:], table[1:])
    assert after["config"]["ema"] is False and after["config"]["max_steps"] == 2


def test_tasks_the_checkpoint_was_trained_on_keep_their_rows(smoke: SmokeCheckpoint, tmp_path: Path) -> None:
    # The smoke dataset's test tasks, built with the same seed and augmentation count: same identifiers.
    seen = smoke.write_challenges("seen_challenges.json", list(smoke.challenges)[:2])
    source = source_from_checkpoint(smoke.checkpoint)
    result = adapt(source, seen, tmp_path / "seen", AdaptSettings(steps=0, num_aug=3, progress=False))
    assert result.rows_copied > 0
    names = json.loads((result.dataset / "identifiers.json").read_text())
    trained_names = json.loads((smoke.dataset / "identifiers.json").read_text())
    table = state(result.checkpoint)["model"][PUZZLE_EMB_KEY]
    for row, name in enumerate(names):
        if name in trained_names and name != BLANK_IDENTIFIER:
            assert torch.equal(table[row], source.weights[PUZZLE_EMB_KEY][trained_names.index(name)])


def test_embeddings_only_moves_nothing_but_the_table(
    smoke: SmokeCheckpoint, hidden: Path, tmp_path: Path
) -> None:
    source = source_from_checkpoint(smoke.checkpoint)
    result = adapt(source, hidden, tmp_path / "emb", AdaptSettings(steps=2, train="embeddings", **FAST))
    after = state(result.checkpoint)["model"]
    for key, value in after.items():
        if key != PUZZLE_EMB_KEY:
            assert torch.equal(value, source.weights[key]), key
    assert set(state(result.checkpoint)["optimizers"]) == {"puzzle_emb"}


@pytest.mark.e2e
def test_sigterm_mid_adaptation_then_the_same_call_resumes_bit_exactly(
    smoke: SmokeCheckpoint, hidden: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = source_from_checkpoint(smoke.checkpoint)
    settings = AdaptSettings(steps=6, **FAST)
    straight = adapt(source, hidden, tmp_path / "straight", settings)

    original = Trainer._train_step

    def step_then_signal(self: Trainer, batch, bar) -> None:
        original(self, batch, bar)
        if self.progress.step == 3:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(Trainer, "_train_step", step_then_signal)
    with pytest.raises(AdaptationStopped, match="SIGTERM at step 3") as stopped:
        adapt(source, hidden, tmp_path / "split", settings)
    assert stopped.value.exit_code == exit_codes.SAVED_RETRY
    assert [c.step for c in ckpt.find_complete(tmp_path / "split")] == [3]
    monkeypatch.setattr(Trainer, "_train_step", original)
    resumed = adapt(source, hidden, tmp_path / "split", settings)
    assert resumed.step == straight.step == 6
    assert_states_equal(state(straight.checkpoint), state(resumed.checkpoint))


@pytest.mark.e2e
def test_minutes_budget_saves_and_ends_the_run_there(
    smoke: SmokeCheckpoint, hidden: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import itertools
    import time

    import trm.training.signals as signals

    reads = itertools.count()  # every deadline check is 20 s later than the last: 1 minute ends early
    monkeypatch.setattr(signals, "_clock", lambda: time.monotonic() + 20.0 * next(reads))
    source = source_from_checkpoint(smoke.checkpoint)
    result = adapt(source, hidden, tmp_path / "budget", AdaptSettings(minutes=1.0, **FAST))
    assert result.stop_reason == signals.DEADLINE and 0 < result.step < 10
    assert any("--minutes 1.0 ran out" in note for note in result.notes)
    assert not state(result.checkpoint)["progress"]["finished"]


def test_cli_adapts_and_bad_input_exits_2(
    smoke: SmokeCheckpoint, hidden: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cli"
    argv = ["adapt", str(smoke.checkpoint), "--challenges", str(hidden), "--out", str(out)]
    assert main([*argv, "--steps", "1", "--num-aug", "1", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "adapted to 3 task(s)" in printed and f"{out / 'step_1'}" in printed
    assert main(argv) == 2
    assert "--steps N and/or --minutes M" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="2"):  # argparse's choices
        main([*argv, "--steps", "1", "--train", "nope"])
    assert "invalid choice: 'nope'" in capsys.readouterr().err
    missing = ["adapt", str(smoke.checkpoint), "--challenges", str(tmp_path / "none.json"), "--out", str(out)]
    assert main([*missing, "--steps", "1"]) == 2
    assert "file not found" in capsys.readouterr().err


def test_eval_adapts_to_the_task_file_then_scores_its_test_pairs(
    smoke: SmokeCheckpoint, hidden: Path, tmp_path: Path
) -> None:
    from trm.eval import main as eval_main

    out = tmp_path / "eval"
    argv = [str(smoke.checkpoint), "--output-dir", str(out), "--adapt-challenges", str(hidden)]
    assert eval_main([*argv, "--adapt-steps", "1", "--adapt-num-aug", "1"]) == 0
    metrics = json.loads((out / "evaluator_ARC_step_1" / "metrics.json").read_text())
    assert metrics["step"] == 1 and "ARC/pass@2" in metrics  # the adapted step_1, with the ARC evaluator
    scored = json.loads((out / "adapt" / "dataset" / "test_puzzles.json").read_text())
    solutions = json.loads(hidden.with_name("hidden_solutions.json").read_text())
    assert {t: [p["output"] for p in task["test"]] for t, task in scored.items()} == solutions
    assert eval_main(argv) == 2  # no budget


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_every_architecture_with_a_puzzle_table_adapts(arch: str, hidden: Path, tmp_path: Path) -> None:
    from tests.e2e.test_arch import TINY as TINY_BY_ARCH
    from trm.model.registry import build_model, model_config
    from trm.training.config import compose

    cfg = compose([*TINY_BY_ARCH[arch], "device=cpu", "compile=false", "global_batch_size=2"])
    fresh = model_config(
        cfg.arch, batch_size=2, seq_len=900, vocab_size=12, num_puzzle_identifiers=3, forward_dtype="float32"
    )
    weights = build_model(fresh).state_dict()
    source = AdaptSource(cfg, weights, None, mean_trained_row(weights[PUZZLE_EMB_KEY]), f"fresh {arch}")
    result = adapt(source, hidden, tmp_path / arch, AdaptSettings(steps=1, num_aug=1, progress=False))
    table = state(result.checkpoint)["model"][PUZZLE_EMB_KEY]
    assert result.step == 1 and len(table) == 1 + 3 * 2 and result.rows_from_mean == 6


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_out_that_holds_foreign_files_or_is_a_file_is_refused(
    smoke: SmokeCheckpoint, hidden: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "adapt.json").write_text("my notes")
    (out / "inputs").mkdir()
    (out / "inputs" / "tasks_adapt_challenges.json").write_text("my tasks")
    before = _tree(out)
    argv = ["adapt", str(smoke.checkpoint), "--challenges", str(hidden), "--steps", "0", "--num-aug", "1"]
    assert main([*argv, "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "refusing to use it" in err and len(err.splitlines()) == 1
    assert _tree(out) == before
    a_file = tmp_path / "a_file"
    a_file.write_text("mine")
    assert main([*argv, "--out", str(a_file), "--quiet"]) == 2
    assert "it is a file, not a folder" in capsys.readouterr().err and a_file.read_text() == "mine"
    run = smoke.checkpoint.parent  # the run that holds the checkpoint is a source, never the output
    assert main([*argv, "--out", str(run), "--quiet"]) == 2


def test_out_that_is_a_symbolic_link_is_refused_without_following_it(
    smoke: SmokeCheckpoint, hidden: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    empty, marked = tmp_path / "empty", tmp_path / "marked"
    empty.mkdir()
    marked.mkdir()
    write_marker(marked, tool="trm adapt", kind=ADAPT_KIND)  # an earlier adaptation's folder
    before = {folder: _tree(folder) for folder in (empty, marked)}
    argv = ["adapt", str(smoke.checkpoint), "--challenges", str(hidden), "--steps", "0", "--num-aug", "1"]
    for target in (empty, marked, tmp_path / "not_there"):
        link = tmp_path / f"link_to_{target.name}"
        link.symlink_to(target)
        assert main([*argv, "--out", str(link), "--quiet"]) == exit_codes.CONFIG_ERROR
        err = capsys.readouterr().err.strip()
        assert f"--out {link}: it is a symbolic link (to {target})" in err and len(err.splitlines()) == 1
    assert {folder: _tree(folder) for folder in (empty, marked)} == before
    assert not (tmp_path / "not_there").exists()


def test_a_refused_dataset_leaves_the_staged_inputs_as_they_were(
    smoke: SmokeCheckpoint, hidden: Path, tmp_path: Path
) -> None:
    source = source_from_checkpoint(smoke.checkpoint)
    out = tmp_path / "run"
    adapt(source, hidden, out, AdaptSettings(steps=0, **FAST))
    before = _tree(out / "inputs")
    other = write_tasks(tmp_path / "other", "other", 2, seed=9, colours=3)
    with pytest.raises(TRMError, match="already exists and holds a different"):
        adapt(source, other, out, AdaptSettings(steps=0, **FAST))
    assert _tree(out / "inputs") == before
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".inputs")) == []


def test_an_adaptation_folder_another_process_owns_is_refused_before_anything_is_written(
    smoke: SmokeCheckpoint, hidden: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from trm.runlock import RunLock

    out = tmp_path / "run"
    argv = ["adapt", str(smoke.checkpoint), "--challenges", str(hidden), "--num-aug", "2", "--quiet"]
    assert main([*argv, "--steps", "0", "--out", str(out)]) == 0
    before = _tree(out)
    other = RunLock(out, "adaptation")  # a second `trm adapt --out` of this folder, training
    assert other.try_acquire("python -m trm adapt ... --out run (the first)") is None
    try:
        assert main([*argv, "--steps", "2", "--out", str(out)]) == exit_codes.CONFIG_ERROR
    finally:
        other.release()
    err = capsys.readouterr().err.strip()
    assert f"{out} is in use by another process (pid {os.getpid()}" in err and "(the first)" in err
    assert "choose another --out" in err and len(err.splitlines()) == 1
    before.pop(LOCK_FILE)  # the lock file holds the holder's record: the only file that changed
    after = _tree(out)
    after.pop(LOCK_FILE)
    assert after == before
    assert [c.step for c in ckpt.find_complete(out)] == [0]


def test_the_adaptation_holds_its_folder_while_it_trains(
    smoke: SmokeCheckpoint, hidden: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trm.runlock import RunLock

    out = tmp_path / "run"
    seen = []
    train = Trainer.train

    def probing_train(self: Trainer) -> int:
        seen.append(RunLock(out, "probe").try_acquire("probe"))
        return train(self)

    monkeypatch.setattr(Trainer, "train", probing_train)
    adapt(source_from_checkpoint(smoke.checkpoint), hidden, out, AdaptSettings(steps=1, **FAST))
    (holder,) = seen
    assert holder is not None and holder.pid == os.getpid()  # held while the trainer ran
    RunLock(out, "probe").acquire("after").release()  # and released at the end


def _adapted(smoke: SmokeCheckpoint, hidden: Path, tmp_path: Path) -> tuple[Path, list[str]]:
    """An adaptation folder (no training steps) and the command line that made it, less its --challenges."""
    out = tmp_path / "run"
    argv = ["adapt", str(smoke.checkpoint), "--steps", "0", "--num-aug", "2", "--out", str(out), "--quiet"]
    assert main([*argv, "--challenges", str(hidden)]) == 0
    return out, argv


def test_resuming_with_another_task_file_names_adapts_own_fix(
    smoke: SmokeCheckpoint, hidden: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out, argv = _adapted(smoke, hidden, tmp_path)
    other = write_tasks(tmp_path / "other", "other", 2, seed=9, colours=3)
    assert main([*argv, "--challenges", str(other)]) == exit_codes.CONFIG_ERROR
    err = capsys.readouterr().err.strip()
    assert f"--out {out}: refusing to resume it" in err and "choose a new --out" in err
    assert "--overwrite" not in err and "--output-dir" not in err  # flags `trm adapt` does not have
    assert len(err.splitlines()) == 1


def test_a_dataset_folder_the_builder_did_not_write_is_refused_in_adapts_words(
    smoke: SmokeCheckpoint, hidden: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out, argv = _adapted(smoke, hidden, tmp_path)
    dataset = out / "dataset"
    for path in sorted(dataset.rglob("*"), reverse=True):  # the user's own files in its place
        path.rmdir() if path.is_dir() else path.unlink()
    (dataset / "notes.txt").write_text("mine")
    assert main([*argv, "--challenges", str(hidden)]) == exit_codes.CONFIG_ERROR
    err = capsys.readouterr().err.strip()
    assert f"the adaptation's dataset folder {dataset}: refusing to replace it" in err
    assert "--output-dir" not in err and len(err.splitlines()) == 1
    assert [p.name for p in dataset.iterdir()] == ["notes.txt"]  # nothing of the user's was touched


@pytest.mark.parametrize(
    ("grid", "said"),
    [([[1] * 31] * 31, "grid is 31x31, larger than 30x30"), ([[10]], "colour 10 outside 0..9")],
)
def test_a_task_with_a_grid_the_builder_refuses_is_one_line_naming_it(
    smoke: SmokeCheckpoint, tmp_path: Path, capsys: pytest.CaptureFixture, grid: list, said: str
) -> None:
    path = tmp_path / "bad_challenges.json"
    path.write_text(
        json.dumps({"t31": {"train": [{"input": grid, "output": [[1]]}], "test": [{"input": [[1]]}]}})
    )
    out = tmp_path / "out"
    argv = ["adapt", str(smoke.checkpoint), "--challenges", str(path), "--out", str(out), "--steps", "0"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert f"task 't31': train[0].input: {said}" in err and len(err.splitlines()) == 1
    assert not out.exists()  # nothing written for a task file that cannot be used


def test_a_damaged_checkpoint_is_refused_before_adapting(
    smoke: SmokeCheckpoint, hidden: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    import shutil

    step = tmp_path / "step_4"
    shutil.copytree(smoke.checkpoint, step)
    data = bytearray((step / ckpt.STATE).read_bytes())
    data[:64] = bytes(64)  # a zeroed header
    (step / ckpt.STATE).write_bytes(bytes(data))
    out = tmp_path / "out"
    assert main(["adapt", str(step), "--challenges", str(hidden), "--out", str(out), "--steps", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"adapt: checkpoint {step} is damaged or incomplete (state.pt does not match its sha256" in err
    assert len(err.splitlines()) == 1 and not out.exists()


def test_adapt_runs_exactly_the_steps_asked_quietly(
    smoke: SmokeCheckpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two shipped evaluation tasks: 7 rows an epoch in puzzles of up to 5 examples, so batches waste the
    # rest of their truncated last visit; with the old one-epoch margin `--steps 12` at batch 8 stopped at
    # step 10 and `--steps 5` at batch 1 (cheaper, the same cause) at step 4.
    two = smoke.write_challenges("two_challenges.json", list(smoke.challenges)[:2])
    out = tmp_path / "five"
    argv = [
        "adapt",
        str(smoke.checkpoint),
        "global_batch_size=1",
        "--challenges",
        str(two),
        "--out",
        str(out),
    ]
    assert main([*argv, "--steps", "5", "--num-aug", "8", "--quiet"]) == 0
    printed = capsys.readouterr()
    assert "(step 5)" in printed.out
    assert "train:" not in printed.err + printed.out  # --quiet: no trainer progress bar either
    assert [c.step for c in ckpt.find_complete(out)] == [5]


def test_the_adaptation_pass_holds_every_step_for_any_batch_and_row_count(
    smoke: SmokeCheckpoint, hidden: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trm.adapt.run import adaptation_epochs
    from trm.adapt.tasks import build_demonstrations
    from trm.data.loader import PuzzleLoader
    from trm.training.throughput import total_steps

    monkeypatch.setattr(PuzzleLoader, "_train_batch", lambda *_: None)  # count batches, collate none
    two = smoke.write_challenges("two_challenges.json", list(smoke.challenges)[:2])
    for name, tasks, num_aug in (("two", two, 2), ("two0", two, 0), ("hidden", hidden, 8)):
        dataset = tmp_path / name / "dataset"
        staged = stage_tasks(tasks, None, tmp_path / name / "inputs")
        build_demonstrations(staged, dataset, num_aug=num_aug, seed=42, progress=False)
        meta = PuzzleLoader([dataset], "train", global_batch_size=1).metadata
        for gbs in (1, 3, 8, 13, 100):  # 100: more rows than an epoch holds
            for steps in (1, 5, 12):
                epochs = adaptation_epochs(dataset, gbs, steps)
                assert total_steps(epochs, meta.total_groups, meta.mean_puzzle_examples, gbs) >= steps
                for seed in (0, 7):
                    loader = PuzzleLoader(
                        [dataset], "train", global_batch_size=gbs, seed=seed, epochs_per_iter=epochs
                    )
                    batches = sum(1 for _ in loader.iter_train())
                    assert batches >= steps, (name, gbs, steps, seed)
                    assert loader.guaranteed_batches(epochs) <= batches


def _mixed_tasks(smoke: SmokeCheckpoint, hidden: Path, folder: Path) -> tuple[Path, list[str], dict]:
    """A task file (with solutions) of the two tasks the smoke run trained on and the three hidden ones."""
    from trm.data.arc_source import DEFAULT_PREFIX

    seen = list(smoke.challenges)[:2]
    shipped = json.loads(
        DEFAULT_PREFIX.with_name(DEFAULT_PREFIX.name + "_evaluation_solutions.json").read_text()
    )
    mixed = folder / "mixed_challenges.json"
    mixed.write_text(json.dumps({**{t: smoke.challenges[t] for t in seen}, **json.loads(hidden.read_text())}))
    answers = json.loads(hidden.with_name("hidden_solutions.json").read_text())
    mixed.with_name("mixed_solutions.json").write_text(
        json.dumps({**{t: shipped[t] for t in seen}, **answers})
    )
    return mixed, seen, answers


def test_tasks_with_trained_rows_are_named_and_unseen_only_leaves_them_out(
    smoke: SmokeCheckpoint, hidden: Path, tmp_path: Path
) -> None:
    mixed, seen, answers = _mixed_tasks(smoke, hidden, tmp_path)
    source = source_from_checkpoint(smoke.checkpoint)
    every = adapt(source, mixed, tmp_path / "all", AdaptSettings(steps=0, num_aug=1, progress=False))
    assert sorted(every.trained_tasks) == sorted(seen) and every.tasks == 5
    assert any("2 of 5 task(s) have trained puzzle-embedding rows" in note for note in every.notes)
    assert sorted(json.loads((tmp_path / "all" / "adapt.json").read_text())["trained_tasks"]) == sorted(seen)

    unseen = adapt(
        source,
        mixed,
        tmp_path / "unseen",
        AdaptSettings(steps=0, num_aug=1, progress=False),
        unseen_only=True,
    )
    assert unseen.trained_tasks == () and unseen.tasks == 3 and sorted(unseen.skipped) == sorted(seen)
    assert set(json.loads((unseen.dataset / "test_puzzles.json").read_text())) == set(answers)

    only_seen = smoke.write_challenges("only_seen_challenges.json", seen)
    with pytest.raises(TRMError, match=r"all 2 usable task\(s\) have trained puzzle-embedding rows"):
        adapt(source, only_seen, tmp_path / "none", AdaptSettings(steps=0, progress=False), unseen_only=True)
    unnamed = dataclasses.replace(source, identifiers=None)  # which rows are trained cannot be told
    with pytest.raises(TRMError, match="names of its puzzle rows are unknown"):
        adapt(unnamed, mixed, tmp_path / "none", AdaptSettings(steps=0, progress=False), unseen_only=True)
    assert not (tmp_path / "none").exists()


@pytest.mark.e2e
def test_eval_on_tasks_with_trained_rows_warns_and_unseen_only_scores_the_others(
    smoke: SmokeCheckpoint, hidden: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trm.eval import main as eval_main

    mixed, _seen, answers = _mixed_tasks(smoke, hidden, tmp_path)
    budget = ["--adapt-challenges", str(mixed), "--adapt-steps", "0", "--adapt-num-aug", "1"]
    assert eval_main([str(smoke.checkpoint), "--output-dir", str(tmp_path / "all"), *budget]) == 0
    err = capsys.readouterr().err
    assert (
        "WARNING: 2 of 5 task(s) have trained puzzle-embedding rows" in err and "--adapt-unseen-only" in err
    )
    metrics = json.loads((tmp_path / "all" / "evaluator_ARC_step_0" / "metrics.json").read_text())
    assert len(metrics["warnings"]) == 1 and "2 of 5 task(s)" in metrics["warnings"][0]

    unseen = tmp_path / "unseen"
    assert (
        eval_main([str(smoke.checkpoint), "--output-dir", str(unseen), *budget, "--adapt-unseen-only"]) == 0
    )
    assert "WARNING" not in capsys.readouterr().err
    assert "warnings" not in json.loads((unseen / "evaluator_ARC_step_0" / "metrics.json").read_text())
    assert set(json.loads((unseen / "adapt" / "dataset" / "test_puzzles.json").read_text())) == set(answers)


@pytest.mark.parametrize(
    ("command", "flags", "said"),
    [
        ("adapt", ["--steps", "-1"], "--steps -1: must be >= 0"),
        ("eval", ["--adapt-challenges", "x.json", "--adapt-steps", "-1"], "--adapt-steps -1: must be >= 0"),
        ("eval", ["--adapt-challenges", "x.json"], "--adapt-steps N and/or --adapt-minutes M"),
        (
            "eval",
            ["--adapt-steps", "5", "--adapt-unseen-only"],
            "--adapt-steps, --adapt-unseen-only without --adapt-c",
        ),
    ],
)
def test_adaptation_flags_are_checked_before_the_checkpoint_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, flags: list[str], said: str
) -> None:
    from trm.eval import main as eval_main

    missing = str(tmp_path / "step_9")  # no checkpoint there: the flags are checked first
    if command == "adapt":
        code = main(["adapt", missing, "--challenges", "x.json", "--out", str(tmp_path / "o"), *flags])
    else:
        code = eval_main([missing, *flags])
    err = capsys.readouterr().err.strip()
    assert code == 2 and said in err and len(err.splitlines()) == 1
