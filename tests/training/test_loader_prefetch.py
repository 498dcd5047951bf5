"""`loader_prefetch=k` builds train batches ahead in a thread: the run is bit-identical to one without it, also
when it is stopped by SIGTERM (with batches built past the step it saved) and resumed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import SMOKE_BUILD
from tests.training.test_trainer_inprocess import assert_same_state, metric_rows, train
from trm import exit_codes
from trm.data.build_arc import build_arc_dataset
from trm.distributed import DistInfo
from trm.errors import TRMError
from trm.training.config import compose, fill_run_defaults
from trm.training.loop import Trainer
from trm.training.recipes import get_recipe

RUN = (
    get_recipe("debug-tiny")
    .with_changes(global_batch_size=8, epochs=2, eval_interval=1, evaluators=[])
    .overrides
)
EVALUATE = "evaluate=false"  # the train batches are the subject: no evaluation pass


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("data") / "arc"
    build_arc_dataset(out, form="compact", **{**SMOKE_BUILD, "max_puzzles": 4, "num_aug": 2})
    return out


def run(dataset: Path, run_dir: Path, *extra: str, stop_at: int | None = None) -> tuple[int, Trainer]:
    """Train over the real loader (built by the trainer from the config); SIGTERM after step `stop_at`."""
    cfg = compose([*RUN, EVALUATE, f"data_paths=[{dataset}]", f"checkpoint_path={run_dir}", *extra])
    fill_run_defaults(cfg)
    return train(Trainer.create(cfg, DistInfo()), stop_at=stop_at)


def test_prefetched_training_stopped_and_resumed_equals_training_without_it(dataset: Path, tmp_path: Path):
    code, plain = run(dataset, tmp_path / "plain")
    assert code == exit_codes.OK
    steps = plain.progress.step
    assert steps >= 4  # several batches per pass: the thread really builds past the stop

    code, stopped = run(dataset, tmp_path / "ahead", "loader_prefetch=3", stop_at=2)
    assert code == exit_codes.SAVED_RETRY and stopped.components.train_loader.prefetch == 3
    code, resumed = run(dataset, tmp_path / "ahead", "loader_prefetch=3")
    assert code == exit_codes.OK and resumed.progress.step == steps

    assert_same_state(plain, resumed)
    assert metric_rows(tmp_path / "plain") == metric_rows(tmp_path / "ahead")


@pytest.mark.e2e
def test_prefetch_with_the_depth_curriculum_stopped_in_the_shallow_stage_resumes_bit_exactly(
    dataset: Path, tmp_path: Path
):
    """The depth curriculum changes the model between steps while the thread builds batches ahead: a stop in
    the shallow stage with batches built past it resumes, crosses into full depth, and ends as a run with
    neither the stop nor the prefetch."""
    from trm.training import curriculum

    # Steps 1-3 at H 1, steps 4-6 at H 2 (L stays 1: the cheapest model with a shallower stage).
    deep = ("arch.H_cycles=2", "depth_curriculum.ramp=0.5", "depth_curriculum.stages=2")
    code, plain = run(dataset, tmp_path / "plain", *deep)
    assert code == exit_codes.OK
    steps = plain.progress.step
    schedule = curriculum.run_schedule(plain.cfg, steps)
    assert len(schedule) == 2 and schedule[0].last >= 2  # step 2 is shallow, a later one is full depth

    code, stopped = run(dataset, tmp_path / "ahead", *deep, "loader_prefetch=3", stop_at=2)
    assert code == exit_codes.SAVED_RETRY and stopped.components.train_loader.prefetch == 3
    code, resumed = run(dataset, tmp_path / "ahead", *deep, "loader_prefetch=3")
    assert code == exit_codes.OK and resumed.progress.step == steps
    assert resumed.resumed_from == tmp_path / "ahead" / "step_2"

    assert_same_state(plain, resumed)
    assert metric_rows(tmp_path / "plain") == metric_rows(tmp_path / "ahead")


def test_a_negative_prefetch_is_one_clear_error(dataset: Path, tmp_path: Path):
    with pytest.raises(TRMError, match=r"loader_prefetch=-1 must be ≥ 0"):
        compose([*RUN, f"data_paths=[{dataset}]", "loader_prefetch=-1"])
