"""GPU host acceptance: one command that checks a host with NVIDIA GPUs end to end, within a time budget.

    python -m tools.gpu.check --call 1|2|3 [--budget-s 540] [--out DIR] [--kit DIR] [--extension-dir DIR]
    python -m tools.gpu.check [--budget-s 540] [--profile quick|full] [--require-extension]
                                        [--dry-run] [--out build/gpu-acceptance] [--only PART ...]
    make gpu-run-1 / gpu-run-2 / gpu-run-3   make gpu-check ARGS="..."       nox -s gpu_acceptance -- ...

It runs with the Python it is started with and that Python's own torch (2.10–2.13 accepted, never
installed or replaced) from a checkout of this repository: a dev venv, or a host Python with the GPU kit
(`make gpu-kit`, installed `--no-index`), or our GPU image with the checkout and kit mounted
(docs/gpu-host-checks.md). A short GPU loan is two calls (CALLS): call 1 proves (the gpu test set, the
extension against ours, training on the extension) while the extension builds; call 2, right after it,
measures (the probe, our trainer against upstream's, the SDPA backends, a profiler split; the learning
curves when time is left); call 3, when the loan has time left or on a later one, runs the learning
curves (ours against upstream's trainer on this GPU, about 5 minutes). Without --call
every part runs in one go, the proof first. Parts, each recorded as pass / fail / error / skip with its
numbers, its output's tail, its planned and measured time:

  facts            versions (python, the host's torch and its CUDA, cuDNN, NCCL, triton, adam-atan2, git) and
                   GPU facts (nvidia-smi, MIG slices, what CUDA reports)
  kit              pip install --no-index of the GPU kit (skipped without one)
  imports          what the check and a training run import (trm.train, hydra, omegaconf, pytest, …)
  extension-build  checks nvcc (present, of torch's CUDA major), then builds adam-atan2 from the kit's sdist
                   for the visible GPUs' SM, detached, in --extension-dir (when it does not import already);
                   call 1 leaves an unfinished build running, call 2 picks it up (tools.gpu.extension)
  collect          the test suite collects on this host (no error, no module skipped as a whole)
  gpu-tests        the `gpu`-marked tests, TRM_REQUIRE_GPU=1 (a skipped gpu test counts as a failure); the
                   quick profile leaves out the test the `resume` part repeats
  optimizer        the extension against our AdamATan2 over 100 steps (fp32, bf16) and the extension's own
                   gpu tests
  resume           a CUDA bf16 + compile=auto run SIGTERMed after step 2, resumed, equal to an uninterrupted
                   run (RESUME_RTOL / RESUME_ATOL; bitwise recorded); records the AdamATan2 backend that ran
  probe            `select-config --probe` of the paper config: peak memory and seconds per optimizer step
  step-ab          `python -m tools.bench.train --setup paper` against upstream's trainer (the kit's checkout
                   or TRM_UPSTREAM): ours, upstream, ours, each timing >= STEP_AB_MIN_STEPS steps
  sdpa             `python -m tools.bench.sdpa`: cuDNN / flash / efficient / math attention at head dim 64,
                   sequence 916
  profile          `python -m tools.bench.step_profile`: a compiled paper step's time in matmul, attention,
                   elementwise, other and idle
  curves           (optional) `python -m tools.bench.curves --device cuda`: Sudoku learning curves of our
                   trainer and upstream's on this GPU, seed pairs while its budget allows, compared as on
                   CPU; JSON (and PNG where matplotlib imports) in OUT/curves/ (tools.gpu.check.curves)
  bench            (optional) `python -m tools.bench.model --config paper`: ms/step, MFU, compile time
  checkpoint       (optional) `python -m tools.bench.checkpoint --device cuda`: the loop blocked by an
                   asynchronous save (pinned buffers) vs a synchronous one, same sha256s
  eval             (optional) `python -m tools.bench.eval --config paper`: evaluation rows/s

The extension: once this run started its build (or with --require-extension, which --call implies) the
parts that train or run the gpu tests wait for it, put it on PYTHONPATH and set TRM_REQUIRE_ADAM_EXT=1,
which every child inherits: the trainer then refuses the torch fallback (trm.optim.backend), so a run
cannot pass on the torch backend; a build that failed fails those parts without running them.

Budget: a part starts only when its planned H100 time fits in what is left of `--budget-s`, and runs at
most that long; otherwise it is "skipped for time", which the report's status_reason (and the title of
report.md) names; a required part skipped for time makes the status "incomplete", never "pass" (optional
parts leave the verdict alone). Without a CUDA device the CUDA parts are "skipped: no GPU" and the others
still run.

The report (report.json + report.md) is written atomically to the output folder after every part, so an
interrupted run still leaves what it measured. Exit codes: 0 every part passed (or was not wanted here),
1 some part failed or errored, 2 bad arguments, 3 nothing failed but parts were skipped (no GPU, or out
of time). `--dry-run` prints the plan and touches neither the GPU nor the output folder.

The package: `cli` (the flags and the plan), `plan` (the parts in order with their planned seconds, and the
calls), `driver` (the budget and the status), `report`, `core` (what the parts share: Outcome, Context,
Part, run_command), and the parts by group: `host` (facts, kit, imports), `extension`, `suite` (collect,
gpu-tests), `optimizer`, `resume`, `probe`, `step` (step-ab, sdpa, profile), `curves` and `bench` (bench,
checkpoint, eval).
"""
