from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

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
    # Blackwell, Ampere sm_86 and L4 (no tier named them before: VRAM fallback or no tier at all)
    "b200x8": ("b200-180g", 96, 1),
    "rtx5090x1": ("rtx5090-32g", 64, 12),
    "rtxpro6000x1": ("rtxpro6000-96g", 256, 3),
    "a6000x2": ("a6000-48g", 96, 4),
    "l4x4": ("l4-24g", 32, 6),
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
    # A Hopper card no tier names (sm_90 is no tier's compute capability): its memory decides.
    plan = select_layout(parse_query_csv("NVIDIA H20, 97871, 9.0, 580.95.05, GPU-x\n" * 2))
    assert plan.matched_by == "vram"
    assert plan.tier == "rtxpro6000-96g"  # 95.6 GiB reaches the 90 GiB tier but not the 130 GiB one
    assert any("not in the table" in n for n in plan.notes)


def test_rtx_pro_6000_server_edition_is_matched_by_name():
    """The recorded 2x RTX PRO 6000 Server Edition host fell back by VRAM to the H100 tier before."""
    plan = select_layout(gpus_of("rtxpro6000-serverx2"))
    assert (plan.tier, plan.matched_by, plan.micro_batch_size, plan.grad_accumulation) == (
        "rtxpro6000-96g", "name", 192, 2,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("line", "tier"),
    [
        # Blackwell cards no tier names: sized like their siblings of the same compute capability
        ("NVIDIA RTX PRO 5000 Blackwell, 48935, 12.0", "rtx5090-32g"),  # the largest 12.0 tier it reaches
        ("NVIDIA B300 SXM6 AC, 275040, 10.3", "b200-180g"),
        ("NVIDIA RTX A5000, 24564, 8.6", "rtx3090-24g"),
    ],
)
def test_an_unknown_card_is_matched_by_its_compute_capability(line, tier):
    plan = select_layout(parse_query_csv(f"{line}, 580.95.05, GPU-x\n"))
    assert (plan.tier, plan.matched_by) == (tier, "compute capability")
    assert any(f"sized by its compute capability {line.rsplit(', ', 1)[1]}" in n for n in plan.notes)


def test_compute_capability_matching_needs_the_vram_and_never_takes_a_mig_slice():
    # 16 GB Blackwell: no 12.0 tier fits it, its VRAM decides
    small = select_layout(parse_query_csv("NVIDIA GeForce RTX 5080, 16303, 12.0, 580.95.05, GPU-x\n"))
    assert (small.tier, small.matched_by) == ("gpu-16g", "vram")
    # a MIG slice of an RTX PRO 6000 (compute capability 12.0) is sized by its slice's memory: not as the
    # whole card (name) nor as an RTX 5090 (compute capability)
    whole = parse_query_csv((FIXTURES / "rtxpro6000x1" / "query.csv").read_text())[0]
    slice_ = replace(whole, name=f"{whole.name} MIG 2g.48gb", memory_mib=48 * 1024, mig_profile="2g.48gb")
    plan = select_layout([slice_])
    assert (plan.tier, plan.matched_by) == ("a6000-48g", "vram")  # the largest tier 48 GiB reaches
    assert any("MIG slice 2g.48gb" in n for n in plan.notes)
    assert select_layout([replace(slice_, mig_profile=None)]).matched_by == "compute capability"


@pytest.mark.parametrize(
    ("name", "tier"),
    [("NVIDIA A10", "rtx3090-24g"), ("NVIDIA A10G", "rtx3090-24g"), ("NVIDIA L4", "l4-24g"),
     ("NVIDIA A40", "a6000-48g"), ("NVIDIA GB200", "b200-180g")],
)  # fmt: skip
def test_names_match_as_whole_words(name, tier):
    """ "A10" is not the A100 and "L4" not the L40S: before, the 24 GB tier listed "A10" and "L4" as substrings
    and only the order of the table kept an A100 or an L40S away from it."""
    memory = {"A10": 23028, "A10G": 23028, "L4": 23034, "A40": 46068, "GB200": 189471}[name.split()[-1]]
    plan = select_layout(parse_query_csv(f"{name}, {memory}, 8.6, 580.95.05, GPU-x\n"))
    assert (plan.tier, plan.matched_by) == (tier, "name")
    table = load_table()
    a10 = next(t for t in table.tiers if t.name == "rtx3090-24g")
    l4 = next(t for t in table.tiers if t.name == "l4-24g")
    assert not a10.matches_name("NVIDIA A100-SXM4-80GB") and not l4.matches_name("NVIDIA L40S")


def test_a_malformed_compute_capability_in_the_table_names_the_key(tmp_path):
    from trm.launch.host.hardware import TABLE_PATH

    text = TABLE_PATH.read_text().replace('compute_caps = ["10.0", "10.3"]', 'compute_caps = ["sm_100"]')
    path = tmp_path / "hw.toml"
    path.write_text(text)
    with pytest.raises(TRMError, match=r"compute_caps \['sm_100'\] must be compute capabilities"):
        load_table(path)


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
    assert {"b200-180g", "rtxpro6000-96g", "rtx5090-32g", "a6000-48g", "rtx3090-24g", "l4-24g"} <= names
    for tier in table.tiers:
        if tier.name in ("b200-180g", "rtxpro6000-96g", "rtx5090-32g", "a6000-48g", "rtx3090-24g", "l4-24g"):
            assert tier.source == "estimate" and tier.compile is True
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


def test_an_unknown_arch_is_a_clear_error():
    from trm.launch.host.hardware import Workload

    table = load_table()
    with pytest.raises(TRMError, match=r"unknown architecture 'mystery': use arch=<one of trm, "):
        table.sizing.rows(table.tiers[0], Workload(arch="mystery"))


def _with_sizing(tmp_path, sizing: str):
    from trm.launch.host.hardware import TABLE_PATH

    head, sep, _ = TABLE_PATH.read_text().rpartition("\n[sizing]\n")
    path = tmp_path / "hw.toml"
    path.write_text(head + sep + "\n" + sizing)
    return path


@pytest.mark.parametrize(
    ("sizing", "message"),
    [
        (
            'reference_arch = "trm"\nreference_tokens = 916\nmeasured_tokens = 916\n'
            "[sizing.mb_per_row]\ntrm = 200\n",
            r"\[sizing\]: mb_per_row and measured_tokens moved to each architecture's spec "
            r"\(ArchSpec.activation_mb_per_row in trm/model/registry.py, .*\); remove them from the table",
        ),
        (
            'reference_arch = "trm"\nreference_tokens = 916\n[sizing.mb_per_row]\ntrm = 200\n',
            r"\[sizing\]: mb_per_row moved to each architecture's spec .*; remove it from the table",
        ),
        ('reference_arch = "trn"\nreference_tokens = 916\n', r"reference_arch: unknown .*Did you mean 'trm'"),
        (
            'reference_arch = "trm"\nreference_tokens = 0\n',
            "reference_tokens = 0; use a positive token count",
        ),
        ('reference_arch = "trm"\n', "missing key 'reference_tokens'"),
    ],
)
def test_the_sizing_table_names_a_moved_or_bad_key(tmp_path, sizing, message):
    path = _with_sizing(tmp_path, sizing)
    with pytest.raises(TRMError, match=message) as err:
        load_table(path)
    assert str(path) in str(err.value)


def test_the_sizing_table_reads_each_architectures_figure_from_its_spec(tmp_path, monkeypatch):
    from trm.launch.host.hardware import Workload
    from trm.model.registry import ARCHS

    table = load_table(_with_sizing(tmp_path, 'reference_arch = "trm"\nreference_tokens = 916\n'))
    h100 = next(t for t in table.tiers if t.name == "h100-80g")
    assert table.sizing.rows(h100, Workload(arch="urm")) == int(192 * 200 / 595)
    monkeypatch.setitem(ARCHS, "urm", replace(ARCHS["urm"], activation_mb_per_row=400.0))
    assert table.sizing.rows(h100, Workload(arch="urm")) == 96  # 192 x 200 / 400: the spec's figure


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
