"""The trainer benchmark's plumbing: upstream's progress parsing, epoch sizing, and the CPU shim."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tools import checkout_env
from tools.bench import train
from tools.bench.train import tqdm_step_seconds, upstream_epochs_for
from tools.bench.upstream_trainer import DEVICE_SWITCH, patched_source
from trm.errors import TRMError

TQDM_STDERR = (
    "  0%|          | 0/44 [00:00<?, ?it/s]"
    "  2%|▏         | 1/44 [00:03<02:09,  3.01s/it]"
    " 14%|█▎        | 6/44 [00:09<00:50,  1.33s/it]"
    " 16%|█▌        | 7/44 [00:10<00:47,  1.25s/it]"
    " 18%|█▊        | 8/44 [00:11<00:30,  1.20it/s]"
    " 18%|█▊        | 8/44 [00:40<01:30,  2.08s/it]\n"  # refresh at close, after evaluation
)


def test_tqdm_records_after_warmup_give_seconds_per_step_and_the_close_refresh_is_dropped():
    assert tqdm_step_seconds(TQDM_STDERR, warmup=5) == pytest.approx([1.33, 1.25, 1 / 1.20])
    assert tqdm_step_seconds("no progress here") == []


def test_upstream_epochs_match_the_requested_steps(tmp_path):
    (tmp_path / "train").mkdir()
    meta = {"total_groups": 32, "mean_puzzle_examples": 3.6875}
    (tmp_path / "train" / "dataset.json").write_text(json.dumps(meta))
    assert upstream_epochs_for(tmp_path, steps=40, batch=32) == 11  # 11 × 3.69 ≈ 40.6 steps
    assert upstream_epochs_for(tmp_path, steps=1, batch=32) == 1


def test_every_device_switch_pattern_is_required(tmp_path):
    source = "\n".join(pattern for pattern, _ in DEVICE_SWITCH)
    patched = patched_source(source, tmp_path / "pretrain.py")
    assert "cuda" not in patched and "nccl" not in patched
    with pytest.raises(TRMError, match=r"expected `\.cuda\(\)`.*DEVICE_SWITCH"):
        patched_source(source.replace(".cuda()", ".to(dev)"), tmp_path / "pretrain.py")


FAKE_PRETRAIN = """
import os, sys, json, typing
import torch
from adam_atan2 import AdamATan2

class Config:
    field: "Arch"  # resolved through sys.modules["__main__"], as pydantic does

class Arch:
    pass

def main():
    hints = typing.get_type_hints(Config, globalns=vars(sys.modules[Config.__module__]))
    with torch.device("cuda"):
        made = torch.zeros(2)
    moved = made.cuda()
    opt = AdamATan2([torch.nn.Parameter(torch.zeros(1))], lr=0.0)
    try:
        torch.load(os.devnull, map_location="cuda")
    except Exception:
        pass
    if False:
        torch.distributed.init_process_group(backend="nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        torch.zeros(1, device="cuda")
    out = {"argv": sys.argv[1:], "device": str(moved.device), "opt": type(opt).__module__,
           "hint": hints["field"].__name__, "file": __file__}
    open(sys.argv[1], "w").write(json.dumps(out))

if __name__ == "__main__":
    main()
"""


@pytest.mark.e2e  # tens of seconds: out of the default suite, run by make test-e2e
def test_shim_runs_a_cuda_only_trainer_on_cpu_with_our_optimizer(tmp_path):
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "pretrain.py").write_text(FAKE_PRETRAIN)
    out = tmp_path / "out.json"
    cmd = [sys.executable, "-m", "tools.bench.upstream_trainer", str(checkout), str(out), "lr=1"]
    subprocess.run(cmd, check=True, cwd=tmp_path, env=checkout_env())
    result = json.loads(out.read_text())
    assert result == {
        "argv": [str(out), "lr=1"],
        "device": "cpu",
        "opt": "trm.optim.adam_atan2",
        "hint": "Arch",
        "file": str(checkout / "pretrain.py"),
    }


def test_shim_names_a_checkout_without_a_trainer(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "tools.bench.upstream_trainer", str(tmp_path)], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "has no pretrain.py" in proc.stderr


def test_setups_give_both_trainers_the_same_run_and_compile_only_the_paper_setup(tmp_path, monkeypatch):
    from tools.bench import train as bench

    calls = []

    def fake_run(cmd, **kwargs):
        calls.append((cmd, kwargs["env"]))
        return subprocess.CompletedProcess(cmd, 0, stdout="", stderr=" 9/9 [00:09<00:00,  1.00s/it]")

    monkeypatch.setattr(bench.subprocess, "run", fake_run)
    monkeypatch.setattr(bench, "step_times", lambda _path: [1.0])
    monkeypatch.setenv("DISABLE_COMPILE", "1")
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "dataset.json").write_text('{"total_groups": 10, "mean_puzzle_examples": 1.0}')
    for name, compiled in (("tiny", False), ("paper", True)):
        setup = bench.SETUPS[name]
        calls.clear()
        bench.bench_ours(setup, tmp_path, tmp_path / "ours", steps=4)
        assert bench.bench_upstream(setup, tmp_path / "up", tmp_path, steps=4)["median_s_per_step"] == 1.0
        (ours_cmd, ours_env), (up_cmd, up_env) = calls
        assert f"device={setup.device}" in ours_cmd and up_cmd[3:5] == ["--device", setup.device]
        for override in (*setup.overrides, f"global_batch_size={setup.batch}", "evaluators=[]"):
            assert override in ours_cmd and override in up_cmd, override
        assert ("DISABLE_COMPILE" in ours_env) == ("DISABLE_COMPILE" in up_env) == (not compiled)
        assert ours_env["WANDB_MODE"] == up_env["WANDB_MODE"] == "disabled"


@pytest.mark.e2e  # tens of seconds: out of the default suite, run by make test-e2e
def test_cuda_mode_runs_the_script_unchanged_and_stands_in_only_for_a_missing_extension(tmp_path):
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    script = (
        "import json, sys\n"
        "from adam_atan2 import AdamATan2\n"
        "MARK = 'x.cuda()'\n"
        "json.dump({'mark': MARK, 'opt': AdamATan2.__module__}, open(sys.argv[1], 'w'))\n"
    )
    (checkout / "pretrain.py").write_text(script)
    out = tmp_path / "out.json"
    cmd = [sys.executable, "-m", "tools.bench.upstream_trainer", "--device", "cuda", str(checkout), str(out)]
    subprocess.run(cmd, check=True, cwd=tmp_path, env=checkout_env())
    assert json.loads(out.read_text()) == {"mark": "x.cuda()", "opt": "trm.optim.adam_atan2"}


def test_the_table_states_median_and_min(capsys, monkeypatch):
    setup = train.SETUPS["tiny"]
    theirs = train.summary([0.30, 0.20, 0.25])
    record = train.results(setup, [0.11, 0.10, 0.12, 0.13], theirs)
    assert record["ours"]["median_s_per_step"] == pytest.approx(0.115)
    assert record["ours"]["min_s_per_step"] == pytest.approx(0.10)
    assert record["ratio_vs_upstream"] == pytest.approx(0.25 / 0.115)
    monkeypatch.setattr(train, "attention_seconds", lambda setup: 0.05)  # times a real SDPA call otherwise
    train.report(setup, record)
    out = capsys.readouterr().out
    assert "8.70 steps/s (0.115 s/step median of 4; min 0.100 s)" in out
    assert "4.00 steps/s (0.250 s/step median of 3; min 0.200 s)" in out and "ratio:     2.17x" in out


def test_an_upstream_that_could_not_run_is_recorded_as_such():
    record = train.results(train.SETUPS["tiny"], [0.1, 0.2], "exit 1: no module named pydantic")
    assert record["upstream"] == {"failed": "exit 1: no module named pydantic"}
    assert record["ratio_vs_upstream"] is None


def test_too_few_steps_to_time_twenty_is_refused(capsys):
    with pytest.raises(SystemExit) as exited:
        train.main(["--steps", "25"])
    assert exited.value.code == 2
    assert "--steps 25: give at least 26" in capsys.readouterr().err


def test_json_line_holds_the_figures_the_table_prints(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("TRM_UPSTREAM", raising=False)
    monkeypatch.setattr(train, "build_data", lambda out, setup, form: None)
    monkeypatch.setattr(train, "bench_ours", lambda setup, data, run_dir, steps: [0.5, 0.4, 0.6])
    monkeypatch.setattr(train, "attention_seconds", lambda setup: 0.1)
    assert train.main(["--steps", "26", "--keep", str(tmp_path / "work"), "--json"]) == 0
    out = capsys.readouterr().out
    record = json.loads(out.splitlines()[-1])
    assert record["ours"] == {"steps_per_s": 2.0, "median_s_per_step": 0.5, "min_s_per_step": 0.4,
                              "steps": 3, "mfu": None}  # fmt: skip
    assert record["upstream"] is None and record["measured"] is True
    assert "2.00 steps/s (0.500 s/step median of 3; min 0.400 s)" in out


def test_set_compares_ours_against_ours_with_the_overrides_and_never_runs_upstream(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("TRM_UPSTREAM", str(tmp_path / "upstream"))  # --set leaves it out
    monkeypatch.setattr(train, "build_data", lambda out, setup, form: None)
    runs = []

    def fake_ours(setup, data, run_dir, steps, extra=()):
        runs.append(extra)
        return [0.4, 0.4, 0.5] if extra else [0.5, 0.5, 0.6]

    monkeypatch.setattr(train, "bench_ours", fake_ours)
    monkeypatch.setattr(train, "bench_upstream", lambda *a: pytest.fail("upstream ran"))
    argv = ["--steps", "26", "--keep", str(tmp_path / "work"), "--json", "--set", "loader_prefetch=2"]
    assert train.main(argv) == 0
    assert runs == [(), ("loader_prefetch=2",)]
    out = capsys.readouterr().out
    record = json.loads(out.splitlines()[-1])
    assert record["variant"]["overrides"] == ["loader_prefetch=2"]
    assert record["variant"]["median_s_per_step"] == 0.4 and record["upstream"] is None
    assert record["ratio_variant_vs_ours"] == pytest.approx(1.25)
    assert "1.250x (ours / variant s per step; > 1: faster)" in out


def test_set_needs_key_equals_value(capsys):
    with pytest.raises(SystemExit) as exited:
        train.main(["--steps", "26", "--set", "loader_prefetch"])
    assert exited.value.code == 2
    assert "--set loader_prefetch: give KEY=VALUE" in capsys.readouterr().err
