"""Process exit codes shared by the trainer, the launch script and the Kubernetes jobs."""

OK = 0
# OK is also what a launch exits with when it refuses to train (trm.launch.supervision.ledger): the run has spent its
# MAX_HOURS, or it ended with NONFINITE, a trainer's CONFIG_ERROR or a failure of the launcher itself after
# admission (exit 1, recorded in the run's ledger) and the configuration is the same. It is
# the one code every restart policy stops on: Docker's `--restart on-failure` restarts on any other code, a
# Kubernetes Job's pod that exits 0 completes it (podFailurePolicy only sees failures), a SkyPilot managed
# job ends. The message says why and how to continue (raise MAX_HOURS; CONTINUE_RUN=<end id>).
# A user-fixable configuration or input error (bad key, a NaN/infinite/out-of-range number, missing
# dataset, incompatible resume), or a run directory another launcher or trainer owns (trm.runlock: the
# message names the holder). Orchestrators must not retry it.
CONFIG_ERROR = 2
# The trainer was asked to stop (SIGTERM/SIGINT, the launcher's cost guard), saved a complete checkpoint
# and exited. Safe to retry: the same command resumes from that checkpoint. (EX_TEMPFAIL in sysexits.h.)
# When the stop came from the cost guard the launcher itself exits BUDGET_STOPPED instead.
SAVED_RETRY = 75
# The preflight found a fault of this machine, not of the configuration: a GPU that computes wrong
# results, an NCCL all-reduce across the local GPUs that fails, an nvidia-smi that does not answer.
# Nothing was trained or saved. Retry on another node (a Kubernetes Job counts it and starts a new pod;
# cordon the node so it does not land there again); retrying on the same machine fails the same way.
NODE_FAULT = 76
# A checkpoint could not be written because its filesystem is full (or over quota). The partial save was
# removed and the previous checkpoint is intact; retrying before space is freed fails the same way.
# (EX_IOERR in sysexits.h.)
DISK_FULL = 74
# The hang watchdog (trm.training.watchdog) saw no optimizer step (or evaluation batch) within its
# allowance (watchdog.timeout_minutes; watchdog.first_step_minutes for a process's first step, watchdog.eval_minutes
# during an evaluation): every rank wrote its Python thread stacks (hang_rank<r>.txt) and torch's flight
# recorder of its recent collectives (hang_flight_recorder/) into the run directory, then exited. Nothing was saved; the newest
# complete checkpoint is intact. Retryable: the launcher restarts the trainer (at most MAX_RESTARTS), a
# Kubernetes Job counts it and starts a new pod, SkyPilot recovers on it.
HUNG = 77
# The loss or the gradients of a step were not finite (NaN/Inf), or a save found non-finite weights.
# Nothing was saved (the previous checkpoint stays the newest); every rank wrote a repro
# (nonfinite_step<N>_rank<r>.pt: its batch, RNG state, step). Orchestrators must NOT retry it: the resumed
# run replays the same data and diverges again. Change the math (lr, grad_clip_norm) or the data first.
NONFINITE = 78
# The launcher's cost guard (MAX_HOURS) stopped the run: the trainer saved a complete checkpoint first.
# Orchestrators must NOT retry it (a Kubernetes Job would otherwise restart the spend forever). The hours
# belong to the run (RUN_DIR/launch/ledger.json, every session together): a restart with the same MAX_HOURS
# exits OK without training; a person raises MAX_HOURS and the same command resumes with what is left.
BUDGET_STOPPED = 79
# A CUDA out-of-memory error during training (a training step or an in-run evaluation; trm.oom): the trainer
# printed one line naming the step and its micro-batch and exited. Nothing of the failed step was saved; the
# newest complete checkpoint is intact. The launcher answers it itself: it restarts the trainer with half the
# micro-batch and twice the gradient accumulation (the global batch, and so the training math, kept), resumed
# from that checkpoint, and records the step-down (launch/oom_step_down.json, plan.json, the handoff); it
# exits 80 only when even micro-batch 1 runs out of memory (recorded in the run's ledger, so a restart with the
# same configuration exits OK without training) or, on a multi-node run, so that every node restarts at the
# smaller micro-batch. Retrying unchanged on the same GPU fails the same way.
OUT_OF_MEMORY = 80
# The launcher codes orchestrators must not retry (a Kubernetes Job's FailJob rule, jobs/base/job.yaml): a retry
# fails the same way or spends past the budget. The other nodes of a multi-node run stop waiting for node 0's
# dataset when node 0's session ends with one of them.
NOT_RETRIED = frozenset({CONFIG_ERROR, DISK_FULL, NONFINITE, BUDGET_STOPPED})
# `python -m trm experiment batch`: at least one run of the batch failed (each run's own exit code and the
# tail of its log are in batch_results.json). Without --continue-on-failure the batch stopped at the first
# failure, after asking the other running trainers to save. Rerunning the same batch skips finished runs.
RUNS_FAILED = 3
# `python -m trm kaggle publish`: Kaggle (or the network to it) failed a call after publishing began: an HTTP
# error other than a refused credential, a dataset or kernel that Kaggle answered with an error, or a dataset
# still processing when --wait-minutes ran out. The message names the call; what was already published stays
# published. Rerunning the same command publishes again (existing datasets get a new version).
PUBLISH_FAILED = 4
