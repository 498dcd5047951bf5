"""torchrun under supervision: the session the steps share, the supervisor and cost guard, the run ledger
(admission and terminal ends), the smoke gate, the train step's restarts, the probe, out-of-memory
step-downs, the compile fallback, the per-rank worker, tmux and the on-start hook."""
