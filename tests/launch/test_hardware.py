from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import FIXTURES, SHAPES, install_fake_smi
from trm.errors import TRMError
from trm.launch.host.hardware import load_table, select_layout
from trm.launch.host.nvidia_smi import parse_plain_header, parse_query_csv, query_gpus

# (shape) -> (tier, micro-batch, accumulation): what the table must choose for each recorded host.
EXPECTED = {
    "h100x1": ("h100-80g", 192, 4),
    "h100x2": ("h100-80g", 192, 2),
    "h100x4": ("h100-80g", 192, 1),
    "h100x8": ("h100-80g", 96, 1),
    "h200x1": ("h200-141g", 384, 2),
    "h200x2": ("h200-141g", 384, 1),
    "h200x4": ("h200-141g", 192, 1),
    "h200x8": ("h200-141g", 96, 1),
    "a100-80gx1": ("a100-80g", 192, 4),
    "a100-80gx4": ("a100-80g", 192, 1),
    "a100-40gx1": ("a100-40g", 64, 12),
    "a100-40gx2": ("a100-40g", 64, 6),
    "a100-40gx4": ("a100-40g", 64, 3),
    "a100-40gx8": ("a100-40g", 48, 2),
    "l40sx1": ("l40s-48g", 96, 8),
    "l40sx4": ("l40s-48g", 96, 2),
    "l40sx8": ("l40s-48g", 96, 1),
    "rtx4090x1": ("rtx4090-24g", 32, 24),
    "rtx4090x2": ("rtx4090-24g", 32, 12),
    "rtx4090x4": ("rtx4090-24g", 32, 6),
    "rtx4090x8": ("rtx4090-24g", 32, 3),
}


def gpus_of(shape: str):
    return parse_query_csv((FIXTURES / shape / "query.csv").read_text())


@pytest.mark.parametrize("shape", SHAPES)
def test_every_recorded_host_keeps_the_global_batch(shape):
    plan = select_layout(gpus_of(shape))
    count = int(shape.rsplit("x", 1)[1])
    assert plan.world_size == count
    assert plan.global_batch_size == 768
    assert plan.micro_batch_size * plan.grad_accumulation * plan.world_size == 768
    assert plan.matched_by == "name"
    assert plan.compile is True and plan.device == "cuda"
    if shape in EXPECTED:
        assert (plan.tier, plan.micro_batch_size, plan.grad_accumulation) == EXPECTED[shape]


def test_a100_40g_and_80g_are_told_apart_by_vram():
    assert select_layout(gpus_of("a100-40gx4")).tier == "a100-40g"
    assert select_layout(gpus_of("a100-80gx4")).tier == "a100-80g"


def test_unknown_gpu_falls_back_by_vram():
    plan = select_layout(gpus_of("unknown-96gx2"))
    assert plan.matched_by == "vram"
    assert plan.tier == "h100-80g"  # 95.6 GiB reaches the 75 GiB tiers but not the 130 GiB one
    assert any("not in the table" in n for n in plan.notes)


def test_mixed_host_is_sized_for_the_weakest_gpu():
    plan = select_layout(gpus_of("mixed-h100-a100"))
    assert plan.world_size == 2
    assert any("mixed GPU models" in n for n in plan.notes)


def test_too_small_gpu_is_an_error_naming_the_fix():
    gpus = parse_query_csv("Tesla P4, 7680, 6.1, 535.1, GPU-x\n")
    with pytest.raises(TRMError, match="smaller than every tier"):
        select_layout(gpus)


def test_cpu_tier_when_no_gpus():
    plan = select_layout([], cpu_procs=2, global_batch_size=8)
    assert plan.device == "cpu" and plan.tier == "cpu" and plan.compile is False
    assert plan.world_size == 2 and plan.local_batch_size == 4
    assert "device=cpu" in plan.overrides()


def test_num_gpus_subset_and_overrides():
    plan = select_layout(gpus_of("h100x8"), num_gpus=4, micro_batch_size=64)
    assert plan.world_size == 4 and plan.grad_accumulation == 3
    assert plan.overrides() == ["global_batch_size=768", "micro_batch_size=64", "compile=true", "device=cuda"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_gpus": 16}, r"but 8 GPU\(s\) are visible"),
        ({"num_gpus": 5}, "not divisible by the world size 5"),
        ({"micro_batch_size": 100}, "must divide the per-rank batch 96"),
    ],
)
def test_bad_requests_name_the_fix(kwargs, message):
    with pytest.raises(TRMError, match=message):
        select_layout(gpus_of("h100x8"), **kwargs)


def test_multi_node_world_size():
    plan = select_layout(gpus_of("h100x4"), nnodes=2)
    assert plan.world_size == 8 and plan.local_batch_size == 96


def test_table_tiers_cover_the_issue_list():
    table = load_table()
    names = {t.name for t in table.tiers}
    assert {"rtx4090-24g", "a100-40g", "l40s-48g", "h100-80g", "a100-80g", "h200-141g"} <= names
    assert table.global_batch_size == 768


def test_broken_table_is_reported(tmp_path):
    path = tmp_path / "hw.toml"
    path.write_text("[[tier]]\nname = 'x'\n")
    with pytest.raises(TRMError, match="missing key"):
        load_table(path)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('source = "measured"', "says what was measured"),
        ('source = "estimate"\nmeasured = "2026-11-26, H100"', "says what was measured"),
        ('source = "guess"', "use one of estimate, measured"),
    ],
)
def test_a_tier_is_an_estimate_or_says_what_was_measured(tmp_path, extra, message):
    from trm.launch.host.hardware import TABLE_PATH

    text = TABLE_PATH.read_text()
    head, sep, rest = text.partition('name = "a100-80g"')
    rest = rest.replace('source = "estimate"\n', extra + "\n", 1)
    path = tmp_path / "hw.toml"
    path.write_text(head + sep + rest)
    with pytest.raises(TRMError, match=message):
        load_table(path)


def test_the_h100_tier_is_measured_and_select_config_says_so():
    table = load_table()
    h100 = next(t for t in table.tiers if t.name == "h100-80g")
    assert h100.source == "measured" and "driver 580.159.04, torch 2.11.0+cu130" in h100.measured
    layout = select_layout(gpus_of("h100x4"), table=table)
    assert f"table values: measured ({h100.measured})" in layout.describe()


def test_the_h100_tier_has_its_measured_speed():
    speed = next(t for t in load_table().tiers if t.name == "h100-80g").speed
    assert speed is not None and speed.label == "2026-11-26, 1x NVIDIA H100 80GB HBM3"
    assert (speed.recipe, speed.eval_rows_per_s) == ("arc2", 80.0)
    assert speed.row_seconds == pytest.approx(0.907 / 768)
    assert all(t.speed is None for t in load_table().tiers if t.source == "estimate")


SPEED = """
[tier.speed]
date = 2026-11-26
gpu = "NVIDIA A100 80GB"
gpus = 1
recipe = "arc2"
step_seconds = 1.8
step_rows = 768
eval_rows_per_s = 40
"""


@pytest.mark.parametrize(
    ("source", "speed", "message"),
    [
        ('source = "estimate"', SPEED, r'only a tier with source = "measured" has it'),
        (
            'source = "measured"\nmeasured = "x"',
            SPEED.replace("gpus = 1\n", ""),
            r"needs exactly date, gpu, gpus",
        ),
        ('source = "measured"\nmeasured = "x"', SPEED.replace("= 1.8", "= 0"), r"must be positive"),
        ('source = "measured"\nmeasured = "x"', SPEED.replace("= 40", '= "fast"'), r"could not convert"),
    ],
)
def test_a_speed_table_is_measured_and_complete(tmp_path, source, speed, message):
    from trm.launch.host.hardware import TABLE_PATH

    head, sep, rest = TABLE_PATH.read_text().partition('name = "a100-80g"')
    note = 'note = "SM80, 80 GB: same rows as H100, about half the speed"\n'
    rest = rest.replace('source = "estimate"\n', source + "\n", 1).replace(note, note + speed, 1)
    path = tmp_path / "hw.toml"
    path.write_text(head + sep + rest)
    with pytest.raises(TRMError, match=message):
        load_table(path)


def test_plain_banner_parsing():
    driver, cuda = parse_plain_header((FIXTURES / "h100x4" / "nvidia-smi.txt").read_text())
    assert (driver, cuda) == ("550.127.05", "12.4")
    assert parse_plain_header("garbage") == (None, None)


def test_query_through_fake_nvidia_smi(monkeypatch, tmp_path):
    install_fake_smi(monkeypatch, tmp_path, "l40sx4")
    gpus = query_gpus()
    assert [g.name for g in gpus] == ["NVIDIA L40S"] * 4
    assert gpus[0].sm == 89 and gpus[3].index == 3
    assert len({g.uuid for g in gpus}) == 4


def test_missing_or_broken_nvidia_smi(monkeypatch, tmp_path):
    install_fake_smi(monkeypatch, tmp_path, None)
    with pytest.raises(TRMError, match=r"not found on PATH.*--gpus all"):
        query_gpus()
    install_fake_smi(monkeypatch, tmp_path, "no-driver")
    with pytest.raises(TRMError, match="couldn't communicate with the NVIDIA driver"):
        query_gpus()


def test_select_config_command_json_and_human(monkeypatch, tmp_path):
    env = install_fake_smi(monkeypatch, tmp_path, "h200x4")
    out = subprocess.run(
        [sys.executable, "-m", "trm", "select-config", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    plan = json.loads(out)
    assert plan["tier"] == "h200-141g" and plan["micro_batch_size"] == 192
    assert "micro_batch_size=192" in plan["overrides"]
    human = subprocess.run(
        [sys.executable, "-m", "trm", "select-config", "--micro-batch-size", "7"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert human.returncode == 2 and "must divide the per-rank batch 192" in human.stderr
    assert "Traceback" not in human.stderr


def test_workloads_scale_the_reference_rows_and_keep_arc_trm_exactly():
    from trm.launch.host.hardware import Workload, workload_of

    table = load_table()
    reference = workload_of("arc2")
    assert (reference.arch, reference.tokens) == ("trm", 916)
    assert [table.sizing.rows(t, reference) for t in table.tiers] == [t.max_micro_batch for t in table.tiers]
    sudoku, maze = workload_of("sudoku-att"), workload_of("maze")
    assert sudoku.tokens == 81 + 16 and maze.tokens == 900 + 16
    h100 = next(t for t in table.tiers if t.name == "h100-80g")
    assert table.sizing.rows(h100, sudoku) == int(192 * 916 / 97)  # 9.4x the rows of ARC's sequences
    assert table.sizing.rows(h100, workload_of("arc2", "urm")) == int(192 * 200 / 595)
    assert table.sizing.rows(h100, Workload(arch="hrm")) == int(192 * 200 / 158)
    # the launcher's layout: one H100 fits Sudoku's whole 768-row local batch, URM needs accumulation
    assert select_layout(gpus_of("h100x1"), global_batch_size=768, workload=sudoku).micro_batch_size == 768
    urm = select_layout(gpus_of("h100x1"), global_batch_size=768, workload=workload_of("arc2", "urm"))
    assert urm.micro_batch_size == 64 and urm.grad_accumulation == 12 and "arch urm" in urm.notes[-1]
    assert select_layout(gpus_of("h100x1"), global_batch_size=768).micro_batch_size == 192  # no workload: ARC


def test_an_arch_without_a_measurement_is_a_clear_error():
    from trm.launch.host.hardware import Workload

    table = load_table()
    with pytest.raises(TRMError, match=r"arch 'mystery' has no \[sizing.mb_per_row\] entry.*bench -- memory"):
        table.sizing.rows(table.tiers[0], Workload(arch="mystery"))


def test_select_config_and_the_launcher_size_by_task_and_arch(monkeypatch, capsys):
    from trm.__main__ import main

    monkeypatch.setattr("trm.launch.host.nvidia_smi.query_gpus", lambda: gpus_of("h100x1"))
    assert main(["select-config", "--task", "sudoku-att", "--global-batch-size", "768", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["micro_batch_size"] == 768
    assert main(["select-config", "--task", "arc2", "--arch", "urm", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["micro_batch_size"] == 64


def test_select_config_arch_alone_uses_the_default_task_and_bad_names_are_clear(monkeypatch, capsys):
    from trm.__main__ import main

    monkeypatch.setattr("trm.launch.host.nvidia_smi.query_gpus", lambda: gpus_of("h100x1"))
    assert main(["select-config", "--arch", "hrm", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["micro_batch_size"] == 192  # 243 rows cap; 768's divisor
    assert main(["select-config", "--arch", "nosuch"]) != 0
    assert "unknown architecture 'nosuch'" in capsys.readouterr().err
