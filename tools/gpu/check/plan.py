"""The check's parts in order, with their planned seconds, and the two calls of a short GPU loan."""

from __future__ import annotations

from tools.gpu.check.bench import (
    BENCH_LIMIT_S,
    CHECKPOINT_LIMIT_S,
    COMPILE_MODE,
    COMPILE_MODES_LIMIT_S,
    EVAL_LIMIT_S,
    bench,
    checkpoint_save,
    compile_modes,
    evaluation,
)
from tools.gpu.check.core import Part
from tools.gpu.check.curves import CURVES_LIMIT_S, CURVES_PLANNED_S, CURVES_STEPS, curves
from tools.gpu.check.extension import EXTENSION_WAIT_S, extension_build
from tools.gpu.check.host import KIT_LIMIT_S, facts, imports, kit_install
from tools.gpu.check.optimizer import OPTIMIZER_LIMIT_S, OPTIMIZER_STEPS, optimizer
from tools.gpu.check.probe import PROBE_LIMIT_S, probe
from tools.gpu.check.resume import RUN_LIMIT_S, resume
from tools.gpu.check.step import (
    PREFETCH_AB_LIMIT_S,
    PREFETCH_SETTING,
    PROFILE_LIMIT_S,
    SDPA_LIMIT_S,
    STEP_AB_LIMIT_S,
    STEP_AB_MIN_STEPS,
    prefetch_ab,
    sdpa,
    step_ab,
    step_profile,
)
from tools.gpu.check.suite import GPU_TESTS_LIMIT_S, collect, gpu_tests

# Planned seconds on one H100 per profile, from the first H100 run (docs/gpu-runs/2026-11-26-h100: facts 0.3 s,
# imports 14, collect 23, bench 124 with both models' compiles, probe 76 before its evaluation (removed since),
# optimizer 32 once the extension is built (the build: 65-89 s in the background), resume 90, checkpoint 48,
# eval 88). Estimates, not measured yet: kit (pip --no-index, ~10 s there), gpu-tests (never started there;
# 150 s plus up to ~45 s waiting for the build it requires), step-ab (3 trainer runs of ~50 s compile + 26
# steps, plus data), sdpa, profile (one compile of the paper step, 50 s there, plus 5 steps), compile-modes
# (eager, default and autotuned compiles of the paper step: the autotuning's minutes are a guess). An H200 is
# planned as an H100: the plan errs long.
PARTS: tuple[Part, ...] = (
    Part("facts", "versions and GPU facts (nvidia-smi, MIG, CUDA devices)", {"quick": 5, "full": 5}, 60, facts, needs_cuda=False),
    Part("kit", "pip install --no-index the GPU kit (what this Python lacks)", {"quick": 20, "full": 20}, KIT_LIMIT_S, kit_install, needs_cuda=False),
    Part("imports", "what the check and training import (the GPU kit on a bare host)", {"quick": 15, "full": 15}, 120, imports, needs_cuda=False),
    Part("extension-build", "adam-atan2 from the kit's sdist for this GPU's SM, in the background (nvcc checked first)", {"quick": 2, "full": 2}, 30, extension_build),
    Part("collect", "the test suite collects here (no error, no module skipped whole)", {"quick": 25, "full": 25}, 180, collect, needs_cuda=False),
    Part("gpu-tests", "pytest -m gpu tests with TRM_REQUIRE_GPU=1 (a skip is a failure), on the extension when built", {"quick": 195, "full": 445}, GPU_TESTS_LIMIT_S + EXTENSION_WAIT_S, gpu_tests),
    Part("optimizer", f"adam-atan2 extension vs our AdamATan2, {OPTIMIZER_STEPS} steps, fp32 and bf16", {"quick": 35, "full": 60}, OPTIMIZER_LIMIT_S, optimizer),
    Part("resume", "CUDA bf16 + compile=auto run on the extension: SIGTERM, resume, equal to uninterrupted", {"quick": 90, "full": 120}, 120 + 3 * RUN_LIMIT_S, resume),
    Part("probe", "select-config --probe (arc2-smoke, paper config) on the extension: peak memory, s/step", {"quick": 80, "full": 120}, PROBE_LIMIT_S, probe),
    Part("step-ab", f"tools.bench.train --setup paper: our trainer vs upstream's, interleaved, >= {STEP_AB_MIN_STEPS} timed steps each", {"quick": 230, "full": 230}, STEP_AB_LIMIT_S, step_ab),
    Part("sdpa", "tools.bench.sdpa: attention backends (cuDNN, flash, efficient, math) at head dim 64, seq 916", {"quick": 20, "full": 30}, SDPA_LIMIT_S, sdpa),
    Part("profile", "tools.bench.step_profile: a compiled paper step under torch.profiler (matmul, attention, elementwise, idle)", {"quick": 75, "full": 90}, PROFILE_LIMIT_S, step_profile),
    Part("curves", f"tools.bench.curves --device cuda: Sudoku learning curves, ours vs upstream's trainer, {CURVES_STEPS} steps x seeds while time allows (~5 min)", {"quick": CURVES_PLANNED_S, "full": CURVES_PLANNED_S}, CURVES_LIMIT_S, curves, required=False),
    Part("bench", "tools.bench.model --config paper: ms/step, MFU, vs upstream", {"quick": 125, "full": 240}, BENCH_LIMIT_S, bench, required=False),
    Part("prefetch-ab", f"tools.bench.train --setup paper --set {PREFETCH_SETTING}: our trainer with batches built ahead vs without", {"quick": 150, "full": 150}, PREFETCH_AB_LIMIT_S, prefetch_ab, required=False),
    Part("compile-modes", f"tools.bench.model --config paper --compile-mode {COMPILE_MODE}: that torch.compile mode vs the default", {"quick": 240, "full": 240}, COMPILE_MODES_LIMIT_S, compile_modes, required=False),
    Part("checkpoint", "tools.bench.checkpoint --device cuda: loop blocked by an async save vs a synchronous one", {"quick": 50, "full": 60}, CHECKPOINT_LIMIT_S, checkpoint_save, required=False),
    Part("eval", "tools.bench.eval --config paper: evaluation rows/s eager and compiled", {"quick": 90, "full": 120}, EVAL_LIMIT_S, evaluation, required=False),
)  # fmt: skip

# The two calls of one short GPU loan (docs/gpu-host-checks.md): call 1 proves (the gpu tests, the extension,
# training on it) while the extension builds; call 2, at once while the machine is warm, measures. Each
# call's required parts fit DEFAULT_BUDGET_S on the plan above; the optional ones run when time is left
# (the learning curves in call 2 only when its measurements ran short of their plan). Call 3 is the learning
# curves' own call, for a loan with time left after calls 1 and 2 or a later one (it installs the kit and
# builds or picks up the extension first); the compile-mode comparison and the batch-prefetch A/B follow them
# when time is left.
CALLS: dict[int, tuple[str, ...]] = {
    1: ("facts", "kit", "imports", "extension-build", "collect", "gpu-tests", "optimizer", "resume"),
    2: ("facts", "extension-build", "probe", "step-ab", "sdpa", "profile", "curves", "checkpoint", "eval"),
    3: ("facts", "kit", "imports", "extension-build", "curves", "compile-modes", "prefetch-ab"),
}
