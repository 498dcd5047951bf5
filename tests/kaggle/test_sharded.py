"""`infer --ranks N`: task groups on rank processes, merged by the coordinator, fallbacks for lost groups."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.adapt.generated import write_tasks
from tests.helpers import SmokeCheckpoint
from trm.commands import main
from trm.errors import TRMError
from trm.evaluation.voting import validate_submission
from trm.kaggle.competition import competition
from trm.kaggle.groups import groups_of_rank, largest_rank_share, split_tasks
from trm.kaggle.plan import Speed, Split, plan_time
from trm.kaggle.ranks import RankProcess, rank_environment, resolve_ranks, start_rank, wait_ranks


def _tasks(inputs: dict[str, int]) -> dict[str, dict]:
    return {t: {"train": [], "test": [{"input": [[0]]}] * n} for t, n in inputs.items()}


# --- the split, the ranks, the plan (no model) ---------------------------------------------------------


def test_tasks_split_into_groups_balanced_by_test_inputs_and_dealt_to_ranks() -> None:
    data = _tasks({"e": 1, "a": 3, "d": 1, "b": 2, "c": 1})
    assert split_tasks(data, 2) == [["a", "d"], ["e", "b", "c"]]  # 4 and 4 test inputs, file order kept
    assert split_tasks(dict(reversed(list(data.items()))), 2) == [["d", "a"], ["c", "b", "e"]]  # same groups
    assert split_tasks(data, 1) == [list(data)]
    assert split_tasks(_tasks({"a": 1, "b": 1}), 4) == [["a"], ["b"]]  # no empty group
    assert [groups_of_rank(5, 2, r) for r in (0, 1)] == [[0, 2, 4], [1, 3]]
    # The busiest rank of 4 groups on 2 ranks: (tasks, test inputs, groups).
    assert largest_rank_share(_tasks({t: 1 for t in "abcdefg"}), 4, 2) == (4, 4, 2)  # 2+2 | 2+1
    with pytest.raises(TRMError, match="--groups 0"):
        split_tasks(data, 0)


def test_ranks_resolve_to_the_visible_gpus_and_drop_torchruns_variables() -> None:
    assert resolve_ranks("auto", "auto", ["0", "1", "2", "3"]) == 4
    assert resolve_ranks("auto", "cpu", ["0", "1"]) == 1 and resolve_ranks("auto", "auto", []) == 1
    assert resolve_ranks("2", "cpu", []) == 2  # CPU ranks (tests, a dry run)
    with pytest.raises(TRMError, match=r"--ranks 4: only 2 CUDA GPU\(s\) visible; use --ranks 2 or auto"):
        resolve_ranks("4", "cuda", ["0", "1"])
    with pytest.raises(TRMError, match="--ranks 'many'"):
        resolve_ranks("many", "auto", [])
    with pytest.raises(TRMError, match="--ranks 0"):
        resolve_ranks("0", "auto", [])
    env = rank_environment({"PATH": "/bin", "RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}, "GPU-uuid-3")
    assert env == {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "GPU-uuid-3"}
    assert rank_environment({"CUDA_VISIBLE_DEVICES": "5"}, None) == {"CUDA_VISIBLE_DEVICES": "5"}


def test_a_rank_that_fails_is_killed_or_runs_late_is_told_apart(tmp_path: Path) -> None:
    py = sys.executable
    ranks = [
        start_rank(0, [py, "-c", "pass"], dict(os.environ), tmp_path / "r0.log"),
        start_rank(1, [py, "-c", "import sys; print('boom'); sys.exit(3)"], dict(os.environ), tmp_path / "r1.log"),
        start_rank(2, [py, "-c", "import time; time.sleep(60)"], dict(os.environ), tmp_path / "r2.log"),
        start_rank(3, [py, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], dict(os.environ),
                   tmp_path / "r3.log"),
    ]  # fmt: skip
    t0 = time.time()
    wait_ranks(ranks, deadline=time.time() + 1.0, grace=0.5)
    assert time.time() - t0 < 5  # the late rank did not hold the coordinator up
    assert [r.outcome for r in ranks] == [
        "exit 0",
        "exit 3",
        "out of time (stopped at the deadline)",
        "killed by SIGKILL",
    ]
    assert all(r.process.poll() is not None for r in ranks) and "boom" in (tmp_path / "r1.log").read_text()
    assert [r.ok for r in ranks] == [True, False, False, False] and isinstance(ranks[0], RankProcess)


def test_the_work_folder_is_new_empty_or_an_earlier_ranked_runs(tmp_path: Path) -> None:
    from tests.helpers import ended_pid
    from trm.kaggle.sharded import claim_work
    from trm.safe_remove import MARKER, host_tag, owner_tag

    work = tmp_path / "adapt"
    claim_work(work, [tmp_path / "c.json"])
    assert (work / MARKER).is_file()
    claim_work(work, [tmp_path / "c.json"])  # its own: reused
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(TRMError, match=r"--adapt-dir .*mine: refusing to use it"):
        claim_work(mine, [tmp_path / "c.json"])
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    with pytest.raises(TRMError, match="which this command reads"):
        claim_work(tmp_path, [tmp_path / "c.json"])
    # A claim killed while it wrote its marker left the marker's temp file alone in the folder: claimed again;
    # the temp of a claim still running (this process) is not another's to clear.
    killed = tmp_path / "killed"
    killed.mkdir()
    (killed / f"{MARKER}.{host_tag()}-{ended_pid()}.k2x9.tmp").write_text('{"tool": ')
    claim_work(killed, [tmp_path / "c.json"])
    assert [p.name for p in killed.iterdir()] == [MARKER]
    running = tmp_path / "running"
    running.mkdir()
    (running / f"{MARKER}.{owner_tag()}.k2x9.tmp").write_text('{"tool": ')
    with pytest.raises(TRMError, match="refusing to use it"):
        claim_work(running, [tmp_path / "c.json"])


def test_the_plan_reflects_the_ranks_used() -> None:
    speed = Speed(adapt_step_seconds=7.5, adapt_step_rows=768, infer_row_seconds=0.1, source="test")
    common = dict(
        tasks=120, unseen_tasks=120, test_inputs=156, num_aug=1000, adapt_steps=None, max_minutes=None
    )
    one = plan_time(competition(), speed, adapt_minutes=300, **common)  # type: ignore[arg-type]
    # Four ranks, one group each: the busiest has 39 of the 156 test inputs, inference a quarter as long.
    four = plan_time(
        competition(),
        speed,
        adapt_minutes=300,
        split=Split(4, 4, 30, 39, 1),
        **common,  # type: ignore[arg-type]
    )
    assert one.inference_minutes_needed == pytest.approx(
        260
    ) and four.inference_minutes_needed == pytest.approx(65)
    assert (four.adapt_steps, four.adapt_minutes) == (2400, 300)
    text = four.describe()
    assert "ranks          4 process(es), one per GPU, in parallel; 4 task group(s)" in text
    assert "the busiest rank: 1 group(s), 30 tasks, 39 test inputs" in text
    assert "39,000 rows (39 test inputs x 1000)" in text and "GPUs idle" not in text
    assert "3 of the 4 GPUs idle" in one.describe() and "  ranks " not in one.describe()
    # Two groups on each of 2 ranks: the steps are per group, the minutes the rank's whole adaptation.
    two = plan_time(
        competition(),
        speed,
        adapt_minutes=300,
        split=Split(2, 4, 60, 78, 2),
        **common,  # type: ignore[arg-type]
    )
    assert (two.adapt_steps, two.adapt_minutes) == (1200, 300) and "1,200 steps per group" in two.describe()
    assert "2 of the 4 GPUs idle" in two.describe()
    by_steps = plan_time(
        competition(),
        speed,
        **{**common, "adapt_steps": 100},
        adapt_minutes=None,
        split=Split(2, 4, 60, 78, 2),
    )  # type: ignore[arg-type]
    assert by_steps.adapt_minutes == pytest.approx(
        2 * 100 * 7.5 / 60
    )  # both groups' steps, one after the other


# --- end to end on CPU ranks (a tiny real checkpoint) ---------------------------------------------------


@pytest.fixture(scope="module")
def hidden(smoke: SmokeCheckpoint) -> Path:
    """Four tasks without trained rows, one with them."""
    path = write_tasks(smoke.root / "hidden", "hidden", 4, seed=5, colours=4)
    tasks = json.loads(path.read_text())
    seen = next(iter(smoke.challenges))
    path.write_text(json.dumps({seen: smoke.challenges[seen], **tasks}))
    return path


def _infer(bundle: Path, challenges: Path, out: Path, *flags: str) -> list[str]:
    small = ["--num-aug", "3", "--device", "cpu", "--quiet", "--adapt-steps", "2", "--adapt-num-aug", "2"]
    argv = ["infer", "--weights", str(bundle), "--challenges", str(challenges), "--out", str(out), *small]
    return [*argv, "--adapt-dir", str(out.parent / (out.stem + "-work")), *flags]


@pytest.fixture(scope="module")
def one_rank(smoke: SmokeCheckpoint, bundle_dir: Path, hidden: Path) -> dict:
    """The reference: two groups adapted and inferred one after the other in this process, with the
    threads of one of two CPU ranks (the thread count orders floating-point sums)."""
    import torch

    from trm.kaggle.sharded import cpu_threads

    out = smoke.root / "one" / "submission.json"
    out.parent.mkdir()
    threads = torch.get_num_threads()
    torch.set_num_threads(cpu_threads(2))
    try:
        assert main(_infer(bundle_dir, hidden, out, "--ranks", "1", "--groups", "2")) == 0
    finally:
        torch.set_num_threads(threads)
    return json.loads(out.read_text())


@pytest.mark.dist
@pytest.mark.e2e
@pytest.mark.kaggle
def test_two_cpu_ranks_write_the_one_rank_submission(
    smoke: SmokeCheckpoint, bundle_dir: Path, hidden: Path, one_rank: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    out = smoke.root / "two" / "submission.json"
    out.parent.mkdir()
    assert main(_infer(bundle_dir, hidden, out, "--ranks", "2")) == 0
    printed = capsys.readouterr().out
    assert "ranks          2 process(es), one per GPU, in parallel; 2 task group(s)" in printed
    assert printed.index("time plan for") < printed.index("group 0 on rank 0")
    assert "group 0 on rank 0: 3 task(s), adapted (2 step(s))" in printed
    assert "group 1 on rank 1: 2 task(s), adapted (2 step(s))" in printed and "fallback" not in printed
    submission = json.loads(out.read_text())
    tasks = json.loads(hidden.read_text())
    validate_submission(submission, tasks)
    assert list(submission) == list(tasks)  # the file's task order
    assert submission == one_rank  # the groups, not the ranks, decide the submission
    work = out.parent / "submission-work"
    ranks = json.loads((work / "ranks.json").read_text())
    assert [r["outcome"] for r in ranks["ranks"]] == ["exit 0", "exit 0"]
    assert json.loads((work / "group-1" / "adapt.json").read_text())["step"] == 2  # each group its own run


@pytest.mark.dist
@pytest.mark.e2e
@pytest.mark.kaggle
def test_a_killed_rank_leaves_a_complete_submission_with_un_adapted_predictions_for_its_tasks(
    smoke: SmokeCheckpoint, bundle_dir: Path, hidden: Path, one_rank: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    from trm.kaggle.groups import split_tasks
    from trm.kaggle.infer import run_inference

    out = smoke.root / "killed" / "submission.json"
    out.parent.mkdir()
    work = out.parent / "submission-work"
    killed: list[int] = []

    def kill_rank_1() -> None:  # as soon as the coordinator has started it (it needs seconds to import torch)
        for _ in range(600):
            if (work / "ranks.json").is_file():
                pid = json.loads((work / "ranks.json").read_text())["ranks"][1]["pid"]
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_rank_1)
    killer.start()
    capsys.readouterr()
    code = main(_infer(bundle_dir, hidden, out, "--ranks", "2"))
    killer.join()
    assert code == 0 and killed
    printed = capsys.readouterr()
    tasks = json.loads(hidden.read_text())
    group0, group1 = split_tasks(tasks, 2)
    submission = json.loads(out.read_text())
    validate_submission(submission, tasks)  # complete
    assert {t: submission[t] for t in group0} == {t: one_rank[t] for t in group0}  # rank 0's work kept
    # Rank 1's tasks: what the bundle predicts without adaptation, said in the output.
    plain = smoke.root / "killed" / "plain.json"
    subset = _subset(hidden, group1, plain.parent)
    run_inference(bundle_dir, subset, plain, num_aug=3, device="cpu", progress=False)
    assert {t: submission[t] for t in group1} == json.loads(plain.read_text())
    assert (
        "group 1 on rank 1: 2 task(s), fallback (rank 1: killed by SIGKILL; group: no result)" in printed.out
    )
    assert (
        f"get the un-adapted bundle's predictions (3 augmentation round(s)): {', '.join(group1)}"
        in printed.out
    )
    ranks = json.loads((work / "ranks.json").read_text())
    assert [r["outcome"] for r in ranks["ranks"]] == ["exit 0", "killed by SIGKILL"]


def _subset(challenges: Path, tasks: list[str], folder: Path) -> Path:
    data = json.loads(challenges.read_text())
    path = folder / "subset_challenges.json"
    path.write_text(json.dumps({t: data[t] for t in tasks}))
    return path


@pytest.mark.e2e
@pytest.mark.kaggle
def test_a_group_that_raises_gets_fallbacks_and_an_earlier_runs_result_is_never_merged(
    smoke: SmokeCheckpoint, bundle_dir: Path, hidden: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trm.kaggle import sharded
    from trm.kaggle.groups import split_tasks

    out = smoke.root / "raised" / "submission.json"
    out.parent.mkdir()
    kw = dict(ranks=1, groups=2, num_aug=2, device="cpu", progress=False, adapt_dir=out.parent / "work")
    first = sharded.run_sharded(bundle_dir, hidden, out, **kw)  # type: ignore[arg-type]
    assert [g["result"] for g in first.groups] == ["not adapted", "not adapted"]
    complete = json.loads(out.read_text())
    assert (out.parent / "work" / "groups" / "group-1.json").is_file()  # the first run's result stays there

    real = sharded._run_group

    def group_1_raises(job, index, *args):  # type: ignore[no-untyped-def]
        if index == 1:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return real(job, index, *args)

    monkeypatch.setattr(sharded, "_run_group", group_1_raises)
    second = sharded.run_sharded(bundle_dir, hidden, out, **kw)  # type: ignore[arg-type]
    group1 = split_tasks(json.loads(hidden.read_text()), 2)[1]
    assert second.groups[1]["result"] == (
        "fallback (rank 0: exit 1; group: failed: RuntimeError: CUDA error: an illegal memory access was encountered)"
    )
    assert any(f"predictions (2 augmentation round(s)): {', '.join(group1)}" in n for n in second.notes)
    # Without adaptation the fallback predicts what the group itself did: the same complete file.
    assert json.loads(out.read_text()) == complete
    record = json.loads((out.parent / "work" / "groups" / "group-1.json").read_text())
    assert record["status"] == "failed" and "illegal memory access" in record["error"]
    # A done result written by another run (its id differs) is not this run's.
    job = sharded.Job(**json.loads((out.parent / "work" / "job.json").read_text()))
    stale = json.loads((out.parent / "work" / "groups" / "group-0.json").read_text())
    assert sharded._read_result(job, out.parent / "work", 0)[0] == stale
    (out.parent / "work" / "groups" / "group-0.json").write_text(
        json.dumps({**stale, "run_id": "an-earlier-run"})
    )
    assert sharded._read_result(job, out.parent / "work", 0) == (None, "no result of this run")
