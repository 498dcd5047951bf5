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


def test_a_negative_prefetch_is_one_clear_error(dataset: Path, tmp_path: Path):
    with pytest.raises(TRMError, match=r"loader_prefetch=-1 must be ≥ 0"):
        compose([*RUN, f"data_paths=[{dataset}]", "loader_prefetch=-1"])
