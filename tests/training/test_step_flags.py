"""The per-step flags: named fields in and out of one all-reduce; a flag raised on one rank is seen on all."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from trm.distributed import DistInfo
from trm.training.step_flags import StepFlags, WriterFlags


def test_the_fields_round_trip_through_the_reduced_list() -> None:
    flags = StepFlags(stop=True, rolling=True, writer=WriterFlags(disk_full=True), nonfinite=(False, True))
    values = flags.as_list()
    assert values == [True, False, True, False, True]  # stop, save, rolling, writer.failed, writer.disk_full
    assert StepFlags.from_list([*values, False, True]) == flags
    assert StepFlags.from_list(StepFlags().as_list()) == StepFlags()


def test_one_process_keeps_its_flags_and_reads_the_nonfinite_tensor() -> None:
    flags = StepFlags(save=True, writer=WriterFlags(failed=True))
    assert flags.any_rank(DistInfo()) == flags
    both = flags.any_rank(DistInfo(), nonfinite=torch.tensor([True, False]))
    assert both == StepFlags(save=True, writer=WriterFlags(failed=True), nonfinite=(True, False))
    assert both.wants_save and not StepFlags(writer=WriterFlags(failed=True)).wants_save
    assert WriterFlags(disk_full=True).any_rank(DistInfo()) == WriterFlags(disk_full=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    calls = []
    all_reduce = dist.all_reduce

    def counted(*args, **kwargs):
        calls.append(1)
        return all_reduce(*args, **kwargs)

    dist.all_reduce = counted
    try:
        info = DistInfo(rank=rank, world_size=2)
        if rank == 0:  # rank 0's schedule and writer
            mine = StepFlags(rolling=True, writer=WriterFlags(failed=True, disk_full=True))
            nonfinite = torch.tensor([False, False])
        else:  # a signal and non-finite gradients on rank 1 only
            mine = StepFlags(stop=True)
            nonfinite = torch.tensor([False, True])
        seen = mine.any_rank(info, nonfinite=nonfinite)
        writer = WriterFlags(failed=rank == 1).any_rank(info)
        torch.save({"seen": seen, "writer": writer, "collectives": len(calls)}, f"{out}.{rank}")
    finally:
        dist.all_reduce = all_reduce
        dist.destroy_process_group()


@pytest.mark.dist
def test_a_flag_raised_on_one_rank_is_seen_on_every_rank_in_one_collective(tmp_path: Path) -> None:
    out = str(tmp_path / "flags")
    mp.spawn(_rank_main, args=(_free_port(), out), nprocs=2, join=True)
    want = StepFlags(
        stop=True, rolling=True, writer=WriterFlags(failed=True, disk_full=True), nonfinite=(False, True)
    )
    for rank in range(2):
        result = torch.load(f"{out}.{rank}", weights_only=False)
        assert result["seen"] == want
        assert result["writer"] == WriterFlags(failed=True)
        assert result["collectives"] == 2  # one for the step's flags, one for the writer's
