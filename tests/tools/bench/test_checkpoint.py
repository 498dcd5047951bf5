"""The checkpoint benchmark at tiny sizes: both saves run through the trainer and write identical files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.bench.checkpoint import ARC2_IDENTIFIERS, main, run_bench


def test_sync_and_async_saves_of_the_same_state_write_the_same_files(tmp_path: Path) -> None:
    result = run_bench(tmp_path, identifiers=50, tiny=True)
    assert result["identical"] is True
    assert sorted(result["files"]) == ["rank_0.pt", "state.pt"]
    assert result["puzzle_table_mb"] == round(50 * result["puzzle_emb_ndim"] * 4 / 1e6, 3) > 0
    assert 0 < result["async_blocked_s"] <= result["async_total_s"] and result["async_first_blocked_s"] > 0
    assert result["blocked_share"] == pytest.approx(
        result["async_blocked_s"] / result["sync_save_s"], abs=0.01
    )
    assert (tmp_path / "run" / "step_1" / "COMPLETE").is_file()


def test_cli_prints_json(tmp_path: Path, capsys) -> None:
    assert main(["--tiny", "--identifiers", "20", "--json", "--dir", str(tmp_path)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["identifiers"] == 20 and result["identical"] is True and result["device"] == "cpu"


@pytest.mark.gpu
def test_saves_of_a_state_on_the_gpu_go_through_pinned_buffers_and_write_the_same_files(
    tmp_path: Path,
) -> None:
    """The asynchronous save's CUDA path: the state lives on the GPU, the snapshot goes to pinned host
    buffers with non-blocking copies, and training's next in-place update does not reach the files."""
    result = run_bench(tmp_path, identifiers=50, tiny=True, device="cuda")
    assert result["device"] == "cuda:0" and result["identical"] is True


def test_the_default_table_is_the_arc2_aug_1000_one() -> None:
    # 1,191,730 = num_puzzle_identifiers of `data build-arc --subsets training2 evaluation2 concept`.
    assert round(ARC2_IDENTIFIERS * 512 * 4 / 1e6, 1) == 2440.7
