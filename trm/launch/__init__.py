"""GPU-host launch tooling, one subpackage per concern: `host` (is this machine fit: preflight, GPUs, the
hardware table), `planning` (settings, the plan, estimates, the probe), `running` (the launcher, its
supervisor, torchrun's worker, tmux) and `after_run` (handoff bundle, sync, release, ledger, TensorBoard)."""
